// Choosing a problem's config among candidates timed serially, so that the
// choice is the same every time it is made and states what it guarantees.
//
//   Choice choice = ChooseConfig(candidates, round_process, current, family_default);
//   const Candidate& winner = candidates[choice.winner];
//   entry.set_bound(choice.bound);
//
// The candidates were timed together in interleaved rounds, in at least
// two worker processes when there were two or more (serial_phase.h); each
// carries its median per round. The fastest (the leader) is the lowest
// median over its rounds, unless another candidate is faster over the
// rounds the two share (kernels::PairedLeader: the later passes time only
// the leaders, so pooled medians mix other rounds); every other candidate
// is compared with it round by
// round (kernels/round_compare.h: a bootstrap over rounds within each
// process, widened to each process's own median ratio) and is within the
// band of it (the interval inside 1 +- band, even when it is slower beyond
// doubt by less than that: a gap another run may reverse), slower beyond
// doubt, or unresolved (the rounds' time cap came first).
//
// The winner, in this order:
//  - The current entry's config (a re-tune) stays while it is within the
//    band of every candidate (its bound, below, at most the band) and the
//    leader is not faster than it beyond the band with confidence: tuning
//    twice does not flip a config for a gain the measurement cannot vouch
//    for (hysteresis).
//  - Else among the leader and those within the band of it (a declared tie):
//    the family's default config, else the first in the family's parameter
//    order (the lowest variant index), of those whose bound is within the
//    band; when none is, the leader. So a tie-break never picks a config an
//    unresolved candidate may beat by more than the band.
// The same timings always give the same choice. `bound` says what the
// choice guarantees: the winner is at most that fraction slower than every
// other candidate, at kernels::kRoundConfidence (the largest upper end of
// winner / other over the other candidates, 0 when it is faster than all);
// it exceeds the band only when the leader itself is unresolved (the
// serial phase then times the leaders again, serial_phase.h).
//
// Before that, SelectCandidates picks from a screen the variants worth the
// serial phase: the screen's short timings only rank.
#ifndef AUTOTUNE_SERVICE_JOBS_CHOICE_H_
#define AUTOTUNE_SERVICE_JOBS_CHOICE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/profile_task.h"
#include "kernels/round_compare.h"
#include "proto/autotune.pb.h"
#include "service/defaults.h"

namespace autotune::service {

// A candidate within this fraction of the leader (both ways, at the
// rounds' confidence) is tied with it: the serial rounds' noise target, so
// that a tie is what the measurement was not asked to separate. One value,
// not two kept equal by hand (a job's serial_noise sets both).
inline constexpr double kTieBand = kernels::kDefaultSerialNoise;

struct Candidate {
  v1::Config config;
  int64_t index = 0;  // the variant's position in the family's parameter order
  v1::TimingStats timing;
  // The serial phase: its median in each round, 0 where it was not timed
  // (rounds shared by every candidate of one choice).
  std::vector<double> rounds;
};

struct Choice {
  size_t winner = 0;          // into the candidates
  size_t leader = 0;          // the fastest over the rounds
  bool tie = false;           // decided by the tie-break or by the current entry
  bool kept_current = false;  // the current entry stayed, the leader not beyond the band
  std::vector<size_t> tied;   // the leader and those within the band of it
  int unresolved = 0;         // candidates neither slower beyond doubt nor within the band
  // The winner is at most this fraction slower than every other candidate;
  // negative when too few rounds were shared to say.
  double bound = 0;
  // The fastest other candidate: how it compares with the winner
  // (runner_up / winner); runner_up == candidates.size() with one candidate.
  size_t runner_up = 0;
  kernels::RoundRatio runner_up_ratio;
  // The runner-up's median over the winner's, minus 1 (their own medians);
  // negative when the tie-break chose a config slower than the fastest.
  double margin = 0;
};

// `candidates` must not be empty. `round_process` names the worker process
// of each round (empty: one). `current` is the problem's current entry
// config, `family_default` the family's default config; either may be null.
Choice ChooseConfig(const std::vector<Candidate>& candidates, const std::vector<int>& round_process,
                    const v1::Config* current, const v1::Config* family_default = nullptr,
                    double band = kTieBand);

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

#endif  // AUTOTUNE_SERVICE_JOBS_CHOICE_H_
