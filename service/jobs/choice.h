// Choosing a problem's config among timed candidates, so that a choice
// inside the noise is a declared tie, decided the same way every time.
//
//   Choice choice = ChooseConfig(candidates, current_entry_config);
//   const Candidate& winner = candidates[choice.winner];
//   entry.set_tie(choice.tie);
//
// The rule: the fastest median wins outright over another candidate only
// when it beats that one's median by more than the tie band AND the two
// medians are apart beyond their uncertainty. Where both candidates know
// the noise of their median (the serial phase's standard error over the
// median), apart means a gap of more than twice the two errors combined
// (root of the sum of squares). Without it (after nvbench's compare tool)
// apart means that their intervals do not overlap: [q1, q3] of the
// per-launch times ([min, q3] for summaries without q1). The interval of
// per-launch times measures their spread, not the median's uncertainty:
// on the H200 cold GEMMs whose medians were 1.7 to 3.5% apart with noise
// under 0.5% overlapped and were declared ties, which took the lower
// variant index, a slower config. Otherwise the fastest is tied with every
// candidate that it does not beat that way, and the tie-break picks among
// them: the current entry's config when it is one of them (a rerun does not
// churn the cache), else the family's default config when it is one of
// them, else the one first in the family's parameter order (the lowest
// variant index). The same timings always give the same choice.
//
// Before that, SelectCandidates picks from a screen the variants worth the
// serial phase: the screen's short timings only rank.
#ifndef AUTOTUNE_SERVICE_CHOICE_H_
#define AUTOTUNE_SERVICE_CHOICE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/profile_task.h"
#include "proto/autotune.pb.h"
#include "service/defaults.h"

namespace autotune::service {

// Medians closer than this fraction are a tie whatever the intervals say:
// the serial rounds' noise target (nvbench's default noise threshold too),
// so that a tie is what the measurement was not asked to separate. One
// value, not two kept equal by hand.
inline constexpr double kTieBand = kernels::kDefaultSerialNoise;

struct Candidate {
  v1::Config config;
  int64_t index = 0;  // the variant's position in the family's parameter order
  v1::TimingStats timing;
  // The standard error of the median over the median (a serial timing's
  // noise); 0 = unknown, and the intervals decide.
  double noise = 0;
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
// config, `family_default` the family's default config; either may be null.
Choice ChooseConfig(const std::vector<Candidate>& candidates, const v1::Config* current,
                    const v1::Config* family_default = nullptr, double tie_band = kTieBand);

// Which screened variants go on to the serial phase.
struct CandidateRule {
  double band = kDefaultCandidateBand;          // within (1 + band) of the best median...
  int min_count = kDefaultMinSerialCandidates;  // ...but at least the fastest few...
  int max_count = kDefaultSerialCandidates;     // ...and at most this many
};

// Indices into `screened`, fastest first: every variant whose median, less
// twice its noise, is within (1 + band) of the best median plus twice the
// best's noise (noise: cv / sqrt(samples), the screen's own spread), at
// least min_count and at most max_count of them by median; then the
// current entry's config and the family's default config when screened and
// not already in (they may exceed the cap: the first keeps a rerun from
// churning, the second gives the speedup its baseline). Empty for empty
// input.
std::vector<size_t> SelectCandidates(const std::vector<Candidate>& screened,
                                     const v1::Config* current, const v1::Config* family_default,
                                     const CandidateRule& rule = {});

// Same parameters with the same values.
bool SameConfig(const v1::Config& a, const v1::Config& b);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_CHOICE_H_
