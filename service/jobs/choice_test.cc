#include "service/jobs/choice.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using ::testing::ElementsAre;

// A candidate whose per-launch times span [low, high] around `median`.
Candidate Timed(int64_t index, double median, double low, double high) {
  Candidate c;
  c.index = index;
  (*c.config.mutable_params())["BLOCK"] = 64 << index;
  c.timing.set_median_us(median);
  c.timing.set_min_us(low);
  c.timing.set_q3_us(high);
  return c;
}

struct ChoiceCase {
  std::string name;
  std::vector<Candidate> candidates;
  int current = -1;  // index into candidates of the current entry's config
  size_t winner;
  bool tie;
  std::vector<size_t> tied;
  int family_default = -1;  // index into candidates of the family's default config
};

class ChooseConfigTest : public ::testing::TestWithParam<ChoiceCase> {};

TEST_P(ChooseConfigTest, DecidesAsTheRuleSays) {
  const ChoiceCase& c = GetParam();
  const v1::Config* current = c.current >= 0 ? &c.candidates[c.current].config : nullptr;
  const v1::Config* family_default =
      c.family_default >= 0 ? &c.candidates[c.family_default].config : nullptr;
  const Choice choice = ChooseConfig(c.candidates, current, family_default);
  EXPECT_EQ(choice.winner, c.winner);
  EXPECT_EQ(choice.tie, c.tie);
  EXPECT_EQ(choice.tied, c.tied);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ChooseConfigTest,
    ::testing::Values(
        ChoiceCase{"one_candidate", {Timed(0, 10, 9.9, 10.1)}, -1, 0, false, {0}},
        // 3 % faster and the intervals apart: a clear winner, even against
        // the current entry.
        ChoiceCase{"clear_winner",
                   {Timed(0, 10.3, 10.25, 10.35), Timed(1, 10, 9.95, 10.05)},
                   0,
                   1,
                   false,
                   {1}},
        // 3 % faster but the intervals overlap: tied, the first in
        // parameter order wins.
        ChoiceCase{"overlap_is_a_tie",
                   {Timed(0, 10.3, 9.9, 10.6), Timed(1, 10, 9.8, 10.4)},
                   -1,
                   0,
                   true,
                   {0, 1}},
        // Apart intervals but medians 0.2 % apart: inside the band, tied.
        ChoiceCase{"inside_the_band_is_a_tie",
                   {Timed(3, 10.02, 10.015, 10.025), Timed(1, 10, 9.99, 10.01)},
                   -1,
                   1,
                   true,
                   {0, 1}},
        // A tie keeps the current entry's config.
        ChoiceCase{"tie_keeps_the_current_entry",
                   {Timed(0, 10.3, 9.9, 10.6), Timed(1, 10, 9.8, 10.4), Timed(2, 10.1, 9.9, 10.5)},
                   2,
                   2,
                   true,
                   {0, 1, 2}},
        // The current entry outside the tie is not kept.
        ChoiceCase{"current_entry_outside_the_tie",
                   {Timed(0, 12, 11.9, 12.1), Timed(1, 10, 9.8, 10.4), Timed(2, 10.1, 9.9, 10.5)},
                   0,
                   1,
                   true,
                   {1, 2}},
        // A tie without the current entry goes to the family's default...
        ChoiceCase{"tie_prefers_the_family_default",
                   {Timed(0, 10.3, 9.9, 10.6), Timed(1, 10, 9.8, 10.4), Timed(2, 10.1, 9.9, 10.5)},
                   -1,
                   2,
                   true,
                   {0, 1, 2},
                   2},
        // ...but the current entry comes first.
        ChoiceCase{"current_before_the_family_default",
                   {Timed(0, 10.3, 9.9, 10.6), Timed(1, 10, 9.8, 10.4), Timed(2, 10.1, 9.9, 10.5)},
                   1,
                   1,
                   true,
                   {0, 1, 2},
                   2},
        // A default outside the tie does not win it.
        ChoiceCase{"family_default_outside_the_tie",
                   {Timed(0, 12, 11.9, 12.1), Timed(1, 10, 9.8, 10.4), Timed(2, 10.1, 9.9, 10.5)},
                   -1,
                   1,
                   true,
                   {1, 2},
                   0}),
    [](const ::testing::TestParamInfo<ChoiceCase>& info) { return info.param.name; });

