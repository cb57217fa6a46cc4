#include "service/jobs/serial_phase.h"

#include <algorithm>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/timestamp.h"
#include "kernels/profile_task.h"
#include "kernels/round_compare.h"
#include "proto/problem.h"
#include "service/jobs/job_text.h"
#include "service/jobs/phase_store.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

// How often a waiting phase asks the GPU again, and says it still waits.
constexpr absl::Duration kProbeEvery = absl::Seconds(1);
constexpr absl::Duration kSayEvery = absl::Seconds(5);

// Leaders re-timed in each later worker process at most, besides the
// current entry's config.
constexpr size_t kMaxLeaders = 4;
// Worker processes a problem's rounds run in at most: the leaders are timed
// again in a fresh one while the choice is not within the band (its bound
// unknown or above it), up to this many.
constexpr size_t kMaxSerialPasses = 4;

// One serial task and what it said.
struct Pass {
  ProfileResult run;
  std::string contention;  // empty = none seen
};

std::string Percent(double fraction) { return absl::StrFormat("%.2f%%", fraction * 100); }

class ProblemSerial {
 public:
  ProblemSerial(const PlannedProblem& problem, const ScreenResult& screen, const SerialJob& job)
      : problem_(problem),
        screen_(screen),
        job_(job),
        family_(problem.record->family),
        context_(ProblemContext(family_.name(), problem.problem)),
        device_(DeviceOf(screen.device)),
        band_(kernels::ResolveSerialRule(job.options->rounds).target_noise),
        current_(problem.current_config ? &*problem.current_config : nullptr),
        family_default_(family_.has_default_config() ? &family_.default_config() : nullptr),
        store_(job.record) {}

  SerialResult Run() {
    std::vector<Candidate> screened;
    for (const ScreenedVariant& s : screen_.ok) {
      screened.push_back({.config = s.measurement.config(),
                          .index = s.variant->index,
                          .timing = s.measurement.timing(),
                          .rounds = {}});
      if (family_default_ != nullptr && SameConfig(s.measurement.config(), *family_default_)) {
        result_.default_median_us = s.measurement.timing().median_us();
      }
    }
    std::vector<size_t> chosen =
        SelectCandidates(screened, current_, family_default_, job_.options->candidates);

    std::unique_ptr<ProfilePool::Reservation> gpu = job_.gpus->Reserve();
    int retries = 0;
    size_t renewed_for = 0;  // the pass a fresh worker was started for
    while (true) {
      if (chosen.empty()) return Failed(absl::AbortedError("no candidate passed the serial phase"));
      if (Cancelled()) return Failed(absl::CancelledError("cancelled"));
      // The first pass times every candidate; each later one the leaders,
      // in a fresh worker process (a new context, new allocations), so that
      // the choice holds across processes and not only across rounds of
      // one. A pass measured again (contention) stays in its process.
      const size_t next = passes_.size();
      const std::vector<size_t> timed = next > 0 ? Leaders(chosen) : chosen;
      if (next > 0 && renewed_for != next) {
        if (absl::Status fresh = gpu->Renew(); !fresh.ok()) {
          return Failed(absl::UnavailableError(
              absl::StrCat("serial phase: worker process ", next + 1, ": ", fresh.message())));
        }
        renewed_for = next;
      }
      wv1::DeviceState seen;
      if (absl::Status quiet = WaitForQuiet(*gpu, &seen); !quiet.ok()) return Failed(quiet);
      Pass pass;
      pass.run = TimeOnGpu(*gpu, timed, &chosen);
      if (!store_.error().ok()) return StoreFailed(store_.error());
      if (pass.run.done.status() != v1::OK) {
        const std::string prefix = "serial variant ";
        if (!absl::StartsWith(pass.run.done.phase(), prefix)) {
          return Failed(absl::AbortedError(
              absl::StrCat("serial phase: ", pass.run.done.phase(), ": ", pass.run.done.detail())));
        }
        // One candidate failed in the rounds: without it, from the start.
        Drop(&chosen, pass.run.done.phase().substr(prefix.size()), pass.run.done.status(),
             pass.run.done.detail());
        if (!store_.error().ok()) return StoreFailed(store_.error());
        passes_.clear();
        renewed_for = 0;
        continue;
      }
      if (std::optional<std::string> again = MeasureAgain(pass.run, *gpu)) {
        if (retries++ < kContendedRetries) {
          Say(*again);
          continue;
        }
      }
      const wv1::SerialReport& report = pass.run.done.serial();
      if (report.throttled() && !job_.options->force) {
        return Failed(absl::UnavailableError(absl::StrCat(
            "GPU ", gpu->device().ordinal(), " ran throttled in the serial rounds: ",
            Throttling(report), "; measured again ", kContendedRetries,
            " times; let it cool or lift the cap, or measure anyway with JobOptions.force (entries "
            "are then marked throttled)")));
      }
      pass.contention = Contention(report, seen);
      passes_.push_back(std::move(pass));
      if (chosen.size() > 1 && NeedsAnotherPass(chosen)) continue;
      return Choose(chosen);
    }
  }

