// Comparing candidates timed together in interleaved serial rounds, so that
// "faster" means faster across rounds and worker processes, not across the
// back-to-back replays of one round (which share the clock, the
// temperature and the memory placement of the moment, and so look far more
// certain than a re-tune on another day finds them).
//
//   RoundRatio r = CompareRounds(challenger_rounds, leader_rounds, process);
//   switch (Classify(r, kDefaultSerialNoise)) { case Versus::kSlower: ... }
//
// A candidate's timings are its median per round (0 where it was not timed
// that round); `process` says which worker process ran each round (one
// value per round, shared by every candidate of the comparison). Two
// candidates are compared round by round: the ratio of their medians in
// each round both were timed in, so that a slow round (a lower clock) slows
// both. The ratio's interval is a percentile bootstrap over those rounds,
// resampled within each process, then widened to take in each process's own
// median ratio: when two processes disagree, the interval covers both.
//
// Deterministic: the bootstrap draws from a fixed seed, so the same rounds
// always give the same interval (and the same choice). Thread-safe: no
// state.
#ifndef AUTOTUNE_KERNELS_ROUND_COMPARE_H_
#define AUTOTUNE_KERNELS_ROUND_COMPARE_H_

#include <cstddef>
#include <vector>

namespace autotune::kernels {

// Rounds two candidates must share before their ratio has an interval.
inline constexpr int kMinPairedRounds = 3;
// The bootstrap's confidence and its resamples.
inline constexpr double kRoundConfidence = 0.95;
inline constexpr int kBootstrapResamples = 1000;

// a / b over the rounds both were timed in.
struct RoundRatio {
  double median = 0;  // median of the per-round ratios
  double low = 0;     // the interval (see above); [0, inf) when unknown
  double high = 0;
  int rounds = 0;     // rounds both were timed in
  int processes = 0;  // distinct worker processes among those rounds
  bool known() const { return rounds >= kMinPairedRounds; }
};

// `a` and `b` hold one median per round (0 = not timed); `process` one id
// per round, or is empty (every round in one process). Rounds beyond the
// shortest of the three are ignored.
RoundRatio CompareRounds(const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<int>& process);

// A challenger against the fastest (the leader): within `band` of it both
// ways (the interval inside [1 - band, 1 + band]), even when it is slower
// beyond doubt by less than the band (a gap that small is a tie: the
// rounds of another run may order the two the other way); else slower
// beyond doubt (low > 1); else not yet either.
enum class Versus { kSlower, kWithinBand, kUnresolved };
Versus Classify(const RoundRatio& challenger_over_leader, double band);

// The median over the rounds a candidate was timed in; 0 when none.
double RoundsMedian(const std::vector<double>& rounds);

// The candidate with the lowest RoundsMedian among those timed (the lower
// index on equal medians), then PairedLeader from it; `rounds.size()` when
// none was timed. `process` as for CompareRounds.
size_t Leader(const std::vector<std::vector<double>>& rounds, const std::vector<int>& process = {});

// From `start`, the fastest by the rounds candidates share: while another
// candidate is faster than the current one over the rounds both were timed
// in (CompareRounds' median ratio below 1, with an interval), move to the
// one with the lowest such ratio (the lower index among equals); a
// candidate is left at most once, so it ends. Medians pooled over rounds
// compare different mixes of rounds when candidates were timed in
// different passes (a first pass of every candidate in a slow process,
// later ones of the leaders only): the shared rounds do not.
size_t PairedLeader(const std::vector<std::vector<double>>& rounds, const std::vector<int>& process,
                    size_t start);

// The relative noise of a candidate's median across rounds: half the width
// of the bootstrap interval of its rounds' median, over that median (so
// 0.005 means +-0.5% at kRoundConfidence); infinite with fewer than
// kMinPairedRounds rounds.
double RoundsNoise(const std::vector<double>& rounds);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_ROUND_COMPARE_H_
