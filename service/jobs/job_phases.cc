#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/timestamp.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/job_report.h"
#include "service/jobs/job_runner.h"
#include "service/jobs/job_text.h"
#include "service/jobs/running_job.h"
#include "service/jobs/screen_phase.h"
#include "service/jobs/serial_phase.h"
#include "spdlog/spdlog.h"

namespace autotune::service {

void JobRunner::Compile(Running* running) {
  Work& work = *running->work;
  // Prepare() found one, and a pool, once there, stays.
  CompilePool* pool = *Pool();
  CompilePhaseOptions options;
  options.parallelism =
      options_.compile_parallelism > 0 ? options_.compile_parallelism : pool->size();
  options.timeout = work.options.compile_timeout;
  options.keep_cubins = work.profile;
  std::string id;
  {
    absl::MutexLock lock(&running->mu);
    id = running->job.id();
  }
  work.compiled = RunCompilePhase(
      work.plan.units, *store_, *pool, options, running->cancel,
      [&](const CompileUnit& unit, const CompileEnd& end) {
        const bool failed = end.status != v1::OK;
        const bool compile_failed = failed && end.store_error.ok();
        v1::Measurement last;
        if (compile_failed) {
          last.set_family(unit.family);
          last.set_family_hash(unit.family_hash);
          *last.mutable_problem() = unit.problem;
          *last.mutable_config() = unit.config;
          last.set_status(end.status);
          last.set_phase(v1::COMPILE);
          last.set_detail(absl::StrCat(unit.config.params().empty() ? "reference kernel " : "",
                                       unit.task.name_expression(), ": ", LogExcerpt(end.log)));
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
            if (running->first_compile_error.empty()) running->first_compile_error = last.detail();
          }
          if (end.status == v1::COMPILE_TIMEOUT) {
            counts->set_compile_timeouts(counts->compile_timeouts() + 1);
          }
        }
        Publish(running, compile_failed ? &last : nullptr,
                end.store_error.ok() ? "" : end.store_error.message());
      });
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

void JobRunner::Measure(Running* running) {
  Work& work = *running->work;
  absl::StatusOr<ProfilePool*> gpus = Gpus();
  ScreenJob job;
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_state(v1::SCREENING);
    job.job_id = running->job.id();
    running->EnterPhase("screen", work.plan.variants);
  }
  if (!gpus.ok()) {
    FailProblem(running, gpus.status(), /*store_error=*/false);
    return;
  }
  const size_t gpu_count = (*gpus)->devices().size();
  Publish(running, nullptr,
          absl::StrCat("validating and timing the variants of ", work.plan.problems.size(),
                       " problems on ", gpu_count, " GPU(s)"));
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
  // One thread per GPU, each taking the next problem: first every screen
  // (GPUs in parallel), then the serial phase of each problem.
  auto on_gpus = [&](const std::function<void(size_t)>& each) {
    std::atomic<size_t> next{0};
    auto loop = [&] {
      while (!running->cancel) {
        const size_t index = next.fetch_add(1);
        if (index >= work.plan.problems.size()) return;
        each(index);
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 0; i < gpu_count; ++i) threads.emplace_back(loop);
    for (std::thread& thread : threads) thread.join();
  };
  std::vector<ScreenResult> screens(work.plan.problems.size());
  on_gpus([&](size_t index) {
    screens[index] = ScreenProblem(work.plan.problems[index], job);
    const std::string context = ProblemContext(work.plan.problems[index].record->family.name(),
                                               work.plan.problems[index].problem);
    if (screens[index].reused) {
      Publish(running, nullptr,
              absl::StrCat(context, ": screened before the restart; not measured again"));
    }
    if (screens[index].carried > 0) {
      Publish(running, nullptr,
              absl::StrCat(context, ": ", screens[index].carried,
                           " screens carried from family version ",
                           screens[index].carried_from.substr(0, 12),
                           " (the same binaries); only the new variants were screened"));
    }
  });
  if (running->cancel) return;

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
  on_gpus([&](size_t index) {
    const PlannedProblem& problem = work.plan.problems[index];
    ScreenResult& screen = screens[index];
    if (!screen.error.ok()) {
      FailProblem(running, screen.error, screen.store_failed);
      absl::MutexLock lock(&running->mu);
      running->reports.push_back(MakeProblemReport(problem, screen, nullptr));
      return;
    }
    SerialResult result = RunSerialPhase(problem, screen, serial);
    const v1::ProblemReport report = MakeProblemReport(problem, screen, &result);
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