 private:
  bool Cancelled() const { return job_.cancel != nullptr && job_.cancel->load(); }

  void Say(const std::string& message) {
    if (job_.progress) job_.progress(absl::StrCat(context_, ": ", message));
  }

  // The candidates `timed` (indices into screen_.ok), validated again and
  // timed in interleaved rounds; a candidate that is no longer valid is
  // dropped from `chosen` as its outcome arrives.
  ProfileResult TimeOnGpu(ProfilePool::Reservation& gpu, const std::vector<size_t>& timed,
                          std::vector<size_t>* chosen) {
    wv1::ProfileTask task = screen_.task;
    task.clear_variants();
    for (size_t i : timed) {
      const std::string id = absl::StrCat(screen_.ok[i].variant->index);
      for (const wv1::KernelImage& image : screen_.task.variants()) {
        if (image.id() == id) *task.add_variants() = image;
      }
    }
    task.set_task_id(absl::StrCat(screen_.task.task_id(), "/serial", passes_.size() + 1));
    // Validation is as in the screen (the screen's settings, timing budget
    // included, which the worker requires but the rounds do not use); only
    // the rounds are timed, by the job's serial options.
    *task.mutable_serial() = job_.options->rounds;
    const absl::Time lease_start = absl::Now();
    bool leased_wait = false;
    ProfileResult run = gpu.Profile(
        task,
        [&](const wv1::VariantOutcome& outcome) {
          if (outcome.status() == v1::OK) return;
          // Valid in the screen, not now: a racy or input-dependent kernel.
          Drop(chosen, outcome.variant_id(), outcome.status(), outcome.detail());
        },
        [&](const std::string& holder) {
          leased_wait = true;
          Say(absl::StrCat("waiting for the lease of GPU ", gpu.device().ordinal(), ", held by ",
                           holder));
        });
    if (leased_wait) result_.waited_s += absl::ToDoubleSeconds(absl::Now() - lease_start);
    return run;
  }

  // Why the rounds should be measured again (another process came, the GPU
  // ran throttled), unless the job forces them; nullopt when they stand.
  std::optional<std::string> MeasureAgain(const ProfileResult& run,
                                          ProfilePool::Reservation& gpu) const {
    if (job_.options->force) return std::nullopt;
    const wv1::SerialReport& report = run.done.serial();
    if (report.contended_rounds() > 0) {
      return absl::StrCat("another process used GPU ", gpu.device().ordinal(), " during ",
                          report.contended_rounds(), " of ", report.rounds(), " serial rounds (",
                          DescribeProcesses(report.foreign()),
                          "); measuring again once it is quiet");
    }
    if (report.throttled()) {
      return absl::StrCat("GPU ", gpu.device().ordinal(), " ran throttled (", Throttling(report),
                          "); measuring again");
    }
    return std::nullopt;
  }

  static std::string Throttling(const wv1::SerialReport& report) {
    std::string text = absl::StrCat("SM clock down to ", report.min_sm_clock_mhz(), " MHz of ",
                                    report.default_sm_clock_mhz(), ", ", report.throttled_rounds(),
                                    " rounds dropped");
    if (!report.clocks_events().empty()) absl::StrAppend(&text, " (", report.clocks_events(), ")");
    return text;
  }

  static std::string Contention(const wv1::SerialReport& report, const wv1::DeviceState& seen) {
    if (report.contended_rounds() > 0) {
      return absl::StrCat(
          report.contended_rounds(), " of ", report.rounds(),
          " rounds with other compute processes: ", DescribeProcesses(report.foreign()));
    }
    if (!seen.foreign().empty()) {
      return absl::StrCat("before the rounds: ", DescribeDeviceState(seen));
    }
    return "";
  }

