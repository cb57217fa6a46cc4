// The profiler's pure parts: how many input sets a timing rotates over, the
// statistics of a timing, the DRAM floor. None of this needs a GPU.
#include "service/worker/profiler.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernel_worker {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kH200L2 = 60 * kMiB;
constexpr int64_t kPlenty = 100 * kGiB;

struct PoolCase {
  std::string name;
  double bytes_per_call;
  int64_t set_bytes;
  int64_t l2_bytes;
  v1::CacheState cache_state;
  int64_t memory_budget;
  int sets;
  int64_t touched;
};

class PlanInputPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PlanInputPoolTest, Plans) {
  const PoolCase& c = GetParam();
  const InputPoolPlan plan =
      PlanInputPool(c.bytes_per_call, c.set_bytes, c.l2_bytes, c.cache_state, c.memory_budget);
  EXPECT_EQ(plan.sets, c.sets);
  EXPECT_EQ(plan.touched_bytes_per_launch, c.touched);
  EXPECT_EQ(plan.set_bytes, c.set_bytes);
  EXPECT_EQ(plan.pool_touched_bytes, c.sets * c.touched);
  // Where memory does not cap it, a cold pool is the fewest sets (above
  // two) that exceed 2x L2: one set fewer would not.
  const bool capped = c.memory_budget < (int64_t{c.sets} + 1) * c.set_bytes;
  if (c.cache_state != v1::HOT && !capped && c.sets > 2) {
    EXPECT_GT(plan.pool_touched_bytes, 2 * c.l2_bytes);
    EXPECT_LE((c.sets - 1) * c.touched, 2 * c.l2_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlanInputPoolTest,
    ::testing::Values(
        // 8 MiB a launch: 16 sets are 128 MiB > 120 MiB; 15 are exactly 120.
        PoolCase{"whole_set_touched", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::COLD, kPlenty, 16,
                 8 * kMiB},
        // 2 x 60 MiB equals 2x L2 and does not exceed it: 3 sets.
        PoolCase{"exactly_twice_l2_is_not_enough", 60.0 * kMiB, 60 * kMiB, kH200L2, v1::COLD,
                 kPlenty, 3, 60 * kMiB},
        // A set far beyond L2 still gets a second one to rotate to.
        PoolCase{"at_least_two_sets", 1.0 * kGiB, kGiB, kH200L2, v1::COLD, kPlenty, 2, kGiB},
        // The launch touches 1 MiB of a 64 MiB set: sized by what it touches.
        PoolCase{"touched_less_than_set", 1.0 * kMiB, 64 * kMiB, kH200L2, v1::COLD, kPlenty, 121,
                 kMiB},
        // bytes_per_call above what the buffers hold is capped at the set.
        PoolCase{"touched_capped_at_set", 1e12, 1 * kMiB, kH200L2, v1::COLD, kPlenty, 121, kMiB},
        PoolCase{"unknown_bytes_zero", 0, 8 * kMiB, kH200L2, v1::COLD, kPlenty, 16, 8 * kMiB},
        PoolCase{"unknown_bytes_negative", -5, 8 * kMiB, kH200L2, v1::COLD, kPlenty, 16, 8 * kMiB},
        PoolCase{"unknown_bytes_nan", std::numeric_limits<double>::quiet_NaN(), 8 * kMiB, kH200L2,
                 v1::COLD, kPlenty, 16, 8 * kMiB},
        // Fractional bytes round up.
        PoolCase{"fractional_bytes", 1000.5, 4096, 1000, v1::COLD, kPlenty, 2, 1001},
        // Memory caps the pool: 5 sets of 8 MiB fit in 40 MiB.
        PoolCase{"memory_cap", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::COLD, 40 * kMiB, 5, 8 * kMiB},
        PoolCase{"memory_cap_just_below", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::COLD, 40 * kMiB - 1, 4,
                 8 * kMiB},
        // Not even one set fits: still one (the problem's own).
        PoolCase{"memory_below_one_set", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::COLD, kMiB, 1,
                 8 * kMiB},
        PoolCase{"memory_negative", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::COLD, -1, 1, 8 * kMiB},
        PoolCase{"hot_is_one_set", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::HOT, kPlenty, 1, 8 * kMiB},
        PoolCase{"unspecified_is_cold", 8.0 * kMiB, 8 * kMiB, kH200L2, v1::CACHE_STATE_UNSPECIFIED,
                 kPlenty, 16, 8 * kMiB},
        // Without an L2 size: two sets.
        PoolCase{"no_l2", 8.0 * kMiB, 8 * kMiB, 0, v1::COLD, kPlenty, 2, 8 * kMiB},
        // An empty set touches nothing: nothing to rotate.
        PoolCase{"empty_set", 0, 0, kH200L2, v1::COLD, kPlenty, 1, 0}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

struct StatsCase {
  std::string name;
  std::vector<double> per_launch_us;
  double median;
  double min;
  double p90;
  double cv;
  double q3;  // nearest rank: the ceil(0.75 n)-th smallest
};

class SummarizeTimesTest : public ::testing::TestWithParam<StatsCase> {};

TEST_P(SummarizeTimesTest, Summarizes) {
  const StatsCase& c = GetParam();
  const v1::TimingStats stats = SummarizeTimes(c.per_launch_us, 0, 0);
  EXPECT_DOUBLE_EQ(stats.median_us(), c.median);
  EXPECT_DOUBLE_EQ(stats.min_us(), c.min);
  EXPECT_DOUBLE_EQ(stats.p90_us(), c.p90);
  EXPECT_DOUBLE_EQ(stats.q3_us(), c.q3);
  EXPECT_NEAR(stats.cv(), c.cv, 1e-12);
  EXPECT_EQ(stats.samples(), static_cast<int>(c.per_launch_us.size()));
  EXPECT_EQ(stats.achieved_gbps(), 0);
  EXPECT_EQ(stats.achieved_tflops(), 0);
}

std::vector<double> OneTo(int n) {
  std::vector<double> values;
  for (int i = n; i >= 1; --i) values.push_back(i);  // descending: the input is sorted inside
  return values;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SummarizeTimesTest,
    ::testing::Values(StatsCase{"empty", {}, 0, 0, 0, 0, 0}, StatsCase{"one", {5}, 5, 5, 5, 0, 5},
                      // p90 by nearest rank: ceil(0.9 * 3) = 3rd.
                      StatsCase{"odd", {3, 1, 2}, 2, 1, 3, std::sqrt(2.0 / 3) / 2, 3},
                      // Even count: the mean of the middle two.
                      StatsCase{"even", {4, 1, 3, 2}, 2.5, 1, 4, std::sqrt(1.25) / 2.5, 3},
                      // 0.9 * 10 is 9.000000000000002 in floating point; the
                      // rank is 9, not 10.
                      StatsCase{"ten", OneTo(10), 5.5, 1, 9, std::sqrt(8.25) / 5.5, 8},
                      StatsCase{"twenty", OneTo(20), 10.5, 1, 18, std::sqrt(33.25) / 10.5, 15},
                      StatsCase{"eleven", OneTo(11), 6, 1, 10, std::sqrt(10.0) / 6, 9},
                      // Population standard deviation: {1, 3} has 1, mean 2.
                      StatsCase{"population_stddev", {1, 3}, 2, 1, 3, 0.5, 3},
                      StatsCase{"constant", {7, 7, 7, 7}, 7, 7, 7, 0, 7}),
    [](const ::testing::TestParamInfo<StatsCase>& info) { return info.param.name; });

// q1 by nearest rank: the ceil(0.25 n)-th smallest.
TEST(SummarizeTimes, FirstQuartileByNearestRank) {
  EXPECT_DOUBLE_EQ(SummarizeTimes(OneTo(10), 0, 0).q1_us(), 3);
  EXPECT_DOUBLE_EQ(SummarizeTimes(OneTo(20), 0, 0).q1_us(), 5);
  EXPECT_DOUBLE_EQ(SummarizeTimes(OneTo(3), 0, 0).q1_us(), 1);
  EXPECT_DOUBLE_EQ(SummarizeTimes({5}, 0, 0).q1_us(), 5);
  EXPECT_EQ(SummarizeTimes({}, 0, 0).q1_us(), 0);
}

TEST(SummarizeTimes, AchievedRatesFromTheMedian) {
  // 1 MB and 2 MFLOP in a median of 2 us: 500 GB/s and 1 TFLOP/s. The mean
  // (4 us) would give half of that.
  const v1::TimingStats stats = SummarizeTimes({1, 2, 9}, 1e6, 2e6);
  EXPECT_DOUBLE_EQ(stats.median_us(), 2);
  EXPECT_DOUBLE_EQ(stats.achieved_gbps(), 500);
  EXPECT_DOUBLE_EQ(stats.achieved_tflops(), 1);
}

TEST(SummarizeTimes, NoRatesWithoutCounts) {
  const v1::TimingStats stats = SummarizeTimes({1, 2, 3}, 0, -1);
  EXPECT_EQ(stats.achieved_gbps(), 0);
  EXPECT_EQ(stats.achieved_tflops(), 0);
}

struct FloorCase {
  std::string name;
  double bytes_per_call;
  double peak_gbps;
  double floor_us;
};

class BandwidthFloorTest : public ::testing::TestWithParam<FloorCase> {};

TEST_P(BandwidthFloorTest, Floor) {
  const FloorCase& c = GetParam();
  EXPECT_DOUBLE_EQ(BandwidthFloorUs(c.bytes_per_call, c.peak_gbps), c.floor_us);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BandwidthFloorTest,
    ::testing::Values(
        // 1 GB at 1000 GB/s: 1 ms.
        FloorCase{"one_gigabyte", 1e9, 1000, 1000},
        // H200 (about 4.9 TB/s from its clock and bus): 64 MiB in about 13.7 us.
        FloorCase{"h200", 64.0 * kMiB, 4915.2, 64.0 * kMiB / 4915.2e3},
        FloorCase{"unknown_bytes", 0, 1000, 0}, FloorCase{"negative_bytes", -1, 1000, 0},
        FloorCase{"unknown_bandwidth", 1e9, 0, 0},
        FloorCase{"nan_bandwidth", 1e9, std::numeric_limits<double>::quiet_NaN(), 0}),
    [](const ::testing::TestParamInfo<FloorCase>& info) { return info.param.name; });

// Serial rounds: each candidate takes each position in turn.
TEST(RoundOrderTest, RotatesByOneEachRound) {
  EXPECT_THAT(RoundOrder(3, 0), ::testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(RoundOrder(3, 1), ::testing::ElementsAre(1, 2, 0));
  EXPECT_THAT(RoundOrder(3, 2), ::testing::ElementsAre(2, 0, 1));
  EXPECT_THAT(RoundOrder(3, 3), ::testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(RoundOrder(1, 7), ::testing::ElementsAre(0));
  EXPECT_THAT(RoundOrder(0, 1), ::testing::IsEmpty());
  // Over n rounds every candidate is first exactly once.
  std::vector<int> first(5, 0);
  for (int round = 0; round < 5; ++round) ++first[static_cast<size_t>(RoundOrder(5, round)[0])];
  EXPECT_THAT(first, ::testing::Each(1));
}

TEST(JudgeRoundsTest, StopsWhenEveryCandidateIsSeparatedOrWithinTheBand) {
  kernels::SerialRule rule;
  rule.target_noise = 0.005;
  rule.min_rounds = 3;
  rule.max_seconds = 1;
  // Rounds that drift together: the leader, one within 0.2% of it both
  // ways (within the band) and one 3% behind (separated).
  const std::vector<double> leader = {50, 51, 49.5, 50.5};
  const std::vector<double> wobble = {0.999, 1.002, 1.0, 1.001};
  std::vector<double> close;
  std::vector<double> slow;
  for (size_t r = 0; r < leader.size(); ++r) {
    close.push_back(leader[r] * wobble[r]);
    slow.push_back(leader[r] * 1.03);
  }
  auto first = [](const std::vector<double>& v, size_t n) {
    return std::vector<double>(v.begin(), v.begin() + static_cast<long>(n));
  };
  // Too few rounds: nothing decided.
  RoundsVerdict early =
      JudgeRounds({first(slow, 2), first(leader, 2), first(close, 2)}, 2, 0.1, rule);
  EXPECT_EQ(early.stop, std::nullopt);
  EXPECT_THAT(early.separated, ::testing::IsEmpty());
  RoundsVerdict done =
      JudgeRounds({first(slow, 3), first(leader, 3), first(close, 3)}, 3, 0.1, rule);
  EXPECT_THAT(done.separated, ::testing::ElementsAre(0u));
  ASSERT_TRUE(done.stop.has_value());
  EXPECT_THAT(*done.stop, ::testing::HasSubstr(
                              "every candidate separated from the fastest or within 0.50% of it "
                              "after 3 rounds"));
}

TEST(JudgeRoundsTest, AnUnresolvedCandidateKeepsTheRoundsGoingUntilTheCap) {
  kernels::SerialRule rule;
  rule.target_noise = 0.005;
  rule.min_rounds = 3;
  rule.max_seconds = 1;
  const std::vector<double> leader(9, 50.0);
  // +-2% from round to round, 0.2% behind on the median: neither.
  const std::vector<double> noisy = {49.1, 50.1, 51.1, 49.1, 50.1, 51.1, 49.1, 50.1, 51.1};
  RoundsVerdict going = JudgeRounds({leader, noisy}, 9, 0.5, rule);
  EXPECT_EQ(going.stop, std::nullopt);
  EXPECT_THAT(going.separated, ::testing::IsEmpty());
  RoundsVerdict capped = JudgeRounds({leader, noisy}, 9, 1.0, rule);
  ASSERT_TRUE(capped.stop.has_value());
  EXPECT_THAT(*capped.stop, ::testing::HasSubstr("time cap 1 s after 9 rounds, 1 candidates "
                                                 "neither separated from the fastest nor "
                                                 "within 0.50% of it"));
  // A candidate no longer timed (0 in the last round) is not waited for.
  std::vector<double> dropped = noisy;
  dropped.back() = 0;
  RoundsVerdict without = JudgeRounds({leader, dropped}, 9, 0.5, rule);
  ASSERT_TRUE(without.stop.has_value());
  EXPECT_THAT(*without.stop, ::testing::HasSubstr("one candidate left after 9 rounds"));
  // The cap holds even before min_rounds.
  EXPECT_TRUE(JudgeRounds({{50}}, 1, 2.0, rule).stop.has_value());
}

TEST(ResolveSerialRuleTest, DefaultsForUnsetAndOutOfRange) {
  worker::v1::SerialOptions options;
  kernels::SerialRule rule = kernels::ResolveSerialRule(options);
  EXPECT_DOUBLE_EQ(rule.target_noise, 0.005);
  EXPECT_EQ(rule.min_rounds, 5);
  EXPECT_DOUBLE_EQ(rule.max_seconds, 2);
  EXPECT_DOUBLE_EQ(rule.round_seconds, 0.001);
  EXPECT_DOUBLE_EQ(rule.throttle_fraction, 0.75);
  options.set_target_noise(0.01);
  options.set_min_rounds(8);
  options.set_max_seconds(0.5);
  options.set_throttle_fraction(1.5);  // out of range: the default stays
  rule = kernels::ResolveSerialRule(options);
  EXPECT_DOUBLE_EQ(rule.target_noise, 0.01);
  EXPECT_EQ(rule.min_rounds, 8);
  EXPECT_DOUBLE_EQ(rule.max_seconds, 0.5);
  EXPECT_DOUBLE_EQ(rule.throttle_fraction, 0.75);
}

TEST(RoundThrottledTest, BelowTheFractionOfTheDefaultClock) {
  EXPECT_FALSE(RoundThrottled(1980, 1980, 0.75));
  EXPECT_FALSE(RoundThrottled(1485, 1980, 0.75));  // exactly 75%
  EXPECT_TRUE(RoundThrottled(1484, 1980, 0.75));
  EXPECT_FALSE(RoundThrottled(0, 1980, 0.75));  // unknown clock
  EXPECT_FALSE(RoundThrottled(900, 0, 0.75));   // unknown default
}

}  // namespace
}  // namespace autotune::kernel_worker
