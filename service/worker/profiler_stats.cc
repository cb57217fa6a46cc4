// The profiler's pure parts, declared in service/worker/profiler.h: how many input
// sets a timing rotates over, the statistics of a timing and the rule that
// ends serial rounds. None of this needs a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/profile_task.h"
#include "proto/autotune.pb.h"
#include "service/worker/profiler.h"

namespace autotune::kernel_worker {

InputPoolPlan PlanInputPool(double bytes_per_call, int64_t set_bytes, int64_t l2_bytes,
                            v1::CacheState cache_state, int64_t memory_budget) {
  InputPoolPlan plan;
  plan.set_bytes = std::max<int64_t>(set_bytes, 0);
  // What one launch touches is at most what a set holds; an unknown (<= 0,
  // NaN) bytes_per_call counts as the whole set.
  int64_t touched = plan.set_bytes;
  if (bytes_per_call > 0 && bytes_per_call < static_cast<double>(plan.set_bytes)) {
    touched = static_cast<int64_t>(std::ceil(bytes_per_call));
  }
  plan.touched_bytes_per_launch = touched;
  // A set that touches nothing cannot be rotated into DRAM: one set.
  if (cache_state != v1::HOT && touched > 0) {
    const int64_t target = 2 * std::max<int64_t>(l2_bytes, 0);
    int64_t sets = std::max<int64_t>(2, target / touched + 1);  // sets * touched > target
    const int64_t affordable = memory_budget / plan.set_bytes;  // set_bytes >= touched > 0
    sets = std::max<int64_t>(1, std::min(sets, affordable));
    plan.sets = static_cast<int>(std::min<int64_t>(sets, std::numeric_limits<int>::max()));
  }
  plan.pool_touched_bytes = plan.sets * touched;
  return plan;
}

v1::TimingStats SummarizeTimes(std::vector<double> per_launch_us, double bytes_per_call,
                               double flops_per_call) {
  v1::TimingStats stats;
  if (per_launch_us.empty()) return stats;
  std::sort(per_launch_us.begin(), per_launch_us.end());
  const size_t n = per_launch_us.size();
  const double median =
      n % 2 == 1 ? per_launch_us[n / 2] : (per_launch_us[n / 2 - 1] + per_launch_us[n / 2]) / 2;
  // Nearest rank: the ceil(0.9 n)-th smallest, in integers (0.9 * n in
  // floating point can land just above a whole number).
  const size_t rank = std::max<size_t>(1, (9 * n + 9) / 10);
  const size_t q3_rank = std::max<size_t>(1, (3 * n + 3) / 4);
  const size_t q1_rank = std::max<size_t>(1, (n + 3) / 4);
  double sum = 0;
  for (double t : per_launch_us) sum += t;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (double t : per_launch_us) squares += (t - mean) * (t - mean);
  const double stddev = std::sqrt(squares / static_cast<double>(n));

  stats.set_median_us(median);
  stats.set_min_us(per_launch_us.front());
  stats.set_p90_us(per_launch_us[rank - 1]);
  stats.set_q3_us(per_launch_us[q3_rank - 1]);
  stats.set_q1_us(per_launch_us[q1_rank - 1]);
  stats.set_cv(mean > 0 ? stddev / mean : 0);
  stats.set_samples(static_cast<int32_t>(std::min<size_t>(n, std::numeric_limits<int32_t>::max())));
  if (median > 0) {
    // bytes / (median_us * 1e-6 s) / 1e9 and flops / (median_us * 1e-6 s) / 1e12.
    if (bytes_per_call > 0) stats.set_achieved_gbps(bytes_per_call / (median * 1e3));
    if (flops_per_call > 0) stats.set_achieved_tflops(flops_per_call / (median * 1e6));
  }
  return stats;
}

double BandwidthFloorUs(double bytes_per_call, double peak_bandwidth_gbps) {
  if (!(bytes_per_call > 0) || !(peak_bandwidth_gbps > 0)) return 0;
  return bytes_per_call / (peak_bandwidth_gbps * 1e3);
}

std::vector<int> RoundOrder(int candidates, int round) {
  std::vector<int> order;
  if (candidates <= 0) return order;
  const int shift = ((round % candidates) + candidates) % candidates;
  for (int i = 0; i < candidates; ++i) order.push_back((i + shift) % candidates);
  return order;
}

namespace {
std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%%", fraction * 100);
  return text;
}
}  // namespace

RoundsVerdict JudgeRounds(const std::vector<std::vector<double>>& round_medians, int rounds,
                          double gpu_seconds, const kernels::SerialRule& rule) {
  RoundsVerdict verdict;
  const std::string after = absl::StrCat(" after ", rounds, rounds == 1 ? " round" : " rounds");
  // Those still re-timed: timed in the last round.
  std::vector<size_t> active;
  for (size_t i = 0; i < round_medians.size(); ++i) {
    if (!round_medians[i].empty() && round_medians[i].back() > 0) active.push_back(i);
  }
  int unresolved = 0;
  if (rounds >= rule.min_rounds && active.size() > 1) {
    std::vector<std::vector<double>> timed;
    for (size_t i : active) timed.push_back(round_medians[i]);
    const size_t leader = kernels::Leader(timed);
    for (size_t k = 0; k < active.size(); ++k) {
      if (k == leader) continue;
      switch (kernels::Classify(kernels::CompareRounds(timed[k], timed[leader], {}),
                                rule.target_noise)) {
        case kernels::Versus::kSlower:
          verdict.separated.push_back(active[k]);
          break;
        case kernels::Versus::kWithinBand:
          break;
        case kernels::Versus::kUnresolved:
          ++unresolved;
          break;
      }
    }
  }
  if (gpu_seconds >= rule.max_seconds) {
    verdict.stop = absl::StrCat(
        "time cap ", rule.max_seconds, " s", after,
        unresolved > 0 || rounds < rule.min_rounds
            ? absl::StrCat(", ", unresolved,
                           " candidates neither separated from the fastest nor within ",
                           Percent(rule.target_noise), " of it")
            : "");
    return verdict;
  }
  if (rounds < rule.min_rounds || unresolved > 0) return verdict;
  verdict.stop = active.size() <= 1
                     ? absl::StrCat("one candidate left", after)
                     : absl::StrCat("every candidate separated from the fastest or within ",
                                    Percent(rule.target_noise), " of it", after);
  return verdict;
}

bool RoundThrottled(int min_clock_mhz, int default_clock_mhz, double fraction) {
  if (min_clock_mhz <= 0 || default_clock_mhz <= 0) return false;
  return min_clock_mhz < fraction * default_clock_mhz;
}

}  // namespace autotune::kernel_worker
