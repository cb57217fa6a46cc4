#include "service/jobs/choice.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using ::testing::ElementsAre;

// A serially timed candidate: `rounds` medians that follow the shared drift
// of the rounds (the same for every candidate) times its own `pattern`
// (repeated), around `median`.
const std::vector<double> kDrift = {0, 0.03, -0.01, 0.02, 0.01, -0.02, 0.015, 0.005};

Candidate Timed(int64_t index, double median, const std::vector<double>& pattern = {1},
                int rounds = 8) {
  Candidate c;
  c.index = index;
  (*c.config.mutable_params())["BLOCK"] = 64 << index;
  c.timing.set_median_us(median);
  for (int r = 0; r < rounds; ++r) {
    c.rounds.push_back(median * (1 + kDrift[static_cast<size_t>(r) % kDrift.size()]) *
                       pattern[static_cast<size_t>(r) % pattern.size()]);
  }
  return c;
}

// Within +-0.2% of the leader from round to round, and of each other:
// tied with it.
const std::vector<double> kJitter = {0.998, 1.002, 1.001, 0.999, 1.0015};
const std::vector<double> kOtherJitter = {1.0015, 0.998, 1.002, 0.999, 1.001};
// From 0.5% faster to 2% slower from round to round: not resolved in 8
// rounds.
const std::vector<double> kSkewed = {0.995, 1.02, 1.01};

struct ChoiceCase {
  std::string name;
  std::vector<Candidate> candidates;
  int current = -1;  // index into candidates of the current entry's config
  size_t winner;
  bool tie;
  std::vector<size_t> tied;
  int family_default = -1;  // index into candidates of the family's default config
  int unresolved = 0;
};

class ChooseConfigTest : public ::testing::TestWithParam<ChoiceCase> {};

TEST_P(ChooseConfigTest, DecidesAsTheRuleSays) {
  const ChoiceCase& c = GetParam();
  const v1::Config* current = c.current >= 0 ? &c.candidates[c.current].config : nullptr;
  const v1::Config* family_default =
      c.family_default >= 0 ? &c.candidates[c.family_default].config : nullptr;
  const Choice choice = ChooseConfig(c.candidates, {}, current, family_default);
  EXPECT_EQ(choice.winner, c.winner);
  EXPECT_EQ(choice.tie, c.tie);
  EXPECT_EQ(choice.tied, c.tied);
  EXPECT_EQ(choice.unresolved, c.unresolved);
  // The same timings, the same choice.
  EXPECT_EQ(ChooseConfig(c.candidates, {}, current, family_default).winner, choice.winner);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ChooseConfigTest,
    ::testing::Values(
        ChoiceCase{"one_candidate", {Timed(0, 10)}, -1, 0, false, {0}},
        // 3 % faster in every round: a clear winner.
        ChoiceCase{"clear_winner", {Timed(0, 10.3), Timed(1, 10)}, -1, 1, false, {1}},
        // 0.3 % faster in every round, steadily: faster beyond doubt, but by
        // less than the band, so a tie (another run may order them the other
        // way), and the first in parameter order wins it.
        ChoiceCase{"a_small_steady_gap_inside_the_band_is_a_tie",
                   {Timed(0, 10.03), Timed(1, 10)},
                   -1,
                   0,
                   true,
                   {0, 1}},
        // 0.8 % faster in every round: separated beyond the band, the
        // fastest wins.
        ChoiceCase{"a_steady_gap_beyond_the_band_is_separated",
                   {Timed(0, 10.08), Timed(1, 10)},
                   -1,
                   1,
                   false,
                   {1}},
        // Equal within +-0.2 %: a tie, the first in parameter order wins.
        ChoiceCase{
            "within_the_band_is_a_tie", {Timed(3, 10, kJitter), Timed(1, 10)}, -1, 1, true, {0, 1}},
        ChoiceCase{"the_lower_index_wins_a_tie",
                   {Timed(0, 10, kJitter), Timed(1, 10)},
                   -1,
                   0,
                   true,
                   {0, 1}},
        // A tie goes to the family's default...
        ChoiceCase{"tie_prefers_the_family_default",
                   {Timed(0, 10, kJitter), Timed(1, 10), Timed(2, 10, kOtherJitter)},
                   -1,
                   2,
                   true,
                   {0, 1, 2},
                   2},
        // ...which outside the tie does not win.
        ChoiceCase{"family_default_outside_the_tie",
                   {Timed(0, 12), Timed(1, 10), Timed(2, 10, kOtherJitter)},
                   -1,
                   1,
                   true,
                   {1, 2},
                   0},
        // A re-tune keeps the current entry within the band...
        ChoiceCase{"tie_keeps_the_current_entry",
                   {Timed(0, 10, kJitter), Timed(1, 10), Timed(2, 10, kOtherJitter)},
                   2,
                   2,
                   true,
                   {0, 1, 2}},
        // ...and when it is slower beyond doubt but by less than the band
        // (hysteresis: 0.3 % does not flip an entry)...
        ChoiceCase{"hysteresis_keeps_the_current_entry_for_a_small_gain",
                   {Timed(0, 10.03), Timed(1, 10)},
                   0,
                   0,
                   true,
                   {0, 1}},
        // ...but not when the leader is faster beyond the band.
        ChoiceCase{"current_entry_beyond_the_band_is_replaced",
                   {Timed(0, 10.2), Timed(1, 10)},
                   0,
                   1,
                   false,
                   {1}},
        // A candidate that the rounds could not resolve is no tie: the
        // leader wins.
        ChoiceCase{"unresolved_is_no_tie",
                   {Timed(0, 10, kSkewed), Timed(1, 10)},
                   -1,
                   1,
                   false,
                   {1},
                   -1,
                   1}),
    [](const ::testing::TestParamInfo<ChoiceCase>& info) { return info.param.name; });

