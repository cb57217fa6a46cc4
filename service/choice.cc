#include "service/choice.h"

#include <algorithm>
#include <limits>

namespace autotune::service {
namespace {

// [min, q3]; a summary without q3 (older measurements) reaches the median.
double Low(const v1::TimingStats& t) { return t.min_us() > 0 ? t.min_us() : t.median_us(); }
double High(const v1::TimingStats& t) { return std::max(t.q3_us(), t.median_us()); }

bool SameConfig(const v1::Config& a, const v1::Config& b) {
  if (a.params_size() != b.params_size()) return false;
  for (const auto& [name, value] : a.params()) {
    auto it = b.params().find(name);
    if (it == b.params().end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

Choice ChooseConfig(const std::vector<Candidate>& candidates, const v1::Config* current,
                    double tie_band) {
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
    const bool apart = Low(other) > High(best);
    if (!(beyond_band && apart)) choice.tied.push_back(i);
  }
  choice.winner = fastest;
  choice.tie = choice.tied.size() > 1;
  if (choice.tie) {
    size_t pick = choice.tied.front();
    bool picked_current = false;
    for (size_t i : choice.tied) {
      const bool is_current = current != nullptr && SameConfig(candidates[i].config, *current);
      if (is_current && !picked_current) {
        pick = i;
        picked_current = true;
      } else if (!picked_current && candidates[i].index < candidates[pick].index) {
        pick = i;
      }
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
