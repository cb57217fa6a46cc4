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
  const std::string& id = running->id;
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
    running->CountCompile(end, last.detail());
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
  if (count) running->CountMeasurement(measurement);
  Publish(running, &measurement, "");
  return stored;
}

void JobRunner::FailProblem(Running* running, const absl::Status& why, bool store_error) {
  running->FailProblem(why.message(), store_error);
  spdlog::warn("job {}: {}", running->id, std::string(why.message()));
}

void JobRunner::OnGpus(const std::atomic<bool>& cancel, size_t gpus,
                       const std::vector<size_t>& indices,
                       const std::function<void(size_t)>& each) {
  std::atomic<size_t> next{0};
  auto loop = [&] {
    while (!cancel) {
      const size_t k = next.fetch_add(1);
      if (k >= indices.size()) return;
      each(indices[k]);
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < gpus; ++i) threads.emplace_back(loop);
  for (std::thread& thread : threads) thread.join();
}

void JobRunner::Measure(Running* running) {
  Work& work = *running->work;
  absl::StatusOr<ProfilePool*> gpus = Gpus();
  ScreenJob job;
  job.job_id = running->id;
  if (!gpus.ok()) {
    FailProblem(running, gpus.status(), /*store_error=*/false);
    return;
  }
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
  const size_t gpu_count = (*gpus)->devices().size();
  Screened screened = RunSearchRounds(running, job, gpu_count);
  if (running->cancel) return;
  SerialStage(running, job, gpu_count, std::move(screened));
}

}  // namespace autotune::service
