#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/gpu/cuda_driver.h"
#include "service/worker/profiler.h"
#include "service/worker/task_run.h"

namespace autotune::kernel_worker::internal {

std::optional<Failure> TaskRun::AllocatePool() {
  const std::string phase = "pool";
  const int64_t set_bytes = static_cast<int64_t>(set_bytes_);
  const int64_t pool_budget = budget_bytes_ - problem_bytes_ + set_bytes;  // set 0 is paid
  int sets = 1;
  for (const wv1::KernelImage& image : task_.variants()) {
    const InputPoolPlan plan = PlanInputPool(image.bytes_per_call(), set_bytes,
                                             gpu_.info.l2_bytes(), cache_state_, pool_budget);
    sets = std::max(sets, std::min(plan.sets, kMaxLaunchesPerSample));
  }
  if (sets <= 1) return std::nullopt;
  absl::Status status = gpu_.Record(kSpanBegin);
  if (!status.ok()) return Fail(status, Origin::kSetup, phase);
  for (int s = 1; s < sets; ++s) {
    absl::StatusOr<kernels::DeviceBuffer> set =
        Allocate(set_bytes_, absl::StrCat("input set ", s, " of ", sets, " of the timing pool"));
    if (!set.ok()) return Fail(set.status(), Origin::kSetup, phase);
    sets_.push_back(*std::move(set));
    // Seeds distinct from each other and from set 0's, which holds the
    // last validation seed when timing starts.
    const uint64_t seed = task_.base_seed() + static_cast<uint64_t>(seeds_ - 1 + s);
    if (status = ZeroScratch(sets_.size() - 1); !status.ok()) {
      return Fail(status, Origin::kSetup, phase);
    }
    if (status = FillSet(sets_.size() - 1, seed, false); !status.ok()) {
      return Fail(status, Origin::kSetup, phase);
    }
  }
  if (status = gpu_.Record(kCompareEnd); !status.ok()) return Fail(status, Origin::kSetup, phase);
  if (status = gpu_.Wait(kCompareEnd, kUtilityTimeoutS, "filling the timing pool"); !status.ok()) {
    return Fail(status, Origin::kSetup, phase);
  }
  absl::StatusOr<double> seconds = gpu_.ElapsedSeconds(kSpanBegin, kCompareEnd);
  if (!seconds.ok()) return Fail(seconds.status(), Origin::kSetup, phase);
  AddGpuTime(*seconds);
  return std::nullopt;
}

absl::StatusOr<kernels::Graph> TaskRun::Capture(const LoadedKernel& kernel, int sets,
                                                int launches) {
  std::vector<KernelArgs> args;
  args.reserve(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s) {
    ASSIGN_OR_RETURN(KernelArgs set_args, ArgsForSet(static_cast<size_t>(s), kernel));
    args.push_back(std::move(set_args));
  }
  // Thread-local mode: only this thread's unsafe calls could break the
  // capture, and this thread makes none while capturing.
  RETURN_IF_ERROR(gpu_.driver->Check(
      gpu_.cu().stream_begin_capture(gpu_.stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
      "cuStreamBeginCapture"));
  absl::Status launched;
  for (int i = 0; i < launches && launched.ok(); ++i) {
    launched =
        gpu_.Launch(kernel.function, kernel.shape, args[i % sets].params(), "variant, captured");
  }
  // Always end the capture, even after a failed launch: a stream left
  // capturing refuses all later work.
  CUgraph raw = nullptr;
  const CUresult ended = gpu_.cu().stream_end_capture(gpu_.stream.get(), &raw);
  kernels::Graph graph(*gpu_.driver, raw);
  RETURN_IF_ERROR(launched);
  RETURN_IF_ERROR(gpu_.driver->Check(ended, "cuStreamEndCapture"));
  if (!graph) return absl::InternalError("cuStreamEndCapture returned no graph");
  return graph;
}

std::optional<Failure> TaskRun::Measure(CUgraphExec exec, int launches, double estimate_us,
                                        const std::string& phase, int min_samples, double budget_s,
                                        std::vector<double>* per_launch_us) {
  const Clock::time_point start = Clock::now();
  per_launch_us->clear();
  const double replay_us = std::max(estimate_us, 1.0) * launches;
  const int per_batch =
      std::clamp(static_cast<int>(kBatchTargetUs / replay_us), 1, kMaxReplaysPerBatch);
  double timed_s = 0;
  while (static_cast<int>(per_launch_us->size()) < kMaxSamples &&
         (static_cast<int>(per_launch_us->size()) < min_samples || timed_s < budget_s)) {
    const int have = static_cast<int>(per_launch_us->size());
    // No more replays than are still wanted: those short of min_samples,
    // or those that fill the rest of the budget, whichever is more (a
    // batch sized for the GPU alone overshot a 3 ms budget up to 20 ms).
    const int for_budget = timed_s < budget_s
                               ? static_cast<int>(std::ceil((budget_s - timed_s) * 1e6 / replay_us))
                               : 0;
    const int wanted = std::max({1, min_samples - have, for_budget});
    const int batch = std::min({per_batch, kMaxSamples - have, wanted});
    for (int j = 0; j < batch; ++j) {
      absl::Status status = gpu_.Record(kTimingBase + 2 * j);
      if (!status.ok()) return Fail(status, Origin::kWait, phase);
      status = gpu_.driver->Check(gpu_.cu().graph_launch(exec, gpu_.stream.get()), "cuGraphLaunch");
      if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
      status = gpu_.Record(kTimingBase + 2 * j + 1);
      if (!status.ok()) return Fail(status, Origin::kWait, phase);
    }
    absl::Status status =
        gpu_.Wait(kTimingBase + 2 * batch - 1, launch_timeout_s_ * launches * batch,
                  absl::StrCat(batch, " graph replays of ", launches, " launches"));
    if (!status.ok()) return Fail(status, Origin::kWait, phase);
    for (int j = 0; j < batch; ++j) {
      absl::StatusOr<double> seconds =
          gpu_.ElapsedSeconds(kTimingBase + 2 * j, kTimingBase + 2 * j + 1);
      if (!seconds.ok()) return Fail(seconds.status(), Origin::kWait, phase);
      per_launch_us->push_back(*seconds * 1e6 / launches);
      timed_s += *seconds;
    }
  }
  AddGpuTime(timed_s);
  timeline_.set_samples_s(timeline_.samples_s() + SecondsSince(start));
  return std::nullopt;
}

std::optional<Failure> TaskRun::PrepareGraph(const LoadedKernel& kernel,
                                             const wv1::KernelImage& image, double estimate_us,
                                             double warmup_us, const std::string& phase,
                                             TimedGraph* timed) {
  const int64_t set_bytes = static_cast<int64_t>(set_bytes_);
  const InputPoolPlan plan =
      PlanInputPool(image.bytes_per_call(), set_bytes, gpu_.info.l2_bytes(), cache_state_,
                    budget_bytes_ - problem_bytes_ + set_bytes);
  const int sets = std::max(1, std::min(plan.sets, static_cast<int>(sets_.size())));
  if (sets < plan.sets) {
    timed->notes.push_back(absl::StrCat("rotating over ", sets, " input sets, fewer than the ",
                                        plan.sets, " whose touched bytes exceed 2x L2 (at most ",
                                        kMaxLaunchesPerSample,
                                        " launches per sample): the timing is partly warm"));
  }
  timed->sets = sets;
  timed->pool_bytes = sets * plan.touched_bytes_per_launch;
  max_pool_sets_ = std::max(max_pool_sets_, sets);
  max_pool_bytes_ = std::max(max_pool_bytes_, timed->pool_bytes);

  // A sample is a whole number of cycles over the sets, so every set is
  // visited equally; enough launches and kernel time that the replay's own
  // overhead is small beside them.
  const double launch_us = std::max(estimate_us, 0.5);
  // Long launches need fewer of them: kLongSampleUs of kernel time dwarfs
  // a replay's overhead whatever the count.
  const int64_t min_launches = std::min<int64_t>(
      kMinLaunchesPerSample, static_cast<int64_t>(std::ceil(kLongSampleUs / launch_us)));
  int64_t cycles =
      std::max<int64_t>({1, (min_launches + sets - 1) / sets,
                         static_cast<int64_t>(std::ceil(kMinSampleUs / (launch_us * sets)))});
  cycles = std::min<int64_t>(cycles, std::max(1, kMaxLaunchesPerSample / sets));
  timed->launches = static_cast<int>(cycles * sets);
  timed->estimate_us = estimate_us;
  const int launches = timed->launches;

  // INOUT buffers are updated in place by every launch of the pool, so
  // later launches see data earlier ones wrote: accepted, since the timing
  // only needs realistic memory traffic, not valid results.
  Clock::time_point stage = Clock::now();
  absl::StatusOr<kernels::Graph> graph = Capture(kernel, sets, launches);
  if (!graph.ok()) return Fail(graph.status(), Origin::kLaunch, phase);
  absl::StatusOr<kernels::GraphExec> exec = kernels::GraphExec::Instantiate(*gpu_.driver, *graph);
  if (!exec.ok()) return Fail(exec.status(), Origin::kLaunch, phase);
  timeline_.set_graph_s(timeline_.graph_s() + SecondsSince(stage));
  stage = Clock::now();

  // Warm-up replays upload the graph and settle clocks and caches.
  absl::Status status = gpu_.Record(kWarmBegin);
  if (!status.ok()) return Fail(status, Origin::kSetup, phase);
  const int warmup_replays =
      std::clamp(static_cast<int>(std::ceil(warmup_us / (std::max(estimate_us, 0.5) * launches))),
                 kMinWarmupReplays, kMaxWarmupReplays);
  for (int w = 0; w < warmup_replays; ++w) {
    status = gpu_.driver->Check(gpu_.cu().graph_launch(exec->get(), gpu_.stream.get()),
                                "cuGraphLaunch (warm-up)");
    if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
  }
  if (status = gpu_.Record(kWarmEnd); !status.ok()) return Fail(status, Origin::kWait, phase);
  status = gpu_.Wait(kWarmEnd, launch_timeout_s_ * launches * warmup_replays,
                     absl::StrCat(warmup_replays, " warm-up replays of ", launches, " launches"));
  if (!status.ok()) return Fail(status, Origin::kWait, phase);
  absl::StatusOr<double> warm = gpu_.ElapsedSeconds(kWarmBegin, kWarmEnd);
  if (!warm.ok()) return Fail(warm.status(), Origin::kWait, phase);
  AddGpuTime(*warm);
  timeline_.set_warmup_s(timeline_.warmup_s() + SecondsSince(stage));
  timed->exec = *std::move(exec);
  return std::nullopt;
}

std::optional<Failure> TaskRun::Time(const LoadedKernel& kernel, const wv1::KernelImage& image,
                                     double estimate_us, wv1::VariantOutcome* outcome,
                                     std::string* summary) {
  std::string phase = "time";
  TimedGraph timed;
  // The first variant of a screen warms the GPU up for all: the ones after
  // it follow it with no idle between, so one replay (the graph's upload)
  // is their warm-up.
  const double warmup_us = screen_warmed_up_ ? 0 : warmup_us_;
  if (std::optional<Failure> failure =
          PrepareGraph(kernel, image, estimate_us, warmup_us, phase, &timed)) {
    return failure;
  }
  screen_warmed_up_ = true;
  const int sets = timed.sets;
  const int launches = timed.launches;
  const int64_t pool_bytes = timed.pool_bytes;
  std::vector<std::string>& notes = timed.notes;
  outcome->set_pool_sets(sets);
  outcome->set_pool_bytes(pool_bytes);
  outcome->set_launches_per_sample(launches);

  std::vector<double> per_launch_us;
  if (std::optional<Failure> failure = Measure(timed.exec.get(), launches, estimate_us, phase,
                                               min_samples_, timing_budget_s_, &per_launch_us)) {
    return failure;
  }
  v1::TimingStats stats =
      SummarizeTimes(per_launch_us, image.bytes_per_call(), image.flops_per_call());
  const double floor_us = BandwidthFloorUs(image.bytes_per_call(), gpu_.info.peak_bandwidth_gbps());
  if (cache_state_ == v1::COLD && floor_us > 0 && stats.median_us() < floor_us) {
    // Faster than DRAM allows for the bytes it claims: measured once more
    // before it is believed (clocks, a disturbance); the second stands.
    phase = "remeasure";
    outcome->set_remeasured(1);
    if (std::optional<Failure> failure = Measure(timed.exec.get(), launches, estimate_us, phase,
                                                 min_samples_, timing_budget_s_, &per_launch_us)) {
      return failure;
    }
    stats = SummarizeTimes(per_launch_us, image.bytes_per_call(), image.flops_per_call());
    if (stats.median_us() < floor_us) {
      notes.push_back(absl::StrCat(
          "the median stays below the DRAM bound of ", Short(floor_us), " us (",
          Num(image.bytes_per_call()), " bytes at ", Short(gpu_.info.peak_bandwidth_gbps()),
          " GB/s): one launch moves fewer bytes than bytes_per_call says, or they stay in L2"));
    }
  }
  *outcome->mutable_timing() = stats;
  *summary =
      absl::StrCat("median ", Short(stats.median_us()), " us (min ", Short(stats.min_us()),
                   ", p90 ", Short(stats.p90_us()), ", cv ", Short(stats.cv() * 100), "%) over ",
                   stats.samples(), " replays of ", launches, " launches, ", sets,
                   sets == 1 ? " input set" : " input sets", " touching ", Bytes(pool_bytes));
  if (stats.achieved_gbps() > 0)
    absl::StrAppend(summary, "; ", Short(stats.achieved_gbps()), " GB/s");
  if (stats.achieved_tflops() > 0) {
    absl::StrAppend(summary, "; ", Short(stats.achieved_tflops()), " TFLOP/s");
  }
  for (const std::string& note : notes) absl::StrAppend(summary, "; note: ", note);
  outcome->set_phase(phase);
  return std::nullopt;
}

}  // namespace autotune::kernel_worker::internal
