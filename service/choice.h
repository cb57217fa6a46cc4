// Choosing a problem's config among timed candidates, so that a choice
// inside the noise is a declared tie, decided the same way every time.
//
//   Choice choice = ChooseConfig(candidates, current_entry_config);
//   const Candidate& winner = candidates[choice.winner];
//   entry.set_tie(choice.tie);
//
// The rule (after nvbench's compare tool): a candidate's interval is
// [min, q3] of its per-launch times. The fastest median wins outright only
// when it beats the runner-up's median by more than the tie band AND the
// two intervals do not overlap. Otherwise the fastest is tied with every
// candidate that it does not beat that way, and the tie-break picks among
// them: the current entry's config when it is one of them (a rerun does not
// churn the cache), else the one first in the family's parameter order (the
// lowest variant index). The same timings always give the same choice.
#ifndef AUTOTUNE_SERVICE_CHOICE_H_
#define AUTOTUNE_SERVICE_CHOICE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "proto/autotune.pb.h"

namespace autotune::service {

// Medians closer than this fraction are a tie whatever the intervals say
// (nvbench's default noise threshold).
inline constexpr double kTieBand = 0.005;

struct Candidate {
  v1::Config config;
  int64_t index = 0;  // the variant's position in the family's parameter order
  v1::TimingStats timing;
};

struct Choice {
  size_t winner = 0;         // into the candidates
  bool tie = false;          // decided by the tie-break
  std::vector<size_t> tied;  // the candidates tied with the fastest, winner included
  // The fastest other candidate's median over the winner's, minus 1: how
  // much slower the next best is; negative when a tie chose a config
  // slower than the fastest; 0 with one candidate.
  double margin = 0;
};

// `candidates` must not be empty. `current` is the problem's current entry
// config, or null.
Choice ChooseConfig(const std::vector<Candidate>& candidates, const v1::Config* current,
                    double tie_band = kTieBand);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_CHOICE_H_
