#include "service/jobs/choice.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace autotune::service {
namespace {

// [q1, q3]: the middle half of the samples, which one stray fast sample
// does not move (min would). Older summaries without q1 use min; without
// q3 the interval reaches the median.
double Low(const v1::TimingStats& t) {
  if (t.q1_us() > 0) return t.q1_us();
  return t.min_us() > 0 ? t.min_us() : t.median_us();
}
double High(const v1::TimingStats& t) { return std::max(t.q3_us(), t.median_us()); }

// The screen's own spread of a median: cv / sqrt(samples).
double ScreenNoise(const v1::TimingStats& t) {
  return t.samples() > 0 ? t.cv() / std::sqrt(static_cast<double>(t.samples())) : 0;
}

}  // namespace

bool SameConfig(const v1::Config& a, const v1::Config& b) {
  if (a.params_size() != b.params_size()) return false;
  for (const auto& [name, value] : a.params()) {
    auto it = b.params().find(name);
    if (it == b.params().end() || it->second != value) return false;
  }
  return true;
}

std::vector<size_t> SelectCandidates(const std::vector<Candidate>& screened,
                                     const v1::Config* current, const v1::Config* family_default,
                                     const CandidateRule& rule) {
  std::vector<size_t> order(screened.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ma = screened[a].timing.median_us();
    const double mb = screened[b].timing.median_us();
    return ma < mb || (ma == mb && screened[a].index < screened[b].index);
  });
  std::vector<size_t> chosen;
  if (order.empty()) return chosen;
  const v1::TimingStats& best = screened[order.front()].timing;
  const double limit = best.median_us() * (1 + 2 * ScreenNoise(best)) * (1 + rule.band);
  for (size_t i : order) {
    if (static_cast<int>(chosen.size()) >= std::max(rule.max_count, 1)) break;
    const v1::TimingStats& t = screened[i].timing;
    const bool within = t.median_us() * (1 - 2 * ScreenNoise(t)) <= limit;
    if (within || static_cast<int>(chosen.size()) < rule.min_count) chosen.push_back(i);
  }
  for (const v1::Config* extra : {current, family_default}) {
    if (extra == nullptr) continue;
    for (size_t i : order) {
      if (!SameConfig(screened[i].config, *extra)) continue;
      if (std::find(chosen.begin(), chosen.end(), i) == chosen.end()) chosen.push_back(i);
      break;
    }
  }
  return chosen;
}

Choice ChooseConfig(const std::vector<Candidate>& candidates, const v1::Config* current,
                    const v1::Config* family_default, double tie_band) {
  Choice choice;
  // The fastest median; equal medians go to the first in parameter order.
  size_t fastest = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    const double a = candidates[i].timing.median_us();
    const double b = candidates[fastest].timing.median_us();
    if (a < b || (a == b && candidates[i].index < candidates[fastest].index)) fastest = i;
  }
  const v1::TimingStats& best = candidates[fastest].timing;
  // Tied with the fastest: every candidate it does not clearly beat.
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i == fastest) {
      choice.tied.push_back(i);
      continue;
    }
    const v1::TimingStats& other = candidates[i].timing;
    const bool beyond_band = other.median_us() > best.median_us() * (1 + tie_band);
    const double best_noise = candidates[fastest].noise;
    const double other_noise = candidates[i].noise;
    const bool apart =
        best_noise > 0 && other_noise > 0
            ? other.median_us() - best.median_us() >
                  2 * std::hypot(best.median_us() * best_noise, other.median_us() * other_noise)
            : Low(other) > High(best);
    if (!(beyond_band && apart)) choice.tied.push_back(i);
  }
  choice.winner = fastest;
  choice.tie = choice.tied.size() > 1;
  if (choice.tie) {
    // Rank 0: the current entry; 1: the family's default; 2: the rest, by
    // parameter order.
    auto rank = [&](size_t i) {
      if (current != nullptr && SameConfig(candidates[i].config, *current)) return 0;
      if (family_default != nullptr && SameConfig(candidates[i].config, *family_default)) {
        return 1;
      }
      return 2;
    };
    size_t pick = choice.tied.front();
    for (size_t i : choice.tied) {
      const int a = rank(i);
      const int b = rank(pick);
      if (a < b || (a == b && candidates[i].index < candidates[pick].index)) pick = i;
    }
    choice.winner = pick;
  }
  double next_best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i != choice.winner) next_best = std::min(next_best, candidates[i].timing.median_us());
  }
  const double chosen = candidates[choice.winner].timing.median_us();
  if (candidates.size() > 1 && chosen > 0) choice.margin = next_best / chosen - 1;
  return choice;
}

}  // namespace autotune::service
