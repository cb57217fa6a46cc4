#include "service/jobs/job_progress.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "service/jobs/job_runner.h"
#include "service/jobs/job_text.h"
#include "service/jobs/running_job.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
PhaseRates PhaseRates::Of(const v1::Job& job) {
  const v1::JobTiming& timing = job.timing();
  const v1::JobCounts& counts = job.counts();
  PhaseRates rates;
  if (counts.compiles() > 0) rates.compile_s = timing.compile_s() / counts.compiles();
  if (counts.variants() > 0 && timing.screen_s() > 0) {
    rates.screen_s = timing.screen_s() / counts.variants();
  }
  const int64_t validated = counts.problems() - counts.cached_problems();
  if (validated > 0 && timing.serial_s() > 0) rates.serial_s = timing.serial_s() / validated;
  return rates;
}

PhaseRates PhaseRates::Updated(const PhaseRates& newer) const {
  PhaseRates rates = *this;
  if (newer.compile_s > 0) rates.compile_s = newer.compile_s;
  if (newer.screen_s > 0) rates.screen_s = newer.screen_s;
  if (newer.serial_s > 0) rates.serial_s = newer.serial_s;
  return rates;
}

const char* JobStageName(JobStage stage) {
  switch (stage) {
    case JobStage::kCompile:
      return "compile";
    case JobStage::kScreen:
      return "screen";
    case JobStage::kSerial:
      return "serial";
    case JobStage::kDone:
      return "done";
  }
  return "unknown";
}

Eta EstimateEta(JobStage stage, int64_t done, int64_t total, double in_phase_s,
                const v1::JobCounts& counts, bool measures, const PhaseRates& rates) {
  Eta eta;
  const auto add = [&](int64_t units, double rate) {
    if (units <= 0) return;
    if (rate > 0) {
      eta.seconds += rate * static_cast<double>(units);
    } else {
      eta.partial = true;
    }
  };
  const int64_t left = total - done;
  if (done > 0 && left > 0) {
    eta.seconds += in_phase_s / static_cast<double>(done) * static_cast<double>(left);
  }
  const int64_t validated = counts.problems() - counts.cached_problems();
  if (stage == JobStage::kCompile) {
    if (done == 0) add(left, rates.compile_s);
    if (measures) {
      add(counts.variants(), rates.screen_s);
      add(validated, rates.serial_s);
    }
  } else if (stage == JobStage::kScreen) {
    if (done == 0) add(left, rates.screen_s);
    add(validated, rates.serial_s);
  } else if (stage == JobStage::kSerial) {
    if (done == 0) add(left, rates.serial_s);
  }
  return eta;
}

PhaseRates JobRunner::Rates() {
  absl::MutexLock lock(&rates_mu_);
  if (rates_) return *rates_;
  PhaseRates rates;
  // The last jobs this database saw, oldest first, so the newest win.
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs(20);
  if (jobs.ok()) {
    for (auto it = jobs->rbegin(); it != jobs->rend(); ++it) {
      if (it->state() == v1::SUCCEEDED) rates = rates.Updated(PhaseRates::Of(*it));
    }
  } else {
    spdlog::warn("cannot read the last jobs for their phase rates: {}",
                 std::string(jobs.status().message()));
  }
  rates_ = rates;
  return rates;
}

void JobRunner::LearnRates(const v1::Job& finished) {
  const PhaseRates learned = PhaseRates::Of(finished);
  const PhaseRates known = Rates();
  absl::MutexLock lock(&rates_mu_);
  rates_ = known.Updated(learned);
}

void JobRunner::Publish(RunningJob* running, const v1::Measurement* last,
                        absl::string_view message) {
  v1::Job snapshot;
  running->Publish(
      last, message, Rates(),
      [this, running](const v1::Job& ended) {
        absl::Status stored = store_->UpdateJob(ended);
        if (!stored.ok()) {
          spdlog::warn("job {}: cannot store its end: {}", running->id,
                       std::string(stored.message()));
        }
      },
      &snapshot);
  if (!snapshot.id().empty()) {
    absl::Status stored = store_->UpdateJob(snapshot);
    if (!stored.ok()) {
      spdlog::warn("job {}: cannot store progress: {}", snapshot.id(),
                   std::string(stored.message()));
    }
  }
}

absl::Status JobRunner::Watch(absl::string_view id,
                              const std::function<bool(const v1::JobProgress&)>& on_progress,
                              const std::function<bool()>& stop) {
  std::shared_ptr<RunningJob> running;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(std::string(id));
    if (it != running_.end()) running = it->second;
  }
  if (running == nullptr) {
    ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(std::string(id)));
    v1::JobProgress progress;
    *progress.mutable_job() = std::move(job);
    on_progress(progress);
    return absl::OkStatus();
  }
  int64_t seen = -1;
  while (true) {
    RunningJob::Update update = running->Await(seen, absl::Milliseconds(250));
    if (!update.changed) {
      if (stop && stop()) return absl::CancelledError("the watcher went away");
      if (running->ended && running->stopping) {
        return absl::UnavailableError("autotuned stopped; the job resumes when it starts again");
      }
      continue;
    }
    seen = update.version;
    const v1::JobProgress& progress = update.progress;
    const std::vector<std::string>& missed = update.missed;
    // From the snapshot sent, not the live job: the job may have ended
    // after this snapshot was taken, and the final one is still to come.
    const bool finished = JobFinished(progress.job().state());
    for (const std::string& message : missed) {
      v1::JobProgress earlier;
      *earlier.mutable_job() = progress.job();
      *earlier.mutable_timing() = progress.timing();
      earlier.set_message(message);
      if (!on_progress(earlier)) return absl::OkStatus();
    }
    if (!on_progress(progress) || finished) return absl::OkStatus();
    if (stop && stop()) return absl::CancelledError("the watcher went away");
  }
}

}  // namespace autotune::service
