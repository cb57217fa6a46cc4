#include "service/jobs/search_stage.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/problem.h"
#include "service/jobs/choice.h"
#include "service/jobs/compile_stage.h"
#include "service/jobs/screen_phase.h"
#include "service/jobs/search.h"

namespace autotune::service {
namespace {

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

v1::SearchStrategy StrategyOf(SearchKind kind) {
  switch (kind) {
    case SearchKind::kModel:
      return v1::MODEL;
    case SearchKind::kRandom:
      return v1::RANDOM;
    default:
      return v1::EXHAUSTIVE;
  }
}

}  // namespace

class SearchStage::Rounds {
 public:
  explicit Rounds(const StageContext& context)
      : context_(context),
        running_(context.job),
        work_(*context.work),
        job_(context.Screening()),
        gpus_(context.gpu_count()),
        compile_options_(context.compile_options),
        // Guesses leave two cores to each GPU's worker: 16 compile workers
        // busy beside one measuring made its validation 25% slower on the
        // H200 host.
        queue_(
            compile_options_.parallelism,
            compile_options_.parallelism - 2 * static_cast<int>(gpus_),
            [this](const CompileUnit& unit, bool guess) {
              CompilePhaseOptions options = compile_options_;
              options.keep_cubins = options.keep_cubins && !guess;  // read back if needed
              return CompileOne(unit, *context_.store, *context_.compile_pool, options);
            },
            &context.job->cancel) {
    for (size_t u = 0; u < work_.plan.units.size(); ++u) unit_of_[work_.plan.units[u].key] = u;
  }

  // Every round until the searches are done (or the job is cancelled: the
  // result is then incomplete and unused).
  ScreenedProblems Run() {
    StartSearches();
    const absl::Time started = absl::Now();
    for (int round = 1; !running_->cancel; ++round) {
      const std::vector<size_t> proposing =
          Propose(round, absl::ToDoubleSeconds(absl::Now() - started));
      if (proposing.empty()) break;
      CompileRound(round, proposing);
      if (running_->cancel) break;
      GuessAhead(proposing);
      ScreenRound(round, proposing);
    }
    queue_.Guess({});  // nothing more to guess: the serial phase comes
    return Finish();
  }

 private:
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