  // After the first pass, always; then while the choice over every pass so
  // far is not within the band, up to kMaxSerialPasses.
  bool NeedsAnotherPass(const std::vector<size_t>& chosen) const {
    if (passes_.size() == 1) return true;
    if (passes_.size() >= kMaxSerialPasses) return false;
    std::vector<size_t> indices;
    std::vector<int> round_process;
    const std::vector<Candidate> candidates = Pooled(chosen, &indices, &round_process);
    if (candidates.size() < 2) return false;
    const Choice choice = ChooseConfig(candidates, round_process, current_, family_default_, band_);
    return choice.bound < 0 || choice.bound > band_;
  }

  // The candidates worth another pass, over every pass so far: the fastest,
  // every one not slower than it beyond doubt (at most kMaxLeaders, closest
  // first), the runner-up when none is, and the current entry's config
  // unless the fastest beat it beyond the band (hysteresis decides on it).
  std::vector<size_t> Leaders(const std::vector<size_t>& chosen) const {
    std::vector<size_t> indices;
    std::vector<int> process;
    const std::vector<Candidate> candidates = Pooled(chosen, &indices, &process);
    std::vector<std::vector<double>> rounds;
    for (const Candidate& c : candidates) rounds.push_back(c.rounds);
    const size_t leader = kernels::Leader(rounds, process);
    if (leader == candidates.size()) return indices;
    struct Other {
      bool slower = false;  // beyond doubt and beyond the band
      double ratio = 0;     // over the leader
      size_t index = 0;
      bool operator<(const Other& o) const {
        return std::tie(slower, ratio, index) < std::tie(o.slower, o.ratio, o.index);
      }
    };
    std::vector<Other> others;
    std::optional<size_t> current;
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (k == leader) continue;
      const kernels::RoundRatio r = kernels::CompareRounds(rounds[k], rounds[leader], process);
      const bool is_current = current_ != nullptr && SameConfig(candidates[k].config, *current_);
      if (is_current && !(r.known() && r.low > 1 + band_)) current = indices[k];
      const bool slower = kernels::Classify(r, band_) == kernels::Versus::kSlower;
      others.push_back({.slower = slower, .ratio = r.median, .index = indices[k]});
    }
    std::sort(others.begin(), others.end());
    std::vector<size_t> leaders = {indices[leader]};
    for (const Other& other : others) {
      if (leaders.size() >= kMaxLeaders || (other.slower && leaders.size() > 1)) break;
      leaders.push_back(other.index);
    }
    if (current && std::find(leaders.begin(), leaders.end(), *current) == leaders.end()) {
      leaders.push_back(*current);
    }
    return leaders;
  }

  const wv1::SerialTiming* TimingOf(const wv1::SerialReport& report, size_t i) const {
    const std::string id = absl::StrCat(screen_.ok[i].variant->index);
    for (const wv1::SerialTiming& t : report.timings()) {
      if (t.variant_id() == id) return &t;
    }
    return nullptr;
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

  // Each pass's timing of each candidate, stored as a SERIAL_VALIDATION
  // measurement.
  void RecordTimings() {
    for (size_t p = 0; p < passes_.size(); ++p) {
      const wv1::SerialReport& report = passes_[p].run.done.serial();
      for (const wv1::SerialTiming& t : report.timings()) {
        const ScreenedVariant* variant = ById(t.variant_id());
        if (variant == nullptr) continue;
        v1::Measurement m = variant->measurement;
        m.set_phase(v1::SERIAL_VALIDATION);
        *m.mutable_timing() = t.timing();
        m.set_rounds(report.rounds());
        m.set_noise(t.noise());
        m.set_contended(!passes_[p].contention.empty());
        m.set_contention(passes_[p].contention);
        m.set_measured_at(Timestamp());
        m.set_detail(absl::StrCat(
            "serial, worker process ", p + 1, " of ", passes_.size(), ": median ",
            t.timing().median_us(), " us [", t.timing().min_us(), ", ", t.timing().q3_us(),
            "] over ", t.timing().samples(), " samples of ", t.launches_per_sample(),
            " launches in ", report.rounds(), " interleaved rounds with ",
            report.timings_size() - 1, " other candidates; noise over rounds ", Percent(t.noise()),
            "; ", t.pool_sets(), " input sets (", t.pool_bytes() >> 20, " MiB touched per pass)"));
        Record(m);
      }
    }
  }

  // The candidates of the first pass with their rounds of every pass (0
  // where a pass did not time them), and each round's process.
  std::vector<Candidate> Pooled(const std::vector<size_t>& chosen, std::vector<size_t>* indices,
                                std::vector<int>* round_process) const {
    std::vector<Candidate> candidates;
    for (size_t i : chosen) {
      const wv1::SerialTiming* first = TimingOf(passes_.front().run.done.serial(), i);
      if (first == nullptr) continue;
      Candidate c{.config = screen_.ok[i].measurement.config(),
                  .index = screen_.ok[i].variant->index,
                  .timing = first->timing(),
                  .rounds = {}};
      for (const Pass& pass : passes_) {
        const wv1::SerialReport& report = pass.run.done.serial();
        const wv1::SerialTiming* t = TimingOf(report, i);
        for (int r = 0; r < report.rounds(); ++r) {
          c.rounds.push_back(t != nullptr && r < t->round_median_us_size() ? t->round_median_us(r)
                                                                           : 0);
        }
      }
      candidates.push_back(std::move(c));
      indices->push_back(i);
    }
    for (size_t p = 0; p < passes_.size(); ++p) {
      round_process->insert(round_process->end(), passes_[p].run.done.serial().rounds(),
                            static_cast<int>(p));
    }
    return candidates;
  }

  // "separated from the runner-up BLOCK=128: 1.20% slower [0.80%, 1.61%]
  // over 14 rounds in 2 worker processes".
  std::string Explain(const Choice& choice, const std::vector<Candidate>& candidates) const {
    const Candidate& winner = candidates[choice.winner];
    std::string why;
    if (choice.kept_current) {
      why = absl::StrCat("the current entry kept: the fastest, ",
                         kernels::ConfigLabel(family_, candidates[choice.leader].config),
                         ", is not faster beyond ", Percent(band_));
    } else if (choice.tied.size() > 1) {
      const bool is_default =
          family_default_ != nullptr && SameConfig(winner.config, *family_default_);
      why = absl::StrCat(
          choice.tied.size(), " candidates within ", Percent(band_),
          " of the fastest: ", is_default ? "the family's default" : "the first in parameter order",
          " chosen");
    } else {
      why = "the fastest";
    }
    if (choice.unresolved > 0) {
      absl::StrAppend(&why, "; ", choice.unresolved, " candidates not resolved within the rounds");
    }
    if (choice.runner_up < candidates.size()) {
      const kernels::RoundRatio& r = choice.runner_up_ratio;
      absl::StrAppend(&why, "; the next, ",
                      kernels::ConfigLabel(family_, candidates[choice.runner_up].config), ", is ",
                      Percent(r.median - 1), " slower [", Percent(r.low - 1), ", ",
                      Percent(r.high - 1), "] over ", r.rounds, " rounds in ", r.processes,
                      " worker processes");
    }
    absl::StrAppend(&why, choice.bound >= 0 ? absl::StrCat("; at most ", Percent(choice.bound),
                                                           " slower than any candidate")
                                            : "; too few rounds to bound it");
    return why;
  }

  SerialResult Choose(const std::vector<size_t>& chosen) {
    RecordTimings();
    if (!store_.error().ok()) return StoreFailed(store_.error());
    std::vector<size_t> indices;
    std::vector<int> round_process;
    const std::vector<Candidate> candidates = Pooled(chosen, &indices, &round_process);
    if (candidates.empty()) return Failed(absl::AbortedError("no candidate was timed serially"));
    for (const Candidate& c : candidates) {
      if (family_default_ != nullptr && SameConfig(c.config, *family_default_)) {
        result_.default_median_us = c.timing.median_us();
      }
    }
    const Choice choice = ChooseConfig(candidates, round_process, current_, family_default_, band_);
    v1::Entry entry = EntryOf(*screen_.ok[indices[choice.winner]].variant, candidates, choice);
    return Store(std::move(entry));
  }

  v1::Entry EntryOf(const kernels::Variant& variant, const std::vector<Candidate>& candidates,
                    const Choice& choice) const {
    const Candidate& winner = candidates[choice.winner];
    const ProfileResult& first = passes_.front().run;
    v1::Entry entry;
    entry.set_family(family_.name());
    entry.set_family_hash(problem_.record->content_hash);
    *entry.mutable_problem() = problem_.problem;
    *entry.mutable_device() = device_;
    *entry.mutable_config() = winner.config;
    *entry.mutable_launch() = variant.launch;
    const std::string winner_id = absl::StrCat(variant.index);
    for (const ScreenedVariant& s : screen_.ok) {
      if (s.variant == &variant) entry.set_binary_sha256(s.measurement.binary_sha256());
    }
    for (const wv1::KernelImage& image : screen_.task.variants()) {
      if (image.id() == winner_id) entry.set_function_name(image.lowered_name());
    }
    entry.set_nvrtc_version(job_.nvrtc_version);
    entry.set_driver_version(first.device.driver_version());
    entry.set_arch(job_.arch);
    entry.set_search(screen_.search);
    *entry.mutable_timing() = winner.timing;
    entry.set_margin(choice.margin);
    entry.set_tie(choice.tie);
    entry.set_tied(static_cast<int32_t>(choice.tied.size()));
    entry.set_bound(choice.bound);
    entry.set_choice(Explain(choice, candidates));
    entry.set_worker_processes(static_cast<int32_t>(passes_.size()));
    entry.set_phase(v1::SERIAL_VALIDATION);
    entry.set_tuned_at(Timestamp());
    entry.set_job_id(job_.job_id);
    entry.set_candidates(static_cast<int32_t>(candidates.size()));
    entry.set_noise(kernels::RoundsNoise(winner.rounds));
    std::vector<std::string> stops;
    std::vector<std::string> contention;
    v1::DeviceLimits* limits = entry.mutable_limits();
    limits->set_copy_gbps(first.device.copy_gbps());
    limits->set_peak_bandwidth_gbps(first.device.peak_bandwidth_gbps());
    std::set<std::string> events;
    for (size_t p = 0; p < passes_.size(); ++p) {
      const wv1::SerialReport& report = passes_[p].run.done.serial();
      entry.set_rounds(entry.rounds() + report.rounds());
      entry.set_throttled_rounds(entry.throttled_rounds() + report.throttled_rounds());
      entry.set_throttled(entry.throttled() || report.throttled());
      std::string stop = absl::StrCat("worker process ", p + 1, ": ", report.stop());
      const std::string unwatched =
          !report.nvml_error().empty() ? report.nvml_error() : nvml_error_;
      if (!unwatched.empty()) absl::StrAppend(&stop, "; not watched: ", unwatched);
      stops.push_back(stop);
      if (!passes_[p].contention.empty()) contention.push_back(passes_[p].contention);
      AddClocks(report, limits);
      for (absl::string_view event :
           absl::StrSplit(report.clocks_events(), ", ", absl::SkipEmpty())) {
        events.insert(std::string(event));
      }
    }
    limits->set_clocks_events(absl::StrJoin(events, ", "));
    entry.set_stop(absl::StrJoin(stops, "; "));
    entry.set_contended(!contention.empty());
    entry.set_contention(absl::StrJoin(contention, "; "));
    return entry;
  }

  static void AddClocks(const wv1::SerialReport& report, v1::DeviceLimits* limits) {
    limits->set_default_sm_clock_mhz(
        std::max(limits->default_sm_clock_mhz(), report.default_sm_clock_mhz()));
    if (report.min_sm_clock_mhz() > 0) {
      limits->set_min_sm_clock_mhz(
          limits->min_sm_clock_mhz() == 0
              ? report.min_sm_clock_mhz()
              : std::min(limits->min_sm_clock_mhz(), report.min_sm_clock_mhz()));
    }
    limits->set_max_sm_clock_mhz(std::max(limits->max_sm_clock_mhz(), report.max_sm_clock_mhz()));
    limits->set_max_power_w(std::max(limits->max_power_w(), report.max_power_mw() / 1000.0));
    limits->set_power_limit_w(std::max(limits->power_limit_w(), report.power_limit_mw() / 1000.0));
    limits->set_max_temperature_c(
        std::max(limits->max_temperature_c(), report.max_temperature_c()));
  }

  SerialResult Store(v1::Entry entry) {
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
        result_.kept_clean = absl::StrCat(
            "this run's best (", entry.timing().median_us(), " us) was measured under contention (",
            entry.contention(), "); the clean entry tuned at ", (*clean)->tuned_at(), " (",
            (*clean)->timing().median_us(), " us) was kept");
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
  const double band_;  // the choice's tie band: the rounds' noise target
  const v1::Config* const current_;
  const v1::Config* const family_default_;
  std::vector<Pass> passes_;  // the first (every candidate), then the leaders'
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