TEST(ChooseConfigTest, TheBoundIsWhatTheChoiceGuarantees) {
  // The fastest beyond doubt: 0.
  Choice clear = ChooseConfig({Timed(0, 10.3), Timed(1, 10)}, {}, nullptr);
  EXPECT_EQ(clear.bound, 0);
  EXPECT_EQ(clear.runner_up, 0u);
  EXPECT_NEAR(clear.runner_up_ratio.median, 1.03, 1e-9);
  EXPECT_NEAR(clear.margin, 0.03, 1e-9);
  // Kept by hysteresis 0.3 % behind: at most 0.3 % slower.
  const Candidate current = Timed(0, 10.03);
  Choice kept = ChooseConfig({current, Timed(1, 10)}, {}, &current.config);
  EXPECT_TRUE(kept.kept_current);
  EXPECT_NEAR(kept.bound, 0.003, 1e-9);
  EXPECT_LT(kept.margin, 0);
  // A tie: at most the band's worth, never more.
  Choice tie = ChooseConfig({Timed(0, 10, kJitter), Timed(1, 10)}, {}, nullptr);
  EXPECT_GT(tie.bound, 0);
  EXPECT_LE(tie.bound, kTieBand);
  // Unresolved: the leader wins, at most what the other's fastest rounds
  // say (here 0.5%: its rounds reach 0.995 of the leader's).
  Choice skewed = ChooseConfig({Timed(0, 10, kSkewed), Timed(1, 10)}, {}, nullptr);
  EXPECT_EQ(skewed.winner, 1u);
  EXPECT_EQ(skewed.unresolved, 1);
  EXPECT_NEAR(skewed.bound, 1 / 0.995 - 1, 1e-9);
  // Too few rounds to say: negative.
  Choice blind = ChooseConfig({Timed(0, 10.3, {1}, 2), Timed(1, 10, {1}, 2)}, {}, nullptr);
  EXPECT_EQ(blind.winner, 1u);
  EXPECT_LT(blind.bound, 0);
}

// A tie-break goes only to a member within the band of every candidate:
// here the first in order is tied with the leader, but an unresolved third
// may be faster than it by more than the band, so the leader stays.
TEST(ChooseConfigTest, ATieBreakNeverPicksAConfigAnUnresolvedOneMayBeatByMore) {
  const std::vector<Candidate> candidates = {Timed(0, 10, kJitter), Timed(1, 10),
                                             Timed(2, 10, {0.99, 1.015, 1.01, 0.992, 1.012})};
  const Choice choice = ChooseConfig(candidates, {}, nullptr);
  EXPECT_EQ(choice.leader, 1u);
  EXPECT_THAT(choice.tied, ElementsAre(0u, 1u));
  EXPECT_EQ(choice.unresolved, 1);
  EXPECT_EQ(choice.winner, 1u);
  // Without the third, the tie goes to the first in order.
  EXPECT_EQ(ChooseConfig({candidates[0], candidates[1]}, {}, nullptr).winner, 0u);
}

TEST(ChooseConfigTest, TwoProcessesThatDisagreeAreNoTie) {
  // Equal in the first worker process, 2 % slower in the second: neither
  // within the band nor slower beyond doubt.
  Candidate a = Timed(0, 10, {1}, 12);
  for (size_t r = 6; r < 12; ++r) a.rounds[r] *= 1.02;
  const Candidate b = Timed(1, 10, {1}, 12);
  const std::vector<int> process = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  const Choice choice = ChooseConfig({a, b}, process, nullptr);
  EXPECT_EQ(choice.winner, 1u);
  EXPECT_EQ(choice.unresolved, 1);
  EXPECT_EQ(choice.runner_up_ratio.processes, 2);
  EXPECT_GE(choice.bound, 0);
  // One process alone says "tied", and the lower index would win.
  std::vector<Candidate> first = {a, b};
  for (Candidate& c : first) c.rounds.resize(6);
  EXPECT_EQ(ChooseConfig(first, {}, nullptr).winner, 0u);
}

TEST(ChooseConfigTest, WithoutRoundsTheLowestMedianLeads) {
  Candidate a;
  a.index = 0;
  a.timing.set_median_us(10.3);
  Candidate b;
  b.index = 1;
  b.timing.set_median_us(10);
  (*b.config.mutable_params())["BLOCK"] = 1;
  const Choice choice = ChooseConfig({a, b}, {}, nullptr);
  EXPECT_EQ(choice.winner, 1u);
  EXPECT_LT(choice.bound, 0);
}

// A screened candidate with `samples` samples of coefficient of variation `cv`.
Candidate Screened(int64_t index, double median, double cv = 0, int samples = 5) {
  Candidate c;
  c.index = index;
  (*c.config.mutable_params())["BLOCK"] = 64 << index;
  c.timing.set_median_us(median);
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