  void StartSearches() {
    searches_.resize(work_.plan.problems.size());
    for (size_t i = 0; i < searches_.size(); ++i) {
      const PlannedProblem& problem = work_.plan.problems[i];
      ProblemSearch& s = searches_[i];
      s.report.set_strategy(StrategyOf(problem.search.kind));
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
    running_->ClearCompiles();
  }

  // The problems whose search proposed a batch this round. A time budget
  // ends a search between rounds, never before its first.
  std::vector<size_t> Propose(int round, double searched_s) {
    std::vector<size_t> proposing;
    batch_variants_ = 0;
    for (size_t i = 0; i < searches_.size(); ++i) {
      ProblemSearch& s = searches_[i];
      if (s.done) continue;
      if (work_.plan.problems[i].search.budget.OutOfTime(searched_s, round - 1)) {
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
      batch_variants_ += static_cast<int64_t>(s.batch.size());
    }
    return proposing;
  }

  // The compiles every batch needs that no round compiled, in plan order.
  void CompileRound(int round, const std::vector<size_t>& proposing) {
    std::set<std::string> keys;
    for (size_t i : proposing) {
      const PlannedProblem& problem = work_.plan.problems[i];
      keys.insert(problem.reference_key);
      for (int64_t v : searches_[i].batch) {
        keys.insert(problem.variant_keys[static_cast<size_t>(v)]);
      }
    }
    std::vector<size_t> needed;
    for (const std::string& key : keys) {
      if (!work_.compiled.contains(key)) needed.push_back(unit_of_.at(key));
    }
    std::sort(needed.begin(), needed.end());
    std::vector<CompileUnit> units;
    for (size_t u : needed) units.push_back(work_.plan.units[u]);
    running_->AddCompiles(static_cast<int64_t>(units.size()));
    running_->EnterStage(JobStage::kCompile, static_cast<int64_t>(units.size()));
    searching_ = round > 1 || batch_variants_ < work_.plan.to_measure;
    context_.Announce(searching_
                          ? absl::StrCat("search round ", round, ": compiling ", units.size(),
                                         " distinct variants for ", batch_variants_,
                                         " proposed in ", proposing.size(), " problems")
                          : absl::StrCat("compiling ", units.size(), " distinct variants"));
    CompileStage(context_).Run(units, &queue_);
  }

  // While the round is measured, the queue compiles what the searches expect
  // to propose next (Search::Ahead): up to compile_ahead times each batch,
  // likeliest first, the problems taking turns.
  void GuessAhead(const std::vector<size_t>& proposing) {
    std::vector<std::vector<int64_t>> ahead;
    for (size_t i : proposing) {
      const ProblemSearch& s = searches_[i];
      ahead.push_back(
          s.search->Ahead(context_.compile_ahead * static_cast<int64_t>(s.batch.size())));
    }
    std::vector<CompileUnit> guesses;
    for (size_t k = 0, more = 1; more != 0; ++k) {
      more = 0;
      for (size_t p = 0; p < proposing.size(); ++p) {
        if (k >= ahead[p].size()) continue;
        ++more;
        const std::string& key =
            work_.plan.problems[proposing[p]].variant_keys[static_cast<size_t>(ahead[p][k])];
        if (!work_.compiled.contains(key)) guesses.push_back(work_.plan.units[unit_of_.at(key)]);
      }
    }
    queue_.Guess(std::move(guesses));
  }

  void ScreenRound(int round, const std::vector<size_t>& proposing) {
    running_->EnterStage(JobStage::kScreen, batch_variants_);
    context_.Announce(absl::StrCat(
        "validating and timing the variants of ", proposing.size(), " problems on ", gpus_,
        " GPU(s)",
        searching_ ? absl::StrCat(" (search round ", round, ": ", batch_variants_, " variants)")
                   : ""));
    OnGpus(running_->cancel, gpus_, proposing, [&](size_t index) { ScreenOne(index); });
  }

  // One problem's batch screened, and what its search learns from it: each
  // proposed variant's median, or that it failed (not compiled, not valid,
  // not finished).
  void ScreenOne(size_t index) {
    const PlannedProblem& problem = work_.plan.problems[index];
    ProblemSearch& s = searches_[index];
    ScreenResult screened = ScreenProblem(problem, job_, &s.batch);
    const std::string context = ProblemContext(problem.record->family.name(), problem.problem);
    if (screened.reused) {
      context_.Announce(absl::StrCat(context, ": screened before the restart; not measured again"));
    }
    if (screened.carried > 0) {
      context_.Announce(absl::StrCat(context, ": ", screened.carried,
                                     " screens carried from family version ",
                                     screened.carried_from.substr(0, 12),
                                     " (the same binaries); only the new variants were screened"));
    }
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
  }

  ScreenedProblems Finish() {
    if (const CompileQueue::Stats ahead = queue_.stats(); ahead.guessed > 0 && !running_->cancel) {
      context_.Announce(absl::StrCat("compiled ahead of their rounds: ", ahead.guessed,
                                     " variants, ", ahead.used, " of them proposed since"));
    }
    ScreenedProblems screened;
    for (size_t i = 0; i < searches_.size(); ++i) {
      const PlannedProblem& problem = work_.plan.problems[i];
      ProblemSearch& s = searches_[i];
      FinishScreens(ProblemContext(problem.record->family.name(), problem.problem), &s.screens);
      s.screens.search = DescribeSearch(problem.search, s.report);
      screened.screens.push_back(std::move(s.screens));
      screened.searches.push_back(std::move(s.report));
    }
    return screened;
  }

  const StageContext& context_;
  RunningJob* const running_;
  JobWork& work_;
  const ScreenJob job_;
  const size_t gpus_;
  const CompilePhaseOptions compile_options_;
  CompileQueue queue_;
  std::map<std::string, size_t> unit_of_;  // compile key -> index in plan.units
  std::vector<ProblemSearch> searches_;
  int64_t batch_variants_ = 0;  // proposed this round, over the problems
  bool searching_ = false;      // more than one round, or less than the whole space
};

ScreenedProblems SearchStage::Run() { return Rounds(context_).Run(); }

}  // namespace autotune::service
