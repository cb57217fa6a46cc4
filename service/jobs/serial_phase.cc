#include "service/jobs/serial_phase.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/timestamp.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/jobs/job_text.h"
#include "service/jobs/phase_store.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

// How often a waiting phase asks the GPU again, and says it still waits.
constexpr absl::Duration kProbeEvery = absl::Seconds(1);
constexpr absl::Duration kSayEvery = absl::Seconds(5);

class ProblemSerial {
 public:
  ProblemSerial(const PlannedProblem& problem, const ScreenResult& screen, const SerialJob& job)
      : problem_(problem),
        screen_(screen),
        job_(job),
        family_(problem.record->family),
        context_(ProblemContext(family_.name(), problem.problem)),
        device_(DeviceOf(screen.device)),
        store_(job.record) {}

  SerialResult Run() {
    std::vector<Candidate> screened;
    for (const ScreenedVariant& s : screen_.ok) {
      screened.push_back({.config = s.measurement.config(),
                          .index = s.variant->index,
                          .timing = s.measurement.timing()});
    }
    const v1::Config* current = problem_.current_config ? &*problem_.current_config : nullptr;
    const v1::Config* family_default =
        family_.has_default_config() ? &family_.default_config() : nullptr;
    for (const ScreenedVariant& s : screen_.ok) {
      if (family_default != nullptr && SameConfig(s.measurement.config(), *family_default)) {
        result_.default_median_us = s.measurement.timing().median_us();
      }
    }
    std::vector<size_t> chosen =
        SelectCandidates(screened, current, family_default, job_.options->candidates);

    std::unique_ptr<ProfilePool::Reservation> gpu = job_.gpus->Reserve();
    int contended_retries = 0;
    while (true) {
      if (chosen.empty()) return Failed(absl::AbortedError("no candidate passed the serial phase"));
      if (Cancelled()) return Failed(absl::CancelledError("cancelled"));
      wv1::DeviceState seen;
      if (absl::Status quiet = WaitForQuiet(*gpu, &seen); !quiet.ok()) return Failed(quiet);

      wv1::ProfileTask task = screen_.task;
      task.clear_variants();
      for (size_t i : chosen) {
        const std::string id = absl::StrCat(screen_.ok[i].variant->index);
        for (const wv1::KernelImage& image : screen_.task.variants()) {
          if (image.id() == id) *task.add_variants() = image;
        }
      }
      task.set_task_id(absl::StrCat(screen_.task.task_id(), "/serial"));
      *task.mutable_serial() = job_.options->rounds;
      // Validation is as in the screen; only the rounds are timed.
      task.set_timing_budget_s(std::max(task.timing_budget_s(), 1e-3));
      const absl::Time lease_start = absl::Now();
      bool leased_wait = false;
      ProfileResult run = gpu->Profile(
          task,
          [&](const wv1::VariantOutcome& outcome) {
            if (outcome.status() == v1::OK) return;
            // Valid in the screen, not now: a racy or input-dependent kernel.
            Drop(&chosen, outcome.variant_id(), outcome.status(), outcome.detail());
          },
          [&](const std::string& holder) {
            leased_wait = true;
            Say(absl::StrCat("waiting for the lease of GPU ", gpu->device().ordinal(), ", held by ",
                             holder));
          });
      if (leased_wait) result_.waited_s += absl::ToDoubleSeconds(absl::Now() - lease_start);
      if (!store_.error().ok()) return StoreFailed(store_.error());
      if (run.done.status() != v1::OK) {
        const std::string prefix = "serial variant ";
        if (absl::StartsWith(run.done.phase(), prefix)) {
          // One candidate failed in the rounds: without it, again.
          Drop(&chosen, run.done.phase().substr(prefix.size()), run.done.status(),
               run.done.detail());
          if (!store_.error().ok()) return StoreFailed(store_.error());
          continue;
        }
        return Failed(absl::AbortedError(
            absl::StrCat("serial phase: ", run.done.phase(), ": ", run.done.detail())));
      }
      const wv1::SerialReport& report = run.done.serial();
      if (report.contended_rounds() > 0 && !job_.options->force &&
          contended_retries++ < kContendedRetries) {
        Say(absl::StrCat("another process used GPU ", gpu->device().ordinal(), " during ",
                         report.contended_rounds(), " of ", report.rounds(), " serial rounds (",
                         DescribeProcesses(report.foreign()),
                         "); measuring again once it is quiet"));
        continue;
      }
      std::string contention;
      if (report.contended_rounds() > 0) {
        contention = absl::StrCat(
            report.contended_rounds(), " of ", report.rounds(),
            " rounds with other compute processes: ", DescribeProcesses(report.foreign()));
      } else if (!seen.foreign().empty()) {
        contention = absl::StrCat("before the rounds: ", DescribeDeviceState(seen));
      }
      return Choose(chosen, run, contention);
    }
  }

 private:
  bool Cancelled() const { return job_.cancel != nullptr && job_.cancel->load(); }

