#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/timestamp.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/jobs/choice.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/compile_queue.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/job_report.h"
#include "service/jobs/job_runner.h"
#include "service/jobs/job_text.h"
#include "service/jobs/running_job.h"
#include "service/jobs/screen_phase.h"
#include "service/jobs/search.h"
#include "service/jobs/serial_phase.h"
#include "spdlog/spdlog.h"

namespace autotune::service {

CompilePhaseOptions JobRunner::CompileOptions(const Work& work) {
  // Prepare() found one, and a pool, once there, stays.
  CompilePool* pool = *Pool();
  CompilePhaseOptions options;
  options.parallelism =
      options_.compile_parallelism > 0 ? options_.compile_parallelism : pool->size();
  options.timeout = work.options.compile_timeout;
  options.keep_cubins = work.profile;
  return options;
}

void JobRunner::Compile(Running* running, const std::vector<CompileUnit>& units,
                        CompileQueue* queue) {
  Work& work = *running->work;
  std::string id;
  {
    absl::MutexLock lock(&running->mu);
    id = running->job.id();
  }
  const auto report = [&](const CompileUnit& unit, const CompileEnd& end) {
    const bool failed = end.status != v1::OK;
    const bool compile_failed = failed && end.store_error.ok();
    v1::Measurement last;
    if (compile_failed) {
      last.set_family(unit.record->family.name());
      last.set_family_hash(unit.record->content_hash);
      *last.mutable_problem() = unit.problem;
      *last.mutable_config() = unit.config;
      last.set_status(end.status);
      last.set_phase(v1::COMPILE);
      last.set_detail(absl::StrCat(unit.config.params().empty() ? "reference kernel " : "",
                                   unit.name_expression, ": ", LogExcerpt(end.log)));
      last.set_job_id(id);
      last.set_measured_at(Timestamp());
    }
    {
      absl::MutexLock lock(&running->mu);
      v1::JobCounts* counts = running->job.mutable_counts();
      if (!end.store_error.ok()) {
        if (running->store_error.empty()) {
          running->store_error = std::string(end.store_error.message());
        }
      } else if (end.cache_hit) {
        counts->set_compile_cache_hits(counts->compile_cache_hits() + 1);
      } else if (!failed) {
        counts->set_compiled(counts->compiled() + 1);
      }
      if (compile_failed) {
        counts->set_compile_errors(counts->compile_errors() + 1);
        running->compile_errors.Add(FirstErrorLine(end.log), last.detail());
      }
      if (end.status == v1::COMPILE_TIMEOUT) {
        counts->set_compile_timeouts(counts->compile_timeouts() + 1);
      }
    }
    Publish(running, compile_failed ? &last : nullptr,
            end.store_error.ok() ? "" : end.store_error.message());
  };
  CompileResults compiled = queue != nullptr
                                ? queue->Need(units, report)
                                : RunCompilePhase(units, *store_, **Pool(), CompileOptions(work),
                                                  running->cancel, report);
  for (auto& [key, end] : compiled) work.compiled[key] = std::move(end);
}

absl::Status JobRunner::Record(Running* running, const v1::Measurement& measurement, bool count) {
  absl::Status stored = store_->AddMeasurement(measurement);
  if (count) {
    absl::MutexLock lock(&running->mu);
    v1::JobCounts* counts = running->job.mutable_counts();
    switch (measurement.status()) {
      case v1::OK:
        counts->set_ok(counts->ok() + 1);
        break;
      case v1::WRONG_RESULT:
        counts->set_wrong_result(counts->wrong_result() + 1);
        break;
      case v1::TIMEOUT:
        counts->set_timeout(counts->timeout() + 1);
        break;
      case v1::FAULT:
        counts->set_fault(counts->fault() + 1);
        break;
      case v1::UNSUPPORTED:
        counts->set_unsupported(counts->unsupported() + 1);
        break;
      default:
        break;
    }
    if (measurement.carried()) {
      counts->set_carried(counts->carried() + 1);
    } else if (measurement.phase() != v1::COMPILE) {
      counts->set_measured(counts->measured() + 1);
    }
    if (running->phase == "screen") ++running->phase_done;
  }
  Publish(running, &measurement, "");
  return stored;
}

void JobRunner::FailProblem(Running* running, const absl::Status& why, bool store_error) {
  std::string job_id;
  {
    absl::MutexLock lock(&running->mu);
    job_id = running->job.id();
    if (running->problems_failed++ == 0) running->first_problem_error = std::string(why.message());
    if (store_error && running->store_error.empty()) {
      running->store_error = std::string(why.message());
    }
  }
  spdlog::warn("job {}: {}", job_id, std::string(why.message()));
}

namespace {

// A problem's search as the job runs it: what it proposed and what its
// batches screened.
struct ProblemSearch {
  std::unique_ptr<Search> search;
  ScreenResult screens;  // every batch's, added up (AddScreens)
  bool done = false;
  std::vector<int64_t> batch;  // proposed for the round running now
  v1::SearchReport report;
  double best_us = 0;
};

// The space as the search sees it: each variant's parameter values (in the
// family's parameter order), the default config and the hints.
SearchSpaceView ViewOf(const PlannedProblem& problem) {
  const v1::KernelFamily& family = problem.record->family;
  SearchSpaceView view;
  view.variants = static_cast<int64_t>(problem.space.variants.size());
  view.feature_count = family.params_size();
  view.features.reserve(static_cast<size_t>(view.variants * view.feature_count));
  for (int64_t i = 0; i < view.variants; ++i) {
    const v1::Config& config = problem.space.variants[static_cast<size_t>(i)].config;
    for (const v1::TunableParameter& param : family.params()) {
      auto it = config.params().find(param.name());
      view.features.push_back(it == config.params().end() ? 0.0F : static_cast<float>(it->second));
    }
    if (family.has_default_config() && SameConfig(config, family.default_config())) {
      view.default_index = i;
    }
    for (const v1::Config& hint : problem.hints) {
      if (SameConfig(config, hint)) view.hints.push_back(i);
    }
  }
  return view;
}

}  // namespace

void JobRunner::Measure(Running* running) {
  Work& work = *running->work;
  absl::StatusOr<ProfilePool*> gpus = Gpus();
  ScreenJob job;
  {
    absl::MutexLock lock(&running->mu);
    job.job_id = running->job.id();
  }
  if (!gpus.ok()) {
    FailProblem(running, gpus.status(), /*store_error=*/false);
    return;
  }
  const size_t gpu_count = (*gpus)->devices().size();
  job.arch = work.plan.arch;
  job.nvrtc_version = work.nvrtc_version;
  job.options = &work.options;
  job.compiled = &work.compiled;
  job.store = store_;
  job.gpus = *gpus;
  job.reuse_stored = work.resumed;
  job.progress = [this, running](const std::string& message) {
    Publish(running, nullptr, message);
  };
  job.record = [this, running](const v1::Measurement& m, bool count) {
    return Record(running, m, count);
  };
  // One thread per GPU, each taking the next problem of `indices`.
  auto on_gpus = [&](const std::vector<size_t>& indices, const std::function<void(size_t)>& each) {
    std::atomic<size_t> next{0};
    auto loop = [&] {
      while (!running->cancel) {
        const size_t k = next.fetch_add(1);
        if (k >= indices.size()) return;
        each(indices[k]);
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 0; i < gpu_count; ++i) threads.emplace_back(loop);
    for (std::thread& thread : threads) thread.join();
  };

  // Each problem's search proposes a batch; what the batches need is
  // compiled, then screened (GPUs in parallel), and the searches learn the
  // results; until every search is done. An exhaustive search proposes its
  // whole space at once: one compile phase, one screen.
  const size_t n = work.plan.problems.size();
  std::vector<ProblemSearch> searches(n);
  std::map<std::string, size_t> unit_of;  // compile key -> index in plan.units
  for (size_t u = 0; u < work.plan.units.size(); ++u) unit_of[work.plan.units[u].key] = u;
  for (size_t i = 0; i < n; ++i) {
    const PlannedProblem& problem = work.plan.problems[i];
    ProblemSearch& s = searches[i];
    s.report.set_strategy(problem.search.kind == SearchKind::kModel    ? v1::MODEL
                          : problem.search.kind == SearchKind::kRandom ? v1::RANDOM
                                                                       : v1::EXHAUSTIVE);
    s.report.set_seed(problem.search.seed);
    s.report.set_space(static_cast<int64_t>(problem.space.variants.size()));
    const SearchSpaceView view = ViewOf(problem);
    if (problem.search.kind == SearchKind::kModel) {
      s.report.set_hints(static_cast<int32_t>(view.hints.size()));
    }
    absl::StatusOr<std::unique_ptr<Search>> search = MakeSearch(problem.search, view);
    if (!search.ok()) {
      s.screens.error = absl::InvalidArgumentError(
          absl::StrCat(ProblemContext(problem.record->family.name(), problem.problem),
                       ": its search: ", search.status().message()));
      s.done = true;
      continue;
    }
    s.search = *std::move(search);
    s.report.set_budget(s.search->budget());
  }
  {
    absl::MutexLock lock(&running->mu);
    running->job.mutable_counts()->set_compiles(0);
  }
  // While a round is measured, the queue compiles what the searches expect
  // to propose next (Search::Ahead): up to options_.compile_ahead times each
  // batch, likeliest first, the problems taking turns.
  const CompilePhaseOptions compile_options = CompileOptions(work);
  CompilePool* pool = *Pool();
  // Guesses leave two cores to each GPU's worker: 16 compile workers busy
  // beside one measuring made its validation 25% slower on the H200 host.
  CompileQueue queue(
      compile_options.parallelism, compile_options.parallelism - 2 * static_cast<int>(gpu_count),
      [&](const CompileUnit& unit, bool guess) {
        CompilePhaseOptions options = compile_options;
        options.keep_cubins = options.keep_cubins && !guess;  // read back if needed
        return CompileOne(unit, *store_, *pool, options);
      },
      &running->cancel);
  const absl::Time rounds_started = absl::Now();
  for (int round = 1; !running->cancel; ++round) {
    std::vector<size_t> proposing;
    std::set<std::string> keys;
    int64_t batch_variants = 0;
    const double searched_s = absl::ToDoubleSeconds(absl::Now() - rounds_started);
    for (size_t i = 0; i < n; ++i) {
      ProblemSearch& s = searches[i];
      if (s.done) continue;
      // A time budget ends a search between rounds, never before its first.
      const double max_seconds = work.plan.problems[i].search.max_seconds;
      if (round > 1 && max_seconds > 0 && searched_s >= max_seconds) {
        s.report.set_out_of_time(true);
        s.done = true;
        continue;
      }
      s.batch = s.search->Next(s.search->budget());
      if (s.batch.empty()) {
        s.done = true;
        continue;
      }
      proposing.push_back(i);
      batch_variants += static_cast<int64_t>(s.batch.size());
      const PlannedProblem& problem = work.plan.problems[i];
      keys.insert(problem.reference_key);
      for (int64_t v : s.batch) keys.insert(problem.variant_keys[static_cast<size_t>(v)]);
    }
    if (proposing.empty()) break;
    // In plan order: the compiles every batch needs that no round compiled.
    std::vector<size_t> needed;
    for (const std::string& key : keys) {
      if (!work.compiled.contains(key)) needed.push_back(unit_of.at(key));
    }
    std::sort(needed.begin(), needed.end());
    std::vector<CompileUnit> units;
    for (size_t u : needed) units.push_back(work.plan.units[u]);
    {
      absl::MutexLock lock(&running->mu);
      running->job.set_state(v1::COMPILING);
      v1::JobCounts* counts = running->job.mutable_counts();
      counts->set_compiles(counts->compiles() + static_cast<int64_t>(units.size()));
      running->EnterPhase("compile", static_cast<int64_t>(units.size()));
    }
    const bool searching = round > 1 || batch_variants < work.plan.to_measure;
    Publish(running, nullptr,
            searching ? absl::StrCat("search round ", round, ": compiling ", units.size(),
                                     " distinct variants for ", batch_variants, " proposed in ",
                                     proposing.size(), " problems")
                      : absl::StrCat("compiling ", units.size(), " distinct variants"));
    Compile(running, units, &queue);
    if (running->cancel) return;
    std::vector<std::vector<int64_t>> ahead;
    for (size_t i : proposing) {
      const ProblemSearch& s = searches[i];
      ahead.push_back(
          s.search->Ahead(options_.compile_ahead * static_cast<int64_t>(s.batch.size())));
    }
    std::vector<CompileUnit> guesses;
    for (size_t k = 0, more = 1; more != 0; ++k) {
      more = 0;
      for (size_t p = 0; p < proposing.size(); ++p) {
        if (k >= ahead[p].size()) continue;
        ++more;
        const std::string& key =
            work.plan.problems[proposing[p]].variant_keys[static_cast<size_t>(ahead[p][k])];
        if (!work.compiled.contains(key)) guesses.push_back(work.plan.units[unit_of.at(key)]);
      }
    }
    queue.Guess(std::move(guesses));
    {
      absl::MutexLock lock(&running->mu);
      running->job.set_state(v1::SCREENING);
      running->EnterPhase("screen", batch_variants);
    }
    Publish(running, nullptr,
            absl::StrCat("validating and timing the variants of ", proposing.size(),
                         " problems on ", gpu_count, " GPU(s)",
                         searching ? absl::StrCat(" (search round ", round, ": ", batch_variants,
                                                  " variants)")
                                   : ""));
    on_gpus(proposing, [&](size_t index) {
      const PlannedProblem& problem = work.plan.problems[index];
      ProblemSearch& s = searches[index];
      ScreenResult screened = ScreenProblem(problem, job, &s.batch);
      const std::string context = ProblemContext(problem.record->family.name(), problem.problem);
      if (screened.reused) {
        Publish(running, nullptr,
                absl::StrCat(context, ": screened before the restart; not measured again"));
      }
      if (screened.carried > 0) {
        Publish(
            running, nullptr,
            absl::StrCat(context, ": ", screened.carried, " screens carried from family version ",
                         screened.carried_from.substr(0, 12),
                         " (the same binaries); only the new variants were screened"));
      }
      // What the search learns: each proposed variant's median, or that
      // it failed (not compiled, not valid, not finished).
      std::map<int64_t, double> median;
      for (const ScreenedVariant& v : screened.ok) {
        median[v.variant - problem.space.variants.data()] = v.measurement.timing().median_us();
      }
      for (int64_t v : s.batch) {
        auto it = median.find(v);
        const bool valid = it != median.end();
        s.report.set_measured(s.report.measured() + 1);
        if (valid && (s.best_us == 0 || it->second < s.best_us)) {
          s.best_us = it->second;
          v1::SearchReport::Step* step = s.report.add_best();
          step->set_measured(s.report.measured());
          step->set_median_us(s.best_us);
        }
        s.search->Record(v, {.valid = valid, .median_us = valid ? it->second : 0});
      }
      s.report.set_rounds(s.report.rounds() + 1);
      AddScreens(std::move(screened), &s.screens);
      if (!s.screens.error.ok()) s.done = true;  // the problem cannot go on
    });
  }
  queue.Guess({});  // nothing more to guess: the serial phase comes
  if (running->cancel) return;
  if (const CompileQueue::Stats ahead = queue.stats(); ahead.guessed > 0) {
    Publish(running, nullptr,
            absl::StrCat("compiled ahead of their rounds: ", ahead.guessed, " variants, ",
                         ahead.used, " of them proposed since"));
  }
  std::vector<ScreenResult> screens(n);
  for (size_t i = 0; i < n; ++i) {
    const PlannedProblem& problem = work.plan.problems[i];
    ProblemSearch& s = searches[i];
    FinishScreens(ProblemContext(problem.record->family.name(), problem.problem), &s.screens);
    s.screens.search = DescribeSearch(problem.search, s.report);
    screens[i] = std::move(s.screens);
  }

  int64_t to_validate = 0;
  for (const ScreenResult& screen : screens) to_validate += screen.error.ok() ? 1 : 0;
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_state(v1::VALIDATING);
    running->EnterPhase("serial", to_validate);
  }
  Publish(running, nullptr,
          absl::StrCat("serial validation of ", to_validate, " problems, one GPU each"));
  SerialJob serial;
  serial.job_id = job.job_id;
  serial.arch = job.arch;
  serial.nvrtc_version = job.nvrtc_version;
  serial.store = store_;
  serial.gpus = *gpus;
  serial.options = &work.options;
  serial.record = job.record;
  serial.progress = [this, running](const std::string& message) {
    Publish(running, nullptr, message);
  };
  serial.cancel = &running->cancel;
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  on_gpus(all, [&](size_t index) {
    const PlannedProblem& problem = work.plan.problems[index];
    ScreenResult& screen = screens[index];
    if (!screen.error.ok()) {
      FailProblem(running, screen.error, screen.store_failed);
      v1::ProblemReport report = MakeProblemReport(problem, screen, nullptr);
      *report.mutable_search() = searches[index].report;
      absl::MutexLock lock(&running->mu);
      running->reports.push_back(std::move(report));
      return;
    }
    SerialResult result = RunSerialPhase(problem, screen, serial);
    v1::ProblemReport report = MakeProblemReport(problem, screen, &result);
    *report.mutable_search() = searches[index].report;
    screen = ScreenResult();  // its images are no longer needed
    {
      absl::MutexLock lock(&running->mu);
      running->reports.push_back(report);
      running->waited_s += result.waited_s;
      ++running->phase_done;
      if (result.entry) *running->job.add_results() = *result.entry;
    }
    if (!result.error.ok()) {
      FailProblem(running, result.error, result.store_failed);
      return;
    }
    Publish(running, nullptr,
            absl::StrCat(ProblemContext(problem.record->family.name(), problem.problem), ": best ",
                         kernels::ConfigLabel(problem.record->family, result.entry->config()),
                         " at ", result.entry->timing().median_us(), " us (",
                         result.entry->candidates(), " candidates, ", result.entry->rounds(),
                         " serial rounds", result.entry->tie() ? ", a tie" : "",
                         result.entry->contended() ? ", CONTENDED" : "", ")"));
  });
}

}  // namespace autotune::service
