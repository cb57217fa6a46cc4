#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/gpu/nvml.h"
#include "kernels/profile_task.h"
#include "proto/worker.pb.h"
#include "service/worker/profiler.h"
#include "service/worker/task_run.h"

namespace autotune::kernel_worker::internal {

bool TaskRun::Watch(wv1::DeviceState* state) {
  if (gpu_.nvml == nullptr) return false;
  absl::StatusOr<kernels::NvmlSnapshot> snapshot = gpu_.nvml->Snapshot();
  if (!snapshot.ok()) {
    state->set_nvml_error(std::string(snapshot.status().message()));
    return false;
  }
  *state = DeviceStateOf(*snapshot, gpu_.nvml->default_sm_clock_mhz());
  return true;
}

wv1::ProfileDone TaskRun::RunSerial(
    const std::function<wv1::ProfileDone(const std::optional<Failure>&, const std::string&)>&
        finish) {
  const kernels::SerialRule rule = kernels::ResolveSerialRule(task_.serial());
  struct Candidate {
    const wv1::KernelImage* image = nullptr;
    LoadedKernel kernel;
    TimedGraph graph;
    int samples_per_round = 1;
    std::vector<double> samples;        // every kept round's
    std::vector<double> round_medians;  // one per kept round; 0 = not timed
    bool active = true;                 // still re-timed (not separated)
  };
  std::vector<std::unique_ptr<Candidate>> candidates;
  const int variants = task_.variants_size();
  for (int i = 0; i < variants; ++i) {
    const wv1::KernelImage& image = task_.variants(i);
    const Clock::time_point start = Clock::now();
    variant_gpu_s_ = 0;
    wv1::VariantOutcome outcome = NewOutcome(image);
    const std::string label = image.label().empty() ? image.id() : image.label();
    auto candidate = std::make_unique<Candidate>();
    candidate->image = &image;
    std::optional<Failure> failure = LoadKernel(image, "load", "check", &candidate->kernel);
    outcome.set_registers(candidate->kernel.registers);
    outcome.set_static_shared_bytes(candidate->kernel.static_shared);
    double estimate_us = 0;
    if (!failure) failure = Validate(candidate->kernel, &outcome, &estimate_us);
    if (!failure) {
      failure = PrepareGraph(candidate->kernel, image, estimate_us, warmup_us_, "serial warm-up",
                             &candidate->graph);
    }
    if (failure) {
      outcome.set_status(failure->status);
      outcome.set_phase(failure->phase);
      outcome.set_detail(Detail(label, failure->phase, failure->message));
    } else {
      outcome.set_status(v1::OK);
      outcome.set_phase("validate");
      outcome.set_pool_sets(candidate->graph.sets);
      outcome.set_pool_bytes(candidate->graph.pool_bytes);
      outcome.set_launches_per_sample(candidate->graph.launches);
      outcome.set_detail(
          Detail(label, "validate",
                 absl::StrCat("valid over ", seeds_, " seeds (max |v - r| ",
                              Num(outcome.max_error()), "); timed in the serial rounds")));
    }
    outcome.set_gpu_seconds(variant_gpu_s_);
    outcome.set_wall_seconds(SecondsSince(start));
    emit_(outcome);
    if (!*usable_) {
      return finish(Failure{outcome.status(), absl::StrCat("variant ", image.id()),
                            absl::StrCat("variant '", image.id(), "' ended in ",
                                         v1::VariantStatus_Name(outcome.status()), " at ",
                                         outcome.phase(), " and left the GPU context unusable; ",
                                         variants - i - 1, " variants not run")},
                    "");
    }
    if (failure) continue;
    const double replay_us = std::max(estimate_us, 0.5) * candidate->graph.launches;
    candidate->samples_per_round = std::clamp(
        static_cast<int>(std::ceil(rule.round_seconds * 1e6 / replay_us)), 1, kMaxReplaysPerBatch);
    candidates.push_back(std::move(candidate));
  }

  wv1::SerialReport& report = serial_report_;
  const int n = static_cast<int>(candidates.size());
  std::map<uint32_t, int64_t> foreign;  // pid -> most memory seen
  int min_clock = 0;
  int max_clock = 0;
  int default_clock = 0;
  bool watching = gpu_.nvml != nullptr;
  if (!watching) report.set_nvml_error(gpu_.info.nvml_error());
  double rounds_gpu_s = 0;
  int rounds = 0;
  int attempts = 0;
  std::optional<std::string> stop;
  int max_power_mw = 0;
  int power_limit_mw = 0;
  int max_temperature_c = 0;
  uint64_t clocks_events = 0;
  while (n > 0 && !stop) {
    std::vector<int> order;
    for (int index : RoundOrder(n, attempts++)) {
      if (candidates[static_cast<size_t>(index)]->active) order.push_back(index);
    }
    wv1::DeviceState before;
    wv1::DeviceState after;
    if (watching && !Watch(&before)) {
      watching = false;
      report.set_nvml_error(before.nvml_error());
    }
    std::vector<std::vector<double>> round(static_cast<size_t>(n));
    const double gpu_before = task_gpu_s_;
    for (int index : order) {
      Candidate& c = *candidates[static_cast<size_t>(index)];
      const std::string phase = absl::StrCat("serial round ", attempts);
      if (std::optional<Failure> failure =
              Measure(c.graph.exec.get(), c.graph.launches, c.graph.estimate_us, phase,
                      c.samples_per_round, 0, &round[static_cast<size_t>(index)])) {
        failure->phase = absl::StrCat("serial variant ", c.image->id());
        failure->message =
            absl::StrCat("variant '", c.image->id(), "' [", c.image->label(), "] failed in ", phase,
                         ": ", failure->message, *usable_ ? "" : "; the GPU context is unusable");
        return finish(failure, "");
      }
    }
    rounds_gpu_s += task_gpu_s_ - gpu_before;
    if (watching && !Watch(&after)) {
      watching = false;
      report.set_nvml_error(after.nvml_error());
    }
    bool contended = false;
    int round_min_clock = 0;
    int round_max_clock = 0;
    if (watching) {
      for (const wv1::DeviceState* state : {&before, &after}) {
        for (const wv1::ForeignProcess& process : state->foreign()) {
          contended = true;
          int64_t& memory = foreign[static_cast<uint32_t>(process.pid())];
          memory = std::max(memory, process.used_memory_bytes());
        }
        if (state->sm_clock_mhz() > 0) {
          round_min_clock = round_min_clock == 0 ? state->sm_clock_mhz()
                                                 : std::min(round_min_clock, state->sm_clock_mhz());
          round_max_clock = std::max(round_max_clock, state->sm_clock_mhz());
        }
        default_clock = std::max(default_clock, state->default_sm_clock_mhz());
      }
    }
    const bool capped = rounds_gpu_s >= rule.max_seconds;
    if (RoundThrottled(round_min_clock, default_clock, rule.throttle_fraction)) {
      // A slow clock would slow whichever candidates this round held: the
      // round is dropped while there is time to run another, and kept at
      // the cap only when too few rounds were kept, marking the timings.
      if (!capped || rounds >= rule.min_rounds) {
        report.set_throttled_rounds(report.throttled_rounds() + 1);
        if (capped) {
          std::vector<std::vector<double>> medians;
          for (const auto& c : candidates) medians.push_back(c->round_medians);
          stop = JudgeRounds(medians, rounds, rounds_gpu_s, rule).stop;
        }
        continue;
      }
      report.set_throttled(true);
    }
    if (contended) report.set_contended_rounds(report.contended_rounds() + 1);
    if (round_min_clock > 0) {
      min_clock = min_clock == 0 ? round_min_clock : std::min(min_clock, round_min_clock);
      max_clock = std::max(max_clock, round_max_clock);
    }
    for (const wv1::DeviceState* state : {&before, &after}) {
      max_power_mw = std::max(max_power_mw, state->power_mw());
      power_limit_mw = std::max(power_limit_mw, state->power_limit_mw());
      max_temperature_c = std::max(max_temperature_c, state->temperature_c());
      clocks_events |= state->clocks_event_reasons();
    }
    std::vector<std::vector<double>> medians;
    for (int i = 0; i < n; ++i) {
      Candidate& c = *candidates[static_cast<size_t>(i)];
      std::vector<double>& timed = round[static_cast<size_t>(i)];
      c.samples.insert(c.samples.end(), timed.begin(), timed.end());
      c.round_medians.push_back(c.active ? kernels::RoundsMedian(timed) : 0);
      medians.push_back(c.round_medians);
    }
    ++rounds;
    RoundsVerdict verdict = JudgeRounds(medians, rounds, rounds_gpu_s, rule);
    for (size_t i : verdict.separated) candidates[i]->active = false;
    stop = std::move(verdict.stop);
  }

  for (const auto& c : candidates) {
    wv1::SerialTiming* timing = report.add_timings();
    timing->set_variant_id(c->image->id());
    *timing->mutable_timing() =
        SummarizeTimes(c->samples, c->image->bytes_per_call(), c->image->flops_per_call());
    timing->set_noise(kernels::RoundsNoise(c->round_medians));
    for (double median : c->round_medians) timing->add_round_median_us(median);
    timing->set_launches_per_sample(c->graph.launches);
    timing->set_pool_sets(c->graph.sets);
    timing->set_pool_bytes(c->graph.pool_bytes);
  }
  for (const auto& [pid, memory] : foreign) {
    wv1::ForeignProcess* process = report.add_foreign();
    process->set_pid(static_cast<int32_t>(pid));
    process->set_used_memory_bytes(memory);
  }
  report.set_rounds(rounds);
  report.set_min_sm_clock_mhz(min_clock);
  report.set_max_sm_clock_mhz(max_clock);
  report.set_default_sm_clock_mhz(default_clock);
  report.set_stop(n == 0 ? "no candidate validated" : stop.value_or(""));
  report.set_gpu_seconds(rounds_gpu_s);
  report.set_max_power_mw(max_power_mw);
  report.set_power_limit_mw(power_limit_mw);
  report.set_max_temperature_c(max_temperature_c);
  report.set_clocks_event_reasons(clocks_events);
  report.set_clocks_events(kernels::DescribeClocksEvents(clocks_events));

  absl::Status status = gpu_.Record(kSpanBegin);
  if (status.ok()) status = gpu_.Wait(kSpanBegin, kUtilityTimeoutS, "the end of the task");
  if (!status.ok()) return finish(Fail(status, Origin::kSetup, "task end"), "");
  return finish(std::nullopt,
                absl::StrCat(n, " of ", variants, " candidates timed in ", rounds,
                             " interleaved rounds (", report.stop(), ")",
                             report.throttled_rounds() > 0
                                 ? absl::StrCat("; ", report.throttled_rounds(),
                                                " rounds dropped for a throttled SM clock")
                                 : "",
                             report.throttled() ? "; measured throttled" : "",
                             report.contended_rounds() > 0
                                 ? absl::StrCat("; ", report.contended_rounds(),
                                                " rounds with another compute process")
                                 : ""));
}

}  // namespace autotune::kernel_worker::internal
