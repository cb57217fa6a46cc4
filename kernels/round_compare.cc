#include "kernels/round_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>

namespace autotune::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kSeed = 0x5eed0f2011d5u;

// splitmix64: a fixed, portable stream (std distributions differ by library).
class Draws {
 public:
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }
  uint64_t state_ = kSeed;
};

double MedianOf(std::vector<double>& values) {
  const size_t n = values.size();
  if (n == 0) return 0;
  std::nth_element(values.begin(), values.begin() + n / 2, values.end());
  const double upper = values[n / 2];
  if (n % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + n / 2) + upper) / 2;
}

struct Interval {
  double low = 0;
  double high = kInf;
};

// The percentile interval of the median, resampling within each group.
Interval Bootstrap(const std::vector<std::vector<double>>& groups) {
  size_t total = 0;
  for (const auto& g : groups) total += g.size();
  Draws draws;
  std::vector<double> medians;
  medians.reserve(kBootstrapResamples);
  std::vector<double> sample(total);
  for (int b = 0; b < kBootstrapResamples; ++b) {
    size_t k = 0;
    for (const auto& g : groups) {
      for (size_t i = 0; i < g.size(); ++i) sample[k++] = g[draws.Below(g.size())];
    }
    medians.push_back(MedianOf(sample));
  }
  std::sort(medians.begin(), medians.end());
  const double tail = (1 - kRoundConfidence) / 2;
  const double last = static_cast<double>(medians.size() - 1);
  return {medians[static_cast<size_t>(std::floor(tail * last))],
          medians[static_cast<size_t>(std::ceil((1 - tail) * last))]};
}

}  // namespace

RoundRatio CompareRounds(const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<int>& process) {
  RoundRatio ratio;
  size_t n = std::min(a.size(), b.size());
  if (!process.empty()) n = std::min(n, process.size());
  std::map<int, std::vector<double>> by_process;
  std::vector<double> all;
  for (size_t r = 0; r < n; ++r) {
    if (!(a[r] > 0) || !(b[r] > 0)) continue;
    const double x = a[r] / b[r];
    by_process[process.empty() ? 0 : process[r]].push_back(x);
    all.push_back(x);
  }
  ratio.rounds = static_cast<int>(all.size());
  ratio.processes = static_cast<int>(by_process.size());
  ratio.median = MedianOf(all);
  if (!ratio.known()) {
    ratio.low = 0;
    ratio.high = kInf;
    return ratio;
  }
  std::vector<std::vector<double>> groups;
  for (auto& [id, ratios] : by_process) groups.push_back(ratios);
  const Interval interval = Bootstrap(groups);
  ratio.low = interval.low;
  ratio.high = interval.high;
  for (auto& group : groups) {
    const double own = MedianOf(group);
    ratio.low = std::min(ratio.low, own);
    ratio.high = std::max(ratio.high, own);
  }
  return ratio;
}

Versus Classify(const RoundRatio& r, double band) {
  if (!r.known()) return Versus::kUnresolved;
  // Within the band first: a steady gap smaller than the band is a tie,
  // not a verdict another run may reverse.
  if (r.low >= 1 - band && r.high <= 1 + band) return Versus::kWithinBand;
  if (r.low > 1) return Versus::kSlower;
  return Versus::kUnresolved;
}

double RoundsMedian(const std::vector<double>& rounds) {
  std::vector<double> timed;
  for (double t : rounds) {
    if (t > 0) timed.push_back(t);
  }
  return MedianOf(timed);
}

size_t Leader(const std::vector<std::vector<double>>& rounds, const std::vector<int>& process) {
  size_t leader = rounds.size();
  double best = 0;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const double median = RoundsMedian(rounds[i]);
    if (!(median > 0)) continue;
    if (leader == rounds.size() || median < best) {
      leader = i;
      best = median;
    }
  }
  return leader == rounds.size() ? leader : PairedLeader(rounds, process, leader);
}

size_t PairedLeader(const std::vector<std::vector<double>>& rounds, const std::vector<int>& process,
                    size_t start) {
  std::vector<bool> left(rounds.size(), false);
  size_t leader = start;
  while (leader < rounds.size() && !left[leader]) {
    size_t faster = rounds.size();
    double lowest = 1;
    for (size_t i = 0; i < rounds.size(); ++i) {
      if (i == leader || left[i]) continue;
      const RoundRatio r = CompareRounds(rounds[i], rounds[leader], process);
      if (r.known() && r.median < lowest) {
        lowest = r.median;
        faster = i;
      }
    }
    if (faster == rounds.size()) break;
    left[leader] = true;
    leader = faster;
  }
  return leader;
}

double RoundsNoise(const std::vector<double>& rounds) {
  std::vector<double> timed;
  for (double t : rounds) {
    if (t > 0) timed.push_back(t);
  }
  if (static_cast<int>(timed.size()) < kMinPairedRounds) return kInf;
  const double median = RoundsMedian(timed);
  if (!(median > 0)) return kInf;
  const Interval interval = Bootstrap({timed});
  return (interval.high - interval.low) / 2 / median;
}

}  // namespace autotune::kernels