TEST(ChooseConfigTest, MarginIsTheNextBestOverTheChosen) {
  const Choice clear = ChooseConfig({Timed(0, 12, 11.9, 12.1), Timed(1, 10, 9.9, 10.1)}, nullptr);
  EXPECT_DOUBLE_EQ(clear.margin, 0.2);
  // A tie that chose the slower config has a negative margin.
  const Choice tie = ChooseConfig({Timed(0, 10.02, 9.9, 10.2), Timed(1, 10, 9.9, 10.2)}, nullptr);
  EXPECT_EQ(tie.winner, 0u);
  EXPECT_LT(tie.margin, 0);
}

// One stray fast sample of the slower config (its min) does not make a
// tie: the interval is [q1, q3]. Seen on the H200 with [min, q3].
TEST(ChooseConfigTest, OneFastSampleOfTheSlowerConfigIsNoTie) {
  Candidate fast = Timed(1, 6.63, 6.60, 6.65);
  fast.timing.set_q1_us(6.62);
  Candidate slow = Timed(0, 6.76, 6.50, 6.78);  // min 6.50: below the fast one's q3
  slow.timing.set_q1_us(6.74);
  const Choice choice = ChooseConfig({slow, fast}, nullptr);
  EXPECT_EQ(choice.winner, 1u);
  EXPECT_FALSE(choice.tie);
  // Without q1, [min, q3] overlap: a tie, which the lower index wins.
  slow.timing.clear_q1_us();
  fast.timing.clear_q1_us();
  EXPECT_TRUE(ChooseConfig({slow, fast}, nullptr).tie);
}

// Serial candidates know the noise of their medians: a gap beyond twice
// the combined noise is a clear win however wide the per-launch intervals.
// Seen on the H200: cold GEMMs 1.7% apart (noise 0.2%) overlapped in
// [q1, q3], and the tie chose the slower one.
TEST(ChooseConfigTest, WithTheMediansNoiseTheGapDecidesNotTheSpread) {
  Candidate fast = Timed(1, 57.59, 56.0, 59.5);
  fast.timing.set_q1_us(56.8);
  Candidate slow = Timed(0, 58.56, 57.0, 60.2);
  slow.timing.set_q1_us(57.6);
  // Without noise the intervals overlap: a tie, to the lower index.
  Choice choice = ChooseConfig({slow, fast}, nullptr);
  EXPECT_TRUE(choice.tie);
  EXPECT_EQ(choice.winner, 0u);
  // With it: 0.97 us apart, twice the combined noise is 0.33 us.
  fast.noise = 0.002;
  slow.noise = 0.002;
  choice = ChooseConfig({slow, fast}, nullptr);
  EXPECT_FALSE(choice.tie);
  EXPECT_EQ(choice.winner, 1u);
  EXPECT_THAT(choice.tied, ElementsAre(1u));
  // Noisier medians (1% each: twice the combined is 1.64 us) are a tie.
  fast.noise = 0.01;
  slow.noise = 0.01;
  choice = ChooseConfig({slow, fast}, nullptr);
  EXPECT_TRUE(choice.tie);
  EXPECT_EQ(choice.winner, 0u);
  // One without noise: the intervals decide.
  fast.noise = 0.002;
  slow.noise = 0;
  EXPECT_TRUE(ChooseConfig({slow, fast}, nullptr).tie);
  // Inside the tie band, whatever the noise.
  Candidate close = Timed(0, 57.70, 57.69, 57.71);
  close.noise = 0.0001;
  fast.noise = 0.0001;
  EXPECT_TRUE(ChooseConfig({close, fast}, nullptr).tie);
}

