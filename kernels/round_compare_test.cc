#include "kernels/round_compare.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

// `rounds` medians around `base`, each round's own wobble `wobble[r % size]`
// (a fraction) shared by every candidate timed in that round.
std::vector<double> Rounds(double base, int rounds, const std::vector<double>& wobble,
                           double own_noise = 0) {
  std::vector<double> out;
  for (int r = 0; r < rounds; ++r) {
    const double own = own_noise * ((r % 3) - 1);  // -1, 0, +1 in turn
    out.push_back(base * (1 + wobble[static_cast<size_t>(r) % wobble.size()]) * (1 + own));
  }
  return out;
}

const std::vector<double> kDrift = {0, 0.04, -0.02, 0.06, 0.01};

TEST(RoundCompareTest, ARoundThatSlowsBothDoesNotSeparateThem) {
  // Rounds 6% apart from one another, the two candidates equal in each.
  const RoundRatio r = CompareRounds(Rounds(10, 10, kDrift), Rounds(10, 10, kDrift), {});
  EXPECT_DOUBLE_EQ(r.median, 1);
  EXPECT_EQ(r.rounds, 10);
  EXPECT_EQ(r.processes, 1);
  EXPECT_EQ(Classify(r, 0.005), Versus::kWithinBand);
}

TEST(RoundCompareTest, ASmallSteadyGapIsSeparated) {
  // 0.8% slower in every round, each round's own noise 0.1%.
  const RoundRatio r = CompareRounds(Rounds(10.08, 12, kDrift, 0.001), Rounds(10, 12, kDrift), {});
  EXPECT_NEAR(r.median, 1.008, 0.0015);
  EXPECT_GT(r.low, 1);
  EXPECT_EQ(Classify(r, 0.005), Versus::kSlower);
}

TEST(RoundCompareTest, ASteadyGapInsideTheBandIsATieNotAVerdict) {
  // 0.3% slower in every round, each round's own noise 0.05%: slower beyond
  // doubt, but by less than the band, so within it.
  const RoundRatio r = CompareRounds(Rounds(10.03, 12, kDrift, 0.0005), Rounds(10, 12, kDrift), {});
  EXPECT_GT(r.low, 1);
  EXPECT_LE(r.high, 1.005);
  EXPECT_EQ(Classify(r, 0.005), Versus::kWithinBand);
  EXPECT_EQ(Classify(r, 0.002), Versus::kSlower);
}

TEST(RoundCompareTest, NoisyRoundsStayUnresolved) {
  // +-2% from round to round, independently of the leader: not separated,
  // not within 0.5% either.
  const RoundRatio r = CompareRounds(Rounds(10.05, 6, {0}, 0.02), Rounds(10, 6, {0}), {});
  EXPECT_LT(r.low, 1);
  EXPECT_GT(r.high, 1.005);
  EXPECT_EQ(Classify(r, 0.005), Versus::kUnresolved);
}

TEST(RoundCompareTest, TwoProcessesThatDisagreeWidenTheInterval) {
  // Equal in the first process, 3% slower in the second: the interval
  // takes in both processes' own medians, so neither verdict is sure.
  std::vector<double> a = Rounds(10, 6, {0});
  std::vector<double> more = Rounds(10.3, 6, {0});
  a.insert(a.end(), more.begin(), more.end());
  const std::vector<double> b = Rounds(10, 12, {0});
  const std::vector<int> process = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  const RoundRatio r = CompareRounds(a, b, process);
  EXPECT_EQ(r.processes, 2);
  EXPECT_LE(r.low, 1.0);
  EXPECT_GE(r.high, 1.03 - 1e-12);
  EXPECT_EQ(Classify(r, 0.005), Versus::kUnresolved);
  // The first process alone would have said "equal".
  const RoundRatio alone = CompareRounds(std::vector<double>(a.begin(), a.begin() + 6), b, {});
  EXPECT_EQ(Classify(alone, 0.005), Versus::kWithinBand);
}

