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

namespace {

// The comparisons a choice is made of, over one set of candidates.
class Rounds {
 public:
  Rounds(const std::vector<Candidate>& candidates, const std::vector<int>& round_process,
         double band)
      : candidates_(candidates), round_process_(round_process), band_(band) {}

  size_t size() const { return candidates_.size(); }

  // The median over its rounds; without rounds (nothing timed serially),
  // its timing's median.
  double Median(size_t i) const {
    const double over_rounds = kernels::RoundsMedian(candidates_[i].rounds);
    return over_rounds > 0 ? over_rounds : candidates_[i].timing.median_us();
  }

  // The lowest median (equal ones go to the first in parameter order),
  // then the fastest by the rounds candidates share (kernels::PairedLeader).
  size_t Leader() const {
    size_t leader = 0;
    for (size_t i = 1; i < size(); ++i) {
      const double a = Median(i);
      const double b = Median(leader);
      if (a < b || (a == b && candidates_[i].index < candidates_[leader].index)) leader = i;
    }
    std::vector<std::vector<double>> timed;
    for (const Candidate& c : candidates_) timed.push_back(c.rounds);
    return kernels::PairedLeader(timed, round_process_, leader);
  }

  kernels::RoundRatio Versus(size_t a, size_t b) const {
    return kernels::CompareRounds(candidates_[a].rounds, candidates_[b].rounds, round_process_);
  }

  // What choosing `w` guarantees: the most it is slower than any other, at
  // the rounds' confidence; negative when too few rounds say.
  double BoundOf(size_t w) const {
    double bound = 0;
    for (size_t i = 0; i < size(); ++i) {
      if (i == w) continue;
      const kernels::RoundRatio w_over_i = Versus(w, i);
      if (!w_over_i.known()) return -1.0;
      bound = std::max(bound, w_over_i.high - 1);
    }
    return bound;
  }

  bool WithinBand(size_t w) const {
    const double bound = BoundOf(w);
    return bound >= 0 && bound <= band_;
  }

 private:
  const std::vector<Candidate>& candidates_;
  const std::vector<int>& round_process_;
  const double band_;
};

size_t IndexOf(const std::vector<Candidate>& candidates, const v1::Config* config) {
  for (size_t i = 0; i < candidates.size() && config != nullptr; ++i) {
    if (SameConfig(candidates[i].config, *config)) return i;
  }
  return candidates.size();
}

// Among the tied, those within the band of every candidate: the family's
// default, else the first in parameter order; `leader` when none is.
size_t TieBreak(const std::vector<Candidate>& candidates, const Rounds& rounds,
                const std::vector<size_t>& tied, const v1::Config* family_default, size_t leader) {
  const size_t default_index = IndexOf(candidates, family_default);
  size_t pick = candidates.size();
  for (size_t i : tied) {
    if (!rounds.WithinBand(i)) continue;
    if (pick == candidates.size() || (i == default_index) ||
        (pick != default_index && candidates[i].index < candidates[pick].index)) {
      pick = i;
    }
  }
  return pick == candidates.size() ? leader : pick;
}

}  // namespace

Choice ChooseConfig(const std::vector<Candidate>& candidates, const std::vector<int>& round_process,
                    const v1::Config* current, const v1::Config* family_default, double band) {
  const Rounds rounds(candidates, round_process, band);
  const size_t n = candidates.size();
  Choice choice;
  choice.leader = rounds.Leader();
  for (size_t i = 0; i < n; ++i) {
    if (i == choice.leader) {
      choice.tied.push_back(i);
      continue;
    }
    switch (kernels::Classify(rounds.Versus(i, choice.leader), band)) {
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
  // Hysteresis: the current entry stays while it is within the band of
  // every candidate and the leader is not faster than it beyond the band
  // with confidence.
  const size_t current_index = IndexOf(candidates, current);
  if (current_index != n && current_index != choice.leader) {
    const kernels::RoundRatio over_leader = rounds.Versus(current_index, choice.leader);
    const bool beaten = over_leader.known() && over_leader.low > 1 + band;
    choice.kept_current = !beaten && rounds.WithinBand(current_index);
  }
  choice.winner = choice.kept_current ? current_index
                  : choice.tied.size() > 1
                      ? TieBreak(candidates, rounds, choice.tied, family_default, choice.leader)
                      : choice.leader;
  choice.tie = choice.kept_current || choice.tied.size() > 1;
  choice.bound = rounds.BoundOf(choice.winner);
  choice.runner_up = n;
  for (size_t i = 0; i < n; ++i) {
    if (i == choice.winner) continue;
    if (choice.runner_up == n || rounds.Median(i) < rounds.Median(choice.runner_up)) {
      choice.runner_up = i;
    }
  }
  if (choice.runner_up != n) {
    choice.runner_up_ratio = rounds.Versus(choice.runner_up, choice.winner);
    const double chosen = candidates[choice.winner].timing.median_us();
    if (chosen > 0) choice.margin = candidates[choice.runner_up].timing.median_us() / chosen - 1;
  }
  return choice;
}

}  // namespace autotune::service