// Older summaries have no q3: the interval reaches the median.
TEST(ChooseConfigTest, WithoutQ3TheIntervalReachesTheMedian) {
  Candidate a = Timed(0, 10.3, 10.2, 0);
  Candidate b = Timed(1, 10, 9.9, 0);
  const Choice choice = ChooseConfig({a, b}, nullptr);
  EXPECT_EQ(choice.winner, 1u);
  EXPECT_FALSE(choice.tie);
  EXPECT_THAT(choice.tied, ElementsAre(1u));
}

// A screened candidate with `samples` samples of coefficient of variation `cv`.
Candidate Screened(int64_t index, double median, double cv = 0, int samples = 5) {
  Candidate c = Timed(index, median, median, median);
  c.timing.set_cv(cv);
  c.timing.set_samples(samples);
  return c;
}

TEST(SelectCandidatesTest, TheBandAroundTheBest) {
  // Best 10; the band reaches 11: 10.9 is in, 11.5 is out.
  const std::vector<Candidate> screened = {Screened(0, 11.5), Screened(1, 10.9), Screened(2, 10),
                                           Screened(3, 10.5), Screened(4, 20)};
  EXPECT_THAT(SelectCandidates(screened, nullptr, nullptr, {.band = 0.10, .min_count = 1}),
              ElementsAre(2u, 3u, 1u));
}

TEST(SelectCandidatesTest, AtLeastTheFastestFewAtMostTheCap) {
  const std::vector<Candidate> screened = {Screened(0, 30), Screened(1, 10), Screened(2, 20),
                                           Screened(3, 40)};
  // Nothing else is within the band, but three go on.
  EXPECT_THAT(SelectCandidates(screened, nullptr, nullptr, {.band = 0.10, .min_count = 3}),
              ElementsAre(1u, 2u, 0u));
  std::vector<Candidate> close;
  for (int i = 0; i < 20; ++i) close.push_back(Screened(i, 10 + 0.01 * i));
  EXPECT_THAT(SelectCandidates(close, nullptr, nullptr, {.max_count = 8}), ::testing::SizeIs(8));
}

TEST(SelectCandidatesTest, NoiseWidensTheBand) {
  // 11.5 is outside a 10 % band around 10, but with 5 % cv over 4 samples
  // (2.5 % noise) on both sides it is within reach.
  const std::vector<Candidate> quiet = {Screened(0, 10), Screened(1, 11.5)};
  const std::vector<Candidate> noisy = {Screened(0, 10, 0.05, 4), Screened(1, 11.5, 0.05, 4)};
  const CandidateRule rule{.band = 0.10, .min_count = 1};
  EXPECT_THAT(SelectCandidates(quiet, nullptr, nullptr, rule), ElementsAre(0u));
  EXPECT_THAT(SelectCandidates(noisy, nullptr, nullptr, rule), ElementsAre(0u, 1u));
}

TEST(SelectCandidatesTest, TheCurrentEntryAndTheDefaultJoinBeyondTheCap) {
  const std::vector<Candidate> screened = {Screened(0, 10), Screened(1, 10.1), Screened(2, 30),
                                           Screened(3, 50)};
  const CandidateRule rule{.band = 0.10, .min_count = 1, .max_count = 2};
  EXPECT_THAT(SelectCandidates(screened, &screened[3].config, &screened[2].config, rule),
              ElementsAre(0u, 1u, 3u, 2u));
  // Already in: not twice.
  EXPECT_THAT(SelectCandidates(screened, &screened[0].config, nullptr, rule), ElementsAre(0u, 1u));
  // Not screened OK (absent): nothing added.
  v1::Config absent;
  (*absent.mutable_params())["BLOCK"] = 7;
  EXPECT_THAT(SelectCandidates(screened, &absent, nullptr, rule), ElementsAre(0u, 1u));
  EXPECT_THAT(SelectCandidates({}, nullptr, nullptr, rule), ::testing::IsEmpty());
}

}  // namespace
}  // namespace autotune::service