TEST(RoundCompareTest, OnlyRoundsBothWereTimedInCountAndTooFewAreUnknown) {
  const std::vector<double> a = {10, 0, 10, 0, 10.1};
  const std::vector<double> b = {10, 10, 0, 10, 10};
  const RoundRatio r = CompareRounds(a, b, {});
  EXPECT_EQ(r.rounds, 2);
  EXPECT_FALSE(r.known());
  EXPECT_TRUE(std::isinf(r.high));
  EXPECT_EQ(Classify(r, 0.005), Versus::kUnresolved);
}

TEST(RoundCompareTest, TheSameRoundsGiveTheSameInterval) {
  const std::vector<double> a = Rounds(10.02, 9, kDrift, 0.003);
  const std::vector<double> b = Rounds(10, 9, kDrift, 0.002);
  const RoundRatio first = CompareRounds(a, b, {});
  const RoundRatio second = CompareRounds(a, b, {});
  EXPECT_EQ(first.low, second.low);
  EXPECT_EQ(first.high, second.high);
  EXPECT_LE(first.low, first.median);
  EXPECT_GE(first.high, first.median);
}

TEST(RoundCompareTest, TheLeaderIsTheLowestMedianOfTheRoundsTimed) {
  EXPECT_EQ(Leader({{10, 10, 10}, {0, 9.9, 9.8}, {}}), 1u);
  EXPECT_EQ(Leader({{10, 10}, {10, 10}}), 0u);  // equal: the lower index
  EXPECT_EQ(Leader({{0, 0}, {}}), 2u);          // none timed
  EXPECT_DOUBLE_EQ(RoundsMedian({0, 3, 1, 2}), 2);
}

// A first pass of every candidate in a slow process (rounds 0-4), a later
// pass of the first only in a fast one (rounds 5-9): pooled over its
// rounds the first has the lower median (105 against 109), but over the
// rounds both were timed in the second is faster (109 against 110), and it
// leads.
TEST(RoundCompareTest, TheLeaderIsTheFastestOverTheRoundsCandidatesShare) {
  const std::vector<std::vector<double>> rounds = {
      {110, 110, 110, 110, 110, 100, 100, 100, 100, 100},
      {109, 109, 109, 109, 109, 0, 0, 0, 0, 0},
      {120, 120, 120, 120, 120, 0, 0, 0, 0, 0}};
  const std::vector<int> process = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  EXPECT_DOUBLE_EQ(RoundsMedian(rounds[0]), 105);
  EXPECT_EQ(Leader(rounds, process), 1u);
  EXPECT_EQ(PairedLeader(rounds, process, 2), 1u);  // from the slowest, via the fastest ratio
  // Fewer than kMinPairedRounds shared rounds say nothing: the pooled
  // leader stays.
  const std::vector<std::vector<double>> few = {{110, 110, 100, 100, 100}, {109, 109, 0, 0, 0}};
  EXPECT_EQ(Leader(few, {0, 0, 1, 1, 1}), 0u);
  // Three candidates each faster than the next over different rounds (a
  // cycle) still end.
  const std::vector<std::vector<double>> cycle = {{10, 10, 10, 11, 11, 11, 0, 0, 0},
                                                  {11, 11, 11, 0, 0, 0, 10, 10, 10},
                                                  {0, 0, 0, 10, 10, 10, 11, 11, 11}};
  EXPECT_LT(Leader(cycle, {}), 3u);
}

TEST(RoundCompareTest, NoiseIsTheIntervalOfTheRoundsMedian) {
  EXPECT_TRUE(std::isinf(RoundsNoise({10, 10})));
  EXPECT_DOUBLE_EQ(RoundsNoise({10, 10, 10, 10}), 0);
  const double noise = RoundsNoise(Rounds(10, 12, {0}, 0.01));
  EXPECT_GT(noise, 0.001);
  EXPECT_LE(noise, 0.01 + 1e-12);
}

}  // namespace
}  // namespace autotune::kernels
