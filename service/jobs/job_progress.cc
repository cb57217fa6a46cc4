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
namespace {

// How often a running job is written to the store at most.
constexpr absl::Duration kPersistEvery = absl::Seconds(1);
// Messages kept for watchers that fall behind.
constexpr size_t kKeptMessages = 256;

bool Finished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

}  // namespace

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

Eta EstimateEta(absl::string_view phase, int64_t done, int64_t total, double in_phase_s,
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
  if (phase == "compile") {
    if (done == 0) add(left, rates.compile_s);
    if (measures) {
      add(counts.variants(), rates.screen_s);
      add(validated, rates.serial_s);
    }
  } else if (phase == "screen") {
    if (done == 0) add(left, rates.screen_s);
    add(validated, rates.serial_s);
  } else if (phase == "serial") {
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

void JobRunner::Running::UpdateTiming(const PhaseRates& rates) {
  const absl::Time now = absl::Now();
  v1::JobTiming& timing = *job.mutable_timing();
  const v1::JobCounts& counts = job.counts();
  if (phase == "compile") {
    phase_done = counts.compiled() + counts.compile_cache_hits() + counts.compile_errors();
    phase_total = counts.compiles();
  }
  const double in_phase = absl::ToDoubleSeconds(now - phase_started);
  timing.set_phase(phase);
  timing.set_done(phase_done);
  timing.set_total(phase_total);
  timing.set_elapsed_s(absl::ToDoubleSeconds(now - started));
  const Eta eta = EstimateEta(phase, phase_done, phase_total, in_phase, counts, measures, rates);
  timing.set_eta_s(eta.seconds);
  timing.set_eta_partial(eta.partial);
  timing.set_compile_s(compile_s + (phase == "compile" ? in_phase : 0));
  timing.set_screen_s(screen_s + (phase == "screen" ? in_phase : 0));
  timing.set_serial_s(serial_s + (phase == "serial" ? in_phase : 0));
  timing.set_waited_s(waited_s);
}

void JobRunner::Running::EnterPhase(const std::string& next, int64_t total) {
  const absl::Time now = absl::Now();
  const double in_phase = absl::ToDoubleSeconds(now - phase_started);
  if (phase == "compile") compile_s += in_phase;
  if (phase == "screen") screen_s += in_phase;
  if (phase == "serial") serial_s += in_phase;
  phase = next;
  phase_started = now;
  phase_done = 0;
  phase_total = total;
}

void JobRunner::Publish(Running* running, const v1::Measurement* last, absl::string_view message) {
  v1::Job snapshot;
  bool persist = false;
  const PhaseRates rates = Rates();
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_updated_at(Timestamp());
    running->UpdateTiming(rates);
    running->latest.Clear();
    *running->latest.mutable_job() = running->job;
    if (last != nullptr) *running->latest.mutable_last() = *last;
    running->latest.set_message(std::string(message));
    *running->latest.mutable_timing() = running->job.timing();
    const absl::Time now = absl::Now();
    if (Finished(running->job.state())) {
      // Stored before any watcher sees the end, so whoever asks for the job
      // once its stream has ended reads the end too. (Every other Publish of
      // the job has returned by now: its threads are joined.)
      absl::Status stored = store_->UpdateJob(running->job);
      if (!stored.ok()) {
        spdlog::warn("job {}: cannot store its end: {}", running->job.id(),
                     std::string(stored.message()));
      }
      running->persisted_at = now;
    } else if (now - running->persisted_at >= kPersistEvery) {
      persist = true;
      running->persisted_at = now;
      snapshot = running->job;
    }
    ++running->version;
    if (!message.empty()) {
      running->messages.emplace_back(running->version, std::string(message));
      if (running->messages.size() > kKeptMessages) running->messages.pop_front();
    }
  }
  if (persist) {
    absl::Status stored = store_->UpdateJob(snapshot);
    if (!stored.ok())
      spdlog::warn("job {}: cannot store progress: {}", snapshot.id(),
                   std::string(stored.message()));
  }
}

absl::Status JobRunner::Watch(absl::string_view id,
                              const std::function<bool(const v1::JobProgress&)>& on_progress,
                              const std::function<bool()>& stop) {
  std::shared_ptr<Running> running;
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
    v1::JobProgress progress;
    std::vector<std::string> missed;  // messages of versions this watcher skipped
    bool finished = false;
    {
      absl::MutexLock lock(&running->mu);
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(running->mu) {
        return running->version != seen;
      };
      running->mu.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(250));
      if (running->version == seen) {
        if (stop && stop()) return absl::CancelledError("the watcher went away");
        if (running->ended && running->stopping) {
          return absl::UnavailableError("autotuned stopped; the job resumes when it starts again");
        }
        continue;
      }
      if (seen >= 0) {
        for (const auto& [version, message] : running->messages) {
          if (version > seen && version < running->version) missed.push_back(message);
        }
      }
      seen = running->version;
      progress = running->latest;
      // From the snapshot sent, not the live job: the job may have ended
      // after this snapshot was taken, and the final one is still to come.
      finished = Finished(progress.job().state());
    }
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