  void Say(const std::string& message) {
    if (job_.progress) job_.progress(absl::StrCat(context_, ": ", message));
  }

  // Until NVML sees no other compute process on the GPU, or with `force`
  // at once. `seen` is what was there when the wait ended.
  absl::Status WaitForQuiet(ProfilePool::Reservation& gpu, wv1::DeviceState* seen) {
    const absl::Time start = absl::Now();
    absl::Time said = absl::InfinitePast();
    while (true) {
      absl::StatusOr<wv1::DeviceState> state = gpu.Probe();
      if (!state.ok()) return state.status();
      *seen = *state;
      if (!state->nvml_error().empty()) {
        nvml_error_ = state->nvml_error();
        return absl::OkStatus();
      }
      if (state->foreign().empty() || job_.options->force) return absl::OkStatus();
      const absl::Duration waited = absl::Now() - start;
      if (waited >= job_.options->quiet_wait) {
        return absl::UnavailableError(absl::StrCat(
            "GPU ", gpu.device().ordinal(), " was not quiet for the serial phase within ",
            absl::FormatDuration(job_.options->quiet_wait), ": ", DescribeDeviceState(*state),
            "; stop those processes, or measure anyway with JobOptions.force (entries are then "
            "marked CONTENDED)"));
      }
      if (absl::Now() - said >= kSayEvery) {
        said = absl::Now();
        Say(absl::StrCat("waiting for a quiet GPU ", gpu.device().ordinal(), ": ",
                         DescribeDeviceState(*state), " (",
                         absl::FormatDuration(absl::Trunc(waited, absl::Seconds(1))),
                         " of at most ", absl::FormatDuration(job_.options->quiet_wait), ")"));
      }
      if (Cancelled()) return absl::CancelledError("cancelled while waiting for a quiet GPU");
      absl::SleepFor(kProbeEvery);
      result_.waited_s = absl::ToDoubleSeconds(absl::Now() - start);
    }
  }

  const ScreenedVariant* ById(const std::string& id) const {
    for (const ScreenedVariant& s : screen_.ok) {
      if (absl::StrCat(s.variant->index) == id) return &s;
    }
    return nullptr;
  }

  // Takes the candidate out, with a measurement of why.
  void Drop(std::vector<size_t>* chosen, const std::string& id, v1::VariantStatus status,
            const std::string& detail) {
    const ScreenedVariant* variant = ById(id);
    if (variant == nullptr) return;
    v1::Measurement m = variant->measurement;
    m.clear_timing();
    m.set_status(status);
    m.set_phase(v1::SERIAL_VALIDATION);
    m.set_measured_at(Timestamp());
    m.set_detail(absl::StrCat("valid in the screen, ", v1::VariantStatus_Name(status),
                              " in the serial phase: ", detail));
    ++result_.status_counts[v1::VariantStatus_Name(status)];
    Record(m);
    chosen->erase(std::remove_if(chosen->begin(), chosen->end(),
                                 [&](size_t i) { return &screen_.ok[i] == variant; }),
                  chosen->end());
  }

  // Serial timings are not more variants: not counted in the job.
  void Record(const v1::Measurement& m) { store_.Record(m, /*count=*/false); }

