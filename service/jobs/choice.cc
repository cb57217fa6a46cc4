#include "service/jobs/choice.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace autotune::service {
namespace {

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

Choice ChooseConfig(const std::vector<Candidate>& candidates, const std::vector<int>& round_process,
                    const v1::Config* current, const v1::Config* family_default, double band) {
  using kernels::CompareRounds;
  using kernels::RoundRatio;
  Choice choice;
  const size_t n = candidates.size();
  std::vector<std::vector<double>> rounds;
  for (const Candidate& c : candidates) rounds.push_back(c.rounds);
  // The leader: the lowest median over the rounds; without rounds at all
  // (nothing timed serially), the lowest median; equal ones go to the first
  // in parameter order.
  size_t leader = kernels::Leader(rounds);
  auto median = [&](size_t i) {
    const double over_rounds = kernels::RoundsMedian(candidates[i].rounds);
    return over_rounds > 0 ? over_rounds : candidates[i].timing.median_us();
  };
  if (leader == n) leader = 0;
  for (size_t i = 0; i < n; ++i) {
    const double a = median(i);
    const double b = median(leader);
    if (a < b || (a == b && candidates[i].index < candidates[leader].index)) leader = i;
  }
  choice.leader = leader;
  auto versus = [&](size_t a, size_t b) {
    return CompareRounds(candidates[a].rounds, candidates[b].rounds, round_process);
  };
  for (size_t i = 0; i < n; ++i) {
    if (i == leader) {
      choice.tied.push_back(i);
      continue;
    }
    switch (kernels::Classify(versus(i, leader), band)) {
      case kernels::Versus::kWithinBand:
        choice.tied.push_back(i);
        break;
      case kernels::Versus::kUnresolved:
        ++choice.unresolved;
        break;
      case kernels::Versus::kSlower:
        break;
    }
  }

  // What choosing candidate `w` guarantees: the most it is slower than any
  // other, at the rounds' confidence; negative when too few rounds say.
  auto bound_of = [&](size_t w) {
    double bound = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i == w) continue;
      const RoundRatio w_over_i = versus(w, i);
      if (!w_over_i.known()) return -1.0;
      bound = std::max(bound, w_over_i.high - 1);
    }
    return bound;
  };
  auto within_band = [&](size_t w) {
    const double bound = bound_of(w);
    return bound >= 0 && bound <= band;
  };
  size_t winner = leader;
  size_t current_index = n;
  for (size_t i = 0; i < n && current != nullptr; ++i) {
    if (SameConfig(candidates[i].config, *current)) current_index = i;
  }
  if (current_index != n && current_index != leader) {
    // Hysteresis: the current entry stays while it is within the band of
    // every candidate, and the leader is not faster than it beyond the
    // band with confidence.
    const RoundRatio current_over_leader = versus(current_index, leader);
    const bool beaten = current_over_leader.known() && current_over_leader.low > 1 + band;
    if (!beaten && within_band(current_index)) {
      winner = current_index;
      choice.kept_current = true;
    }
  }
  if (!choice.kept_current && choice.tied.size() > 1) {
    // Rank 0: the family's default; 1: the rest, by parameter order. Only a
    // member that is within the band of every candidate may win the
    // tie-break (an unresolved candidate could be faster than it by more);
    // else the leader stays.
    auto rank = [&](size_t i) {
      return family_default != nullptr && SameConfig(candidates[i].config, *family_default) ? 0 : 1;
    };
    size_t pick = n;
    for (size_t i : choice.tied) {
      if (!within_band(i)) continue;
      if (pick == n || rank(i) < rank(pick) ||
          (rank(i) == rank(pick) && candidates[i].index < candidates[pick].index)) {
        pick = i;
      }
    }
    if (pick != n) winner = pick;
  }
  choice.winner = winner;
  choice.tie = choice.kept_current || choice.tied.size() > 1;
  choice.bound = bound_of(winner);

  choice.runner_up = n;
  for (size_t i = 0; i < n; ++i) {
    if (i == winner) continue;
    if (choice.runner_up == n || median(i) < median(choice.runner_up)) choice.runner_up = i;
  }
  if (choice.runner_up != n) {
    choice.runner_up_ratio = versus(choice.runner_up, winner);
    const double chosen = candidates[winner].timing.median_us();
    if (chosen > 0) choice.margin = candidates[choice.runner_up].timing.median_us() / chosen - 1;
  }
  return choice;
}

}  // namespace autotune::service