  SerialResult Choose(const std::vector<size_t>& chosen, const ProfileResult& run,
                      const std::string& contention) {
    const wv1::SerialReport& report = run.done.serial();
    struct Timed {
      const ScreenedVariant* variant;
      const wv1::SerialTiming* timing;
      v1::Measurement measurement;
    };
    std::vector<Timed> timed;
    for (const wv1::SerialTiming& t : report.timings()) {
      const ScreenedVariant* variant = ById(t.variant_id());
      if (variant == nullptr) continue;
      v1::Measurement m = variant->measurement;
      m.set_phase(v1::SERIAL_VALIDATION);
      *m.mutable_timing() = t.timing();
      m.set_rounds(report.rounds());
      m.set_noise(t.noise());
      m.set_contended(!contention.empty());
      m.set_contention(contention);
      m.set_measured_at(Timestamp());
      m.set_detail(absl::StrCat("serial: median ", t.timing().median_us(), " us [",
                                t.timing().min_us(), ", ", t.timing().q3_us(), "] over ",
                                t.timing().samples(), " samples of ", t.launches_per_sample(),
                                " launches in ", report.rounds(), " interleaved rounds with ",
                                report.timings_size() - 1, " other candidates; noise ",
                                absl::StrFormat("%.2f%%", t.noise() * 100), "; ", t.pool_sets(),
                                " input sets (", t.pool_bytes() >> 20, " MiB touched per pass)"));
      Record(m);
      timed.push_back({variant, &t, std::move(m)});
    }
    if (!store_.error().ok()) return StoreFailed(store_.error());
    if (timed.empty()) return Failed(absl::AbortedError("no candidate was timed serially"));

    std::vector<Candidate> candidates;
    for (const Timed& t : timed) {
      candidates.push_back({.config = t.measurement.config(),
                            .index = t.variant->variant->index,
                            .timing = t.measurement.timing(),
                            .noise = t.timing->noise()});
      if (family_.has_default_config() &&
          SameConfig(t.measurement.config(), family_.default_config())) {
        result_.default_median_us = t.measurement.timing().median_us();
      }
    }
    const Choice choice =
        ChooseConfig(candidates, problem_.current_config ? &*problem_.current_config : nullptr,
                     family_.has_default_config() ? &family_.default_config() : nullptr);
    const Timed& winner = timed[choice.winner];
    const v1::Measurement& best = winner.measurement;

    v1::Entry entry;
    entry.set_family(family_.name());
    entry.set_family_hash(problem_.record->content_hash);
    *entry.mutable_problem() = problem_.problem;
    *entry.mutable_device() = device_;
    *entry.mutable_config() = best.config();
    *entry.mutable_launch() = winner.variant->variant->launch;
    entry.set_binary_sha256(best.binary_sha256());
    const std::string winner_id = absl::StrCat(winner.variant->variant->index);
    for (const wv1::KernelImage& image : screen_.task.variants()) {
      if (image.id() == winner_id) entry.set_function_name(image.lowered_name());
    }
    entry.set_nvrtc_version(job_.nvrtc_version);
    entry.set_driver_version(run.device.driver_version());
    entry.set_arch(job_.arch);
    entry.set_search(screen_.search);
    *entry.mutable_timing() = best.timing();
    entry.set_margin(choice.margin);
    entry.set_tie(choice.tie);
    entry.set_tied(static_cast<int32_t>(choice.tied.size()));
    entry.set_phase(v1::SERIAL_VALIDATION);
    entry.set_tuned_at(Timestamp());
    entry.set_job_id(job_.job_id);
    entry.set_candidates(static_cast<int32_t>(chosen.size()));
    entry.set_rounds(report.rounds());
    entry.set_noise(winner.timing->noise());
    entry.set_throttled_rounds(report.throttled_rounds());
    std::string stop = report.stop();
    const std::string unwatched = !report.nvml_error().empty() ? report.nvml_error() : nvml_error_;
    if (!unwatched.empty()) absl::StrAppend(&stop, "; not watched: ", unwatched);
    entry.set_stop(stop);
    entry.set_contended(!contention.empty());
    entry.set_contention(contention);
    v1::DeviceLimits* limits = entry.mutable_limits();
    limits->set_copy_gbps(run.device.copy_gbps());
    limits->set_peak_bandwidth_gbps(run.device.peak_bandwidth_gbps());
    limits->set_default_sm_clock_mhz(report.default_sm_clock_mhz());
    limits->set_min_sm_clock_mhz(report.min_sm_clock_mhz());
    limits->set_max_sm_clock_mhz(report.max_sm_clock_mhz());
    // A forced measurement under contention never displaces a clean entry
    // (found on the H200: `warmup --retune --force` under a foreign load
    // replaced 68 us entries with 193 us CONTENDED ones).
    if (entry.contended()) {
      absl::StatusOr<std::optional<v1::Entry>> clean =
          job_.store->FindEntry({.family = entry.family(),
                                 .family_hash = entry.family_hash(),
                                 .problem = entry.problem(),
                                 .device = entry.device().name()});
      if (!clean.ok()) {
        return StoreFailed(
            absl::Status(clean.status().code(),
                         absl::StrCat("cannot read the stored entry: ", clean.status().message())));
      }
      if (clean->has_value() && !(*clean)->contended()) {
        result_.kept_clean = absl::StrCat("this run's best (", entry.timing().median_us(),
                                          " us) was measured under contention (", contention,
                                          "); the clean entry tuned at ", (*clean)->tuned_at(),
                                          " (", (*clean)->timing().median_us(), " us) was kept");
        result_.entry = **std::move(clean);
        return std::move(result_);
      }
    }
    absl::Status stored = job_.store->PutEntry(entry);
    if (!stored.ok()) {
      return StoreFailed(absl::Status(
          stored.code(), absl::StrCat("cannot store the best entry: ", stored.message())));
    }
    result_.entry = std::move(entry);
    return std::move(result_);
  }

  SerialResult Failed(const absl::Status& why, bool store_failed = false) {
    result_.entry.reset();
    result_.error = absl::Status(why.code(), absl::StrCat(context_, ": ", why.message()));
    result_.store_failed = store_failed;
    return std::move(result_);
  }
  SerialResult StoreFailed(const absl::Status& why) { return Failed(why, true); }

  const PlannedProblem& problem_;
  const ScreenResult& screen_;
  const SerialJob& job_;
  const v1::KernelFamily& family_;
  const std::string context_;
  const v1::Device device_;
  std::string nvml_error_;
  PhaseStore store_;
  SerialResult result_;
};

}  // namespace

SerialResult RunSerialPhase(const PlannedProblem& problem, const ScreenResult& screen,
                            const SerialJob& job) {
  return ProblemSerial(problem, screen, job).Run();
}

}  // namespace autotune::service
