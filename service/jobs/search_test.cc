#include "service/jobs/search.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;

// Every proposal of `search`, asking for `batch` at a time.
std::vector<int64_t> Drain(Search& search, int64_t batch) {
  std::vector<int64_t> all;
  for (std::vector<int64_t> next = search.Next(batch); !next.empty(); next = search.Next(batch)) {
    EXPECT_LE(static_cast<int64_t>(next.size()), batch);
    for (int64_t i : next) search.Record(i, SearchResult{.valid = true, .median_us = 1.0 + i});
    all.insert(all.end(), next.begin(), next.end());
  }
  return all;
}

SearchSpaceView Space(int64_t variants, int64_t default_index) {
  SearchSpaceView space;
  space.variants = variants;
  space.default_index = default_index;
  return space;
}

std::vector<int64_t> Proposals(const SearchOptions& options, const SearchSpaceView& space,
                               int64_t batch = 4) {
  absl::StatusOr<std::unique_ptr<Search>> search = MakeSearch(options, space);
  EXPECT_TRUE(search.ok()) << search.status();
  return search.ok() ? Drain(**search, batch) : std::vector<int64_t>{};
}

TEST(SearchTest, ExhaustiveProposesTheSpaceInOrderInBatches) {
  const std::vector<int64_t> all = Proposals({}, Space(10, 3), 4);
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), int64_t{0});
  EXPECT_EQ(all, expected);
}

TEST(SearchTest, TheBudgetIsACountAFractionOrTheSmallerOfBoth) {
  const SearchSpaceView space = Space(95, -1);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .budget = {.count = 7}}, space).size(), 7u);
  // 9.5 rounded up.
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .budget = {.fraction = 0.1}}, space).size(),
            10u);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .budget = {.count = 7, .fraction = 0.5}}, space)
                .size(),
            7u);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .budget = {.fraction = 1e-9}}, space).size(),
            1u);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .budget = {.count = 1000}}, space).size(), 95u);
  // Exhaustive with a budget: the first variants in space order.
  EXPECT_THAT(Proposals({.kind = SearchKind::kExhaustive, .budget = {.count = 3}}, space),
              ElementsAre(0, 1, 2));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Search> search,
      MakeSearch({.kind = SearchKind::kRandom, .budget = {.fraction = 0.1}}, space));
  EXPECT_EQ(search->budget(), 10);
}

TEST(SearchTest, RandomStartsWithTheDefaultAndProposesEachVariantOnce) {
  const SearchSpaceView space = Space(500, 123);
  const std::vector<int64_t> all =
      Proposals({.kind = SearchKind::kRandom, .budget = {}, .seed = 7}, space, 64);
  ASSERT_EQ(all.size(), 500u);
  EXPECT_EQ(all.front(), 123);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 500u);
  EXPECT_EQ(*std::min_element(all.begin(), all.end()), 0);
  EXPECT_EQ(*std::max_element(all.begin(), all.end()), 499);
  // Not the space order: a shuffle of 499 variants that left them in order
  // would be one in 499!.
  EXPECT_FALSE(std::is_sorted(all.begin() + 1, all.end()));
}

TEST(SearchTest, RandomIsFixedByItsSeedOnEveryMachine) {
  const SearchSpaceView space = Space(10, -1);
  const std::vector<int64_t> first =
      Proposals({.kind = SearchKind::kRandom, .budget = {}, .seed = 1}, space);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .budget = {}, .seed = 1}, space, 3), first);
  EXPECT_NE(Proposals({.kind = SearchKind::kRandom, .budget = {}, .seed = 2}, space), first);
  // SplitMix64 and the rejection sampling fix this order; a change of either
  // (or a std:: distribution, which differs between libraries) shows here.
  EXPECT_THAT(first, ElementsAre(4, 2, 8, 1, 9, 3, 0, 6, 7, 5));
}

// A space of two parameters, a x b values (0..a-1, 0..b-1), row-major.
SearchSpaceView Grid(int64_t a, int64_t b) {
  SearchSpaceView space = Space(a * b, -1);
  space.feature_count = 2;
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      space.features.push_back(static_cast<float>(i));
      space.features.push_back(static_cast<float>(j));
    }
  }
  return space;
}

// A smooth landscape with its minimum at (23, 7), and a failing region (a
// "compile error" wherever both are odd and i > 30): what the model search
// is run against.
SearchResult Landscape(const SearchSpaceView& space, int64_t index) {
  const float i = space.features[index * 2];
  const float j = space.features[index * 2 + 1];
  if (i > 30 && static_cast<int>(i) % 2 == 1 && static_cast<int>(j) % 2 == 1) return {};
  return {.valid = true, .median_us = 10 + (i - 23) * (i - 23) + 3 * (j - 7) * (j - 7)};
}

struct Outcome {
  std::vector<int64_t> proposed;
  double best = 1e300;
};

Outcome RunModel(const SearchOptions& options, const SearchSpaceView& space) {
  absl::StatusOr<std::unique_ptr<Search>> search = MakeSearch(options, space);
  EXPECT_TRUE(search.ok()) << search.status();
  Outcome outcome;
  if (!search.ok()) return outcome;
  const int64_t budget = (*search)->budget();
  for (std::vector<int64_t> batch = (*search)->Next(budget); !batch.empty();
       batch = (*search)->Next(budget)) {
    for (int64_t i : batch) {
      const SearchResult result = Landscape(space, i);
      (*search)->Record(i, result);
      if (result.valid) outcome.best = std::min(outcome.best, result.median_us);
      outcome.proposed.push_back(i);
    }
  }
  return outcome;
}

TEST(SearchTest, TheBudgetIsTheSmallerOfItsLimitsAndItsTimeEndsOnlyAfterARound) {
  EXPECT_EQ((SearchBudget{}).Variants(95), 95);
  EXPECT_EQ((SearchBudget{.count = 7}).Variants(95), 7);
  EXPECT_EQ((SearchBudget{.fraction = 0.1}).Variants(95), 10);  // rounded up
  EXPECT_EQ((SearchBudget{.count = 7, .fraction = 0.5}).Variants(95), 7);
  EXPECT_EQ((SearchBudget{.count = 70, .fraction = 0.5}).Variants(95), 48);
  EXPECT_EQ((SearchBudget{.fraction = 1e-9}).Variants(95), 1);  // at least one
  EXPECT_FALSE((SearchBudget{}).OutOfTime(1e9, 5));
  const SearchBudget timed{.seconds = 90};
  EXPECT_FALSE(timed.OutOfTime(100, 0));  // the first round always runs
  EXPECT_FALSE(timed.OutOfTime(89.9, 3));
  EXPECT_TRUE(timed.OutOfTime(90, 1));
  EXPECT_OK(timed.Check("options.search", 100, 86400));
  EXPECT_THAT((SearchBudget{.count = 101}).Check("options.search", 100, 86400),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.search.max_variants is 101, not in 0..100 (0 = no limit)"));
  EXPECT_THAT((SearchBudget{.seconds = 86401}).Check("options.search", 100, 86400),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.search.max_seconds is 86401, not in 0..86400 (0 = no limit)"));
}

TEST(SearchTest, LaunchFeaturesSayHowTheBlocksFillTheGpu) {
  // 256 blocks of 128 threads and 100 KiB of shared memory: 2 fit an SM by
  // shared memory, so 264 at once on 132 SMs: one wave, 97% full.
  const std::vector<float> a = LaunchFeatures(256, 128, 100 * 1024, 132);
  ASSERT_EQ(a.size(), static_cast<size_t>(kLaunchFeatures));
  EXPECT_EQ(a[0], 256);
  EXPECT_EQ(a[1], 128);
  EXPECT_EQ(a[2], 100 * 1024);
  EXPECT_EQ(a[3], 2);
  EXPECT_NEAR(a[4], 256.0 / 264, 1e-6);
  EXPECT_NEAR(a[5], 256.0 / 264, 1e-6);
  // 1024 threads a block: 2 by threads; 528 blocks are exactly two full waves.
  const std::vector<float> b = LaunchFeatures(528, 1024, 0, 132);
  EXPECT_EQ(b[3], 2);
  EXPECT_NEAR(b[4], 2, 1e-6);
  EXPECT_EQ(b[5], 1);
}

TEST(SearchTest, BadOptionsAndSpacesAreRefusedNamingWhatIsWrong) {
  const SearchSpaceView space = Space(10, -1);
  EXPECT_THAT(MakeSearch({.budget = {.count = -1}}, space),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "search.max_variants is -1, not at least 0 (0 = no limit)"));
  EXPECT_THAT(MakeSearch({.budget = {.fraction = 1.5}}, space),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "search.max_fraction is 1.5, not in 0..1 (0 = no limit)"));
  EXPECT_THAT(MakeSearch({.budget = {.seconds = std::nan("")}}, space),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "search.max_seconds is nan, not at least 0 (0 = no limit)"));
  EXPECT_THAT(MakeSearch({}, Space(0, -1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "the search space has no variants"));
  EXPECT_THAT(MakeSearch({}, Space(10, 10)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the default config's index 10 is not in the space of 10 variants"));
  EXPECT_THAT(ParseSearchKind("genetic"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown search 'genetic' (exhaustive, random or model)"));
  ASSERT_OK_AND_ASSIGN(SearchKind kind, ParseSearchKind("random"));
  EXPECT_EQ(kind, SearchKind::kRandom);
  EXPECT_THAT(MakeSearch({.kind = SearchKind::kModel, .budget = {}}, Space(10, -1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the model search needs each variant's parameter values: 0 features for "
                       "10 variants of 0"));
  SearchSpaceView hinted = Grid(4, 4);
  hinted.hints = {16};
  EXPECT_THAT(MakeSearch({}, hinted), StatusIs(absl::StatusCode::kInvalidArgument,
                                               "the hint 16 is not in the space of 16 variants"));
}

TEST(ModelSearchTest, FindsTheMinimumOfASmoothSpaceMeasuringAFewPercent) {
  const SearchSpaceView space = Grid(64, 32);  // 2,048 variants
  for (uint64_t seed : {1, 2, 3}) {
    const Outcome outcome =
        RunModel({.kind = SearchKind::kModel, .budget = {.fraction = 0.1}, .seed = seed}, space);
    EXPECT_EQ(outcome.best, 10) << "seed " << seed;
    EXPECT_LE(outcome.proposed.size(), 205u);
    const std::set<int64_t> distinct(outcome.proposed.begin(), outcome.proposed.end());
    EXPECT_EQ(distinct.size(), outcome.proposed.size()) << "a variant was proposed twice";
  }
}

TEST(ModelSearchTest, IsDeterministicForASeedAndDiffersAcrossSeeds) {
  SearchSpaceView space = Grid(64, 32);
  space.default_index = 5;
  const Outcome a =
      RunModel({.kind = SearchKind::kModel, .budget = {.fraction = 0.05}, .seed = 7}, space);
  const Outcome b =
      RunModel({.kind = SearchKind::kModel, .budget = {.fraction = 0.05}, .seed = 7}, space);
  const Outcome c =
      RunModel({.kind = SearchKind::kModel, .budget = {.fraction = 0.05}, .seed = 8}, space);
  EXPECT_EQ(a.proposed, b.proposed);
  EXPECT_NE(a.proposed, c.proposed);
  ASSERT_FALSE(a.proposed.empty());
  EXPECT_EQ(a.proposed.front(), 5) << "the default config is measured first";
}

TEST(ModelSearchTest, MeasuresTheHintsFirstAndKeepsItsBudget) {
  SearchSpaceView space = Grid(64, 32);
  space.default_index = 0;
  space.hints = {23 * 32 + 7, 100};
  const Outcome outcome =
      RunModel({.kind = SearchKind::kModel, .budget = {.count = 40}, .seed = 1}, space);
  ASSERT_GE(outcome.proposed.size(), 3u);
  EXPECT_THAT(std::vector<int64_t>(outcome.proposed.begin(), outcome.proposed.begin() + 3),
              ElementsAre(0, 23 * 32 + 7, 100));
  EXPECT_LE(outcome.proposed.size(), 40u);
  EXPECT_EQ(outcome.best, 10);
}

TEST(ModelSearchTest, StopsWhenItStopsImprovingWithoutABudget) {
  const SearchSpaceView space = Grid(64, 32);
  const Outcome outcome = RunModel({.kind = SearchKind::kModel, .budget = {}, .seed = 3}, space);
  EXPECT_EQ(outcome.best, 10);
  EXPECT_LT(outcome.proposed.size(), space.variants / 2);
}

TEST(ModelSearchTest, AvoidsTheRegionWhereVariantsFail) {
  // The failing region is the odd-odd quarter of i > 30, 1/8 of the space:
  // a search that learned nothing from failures would propose into it at
  // that rate; the model, after its random start, hardly does.
  const SearchSpaceView space = Grid(64, 32);
  const Outcome outcome =
      RunModel({.kind = SearchKind::kModel, .budget = {.fraction = 0.1}, .seed = 5}, space);
  int64_t failed = 0;
  for (int64_t i : outcome.proposed) failed += Landscape(space, i).valid ? 0 : 1;
  EXPECT_LT(failed * 12, static_cast<int64_t>(outcome.proposed.size()));
}

// Ahead guesses what comes next without changing it: a run that asks it
// before every result proposes exactly what a run that never asks does, and
// once the model has results to go on, much of each next round was guessed.
TEST(ModelSearchTest, AheadGuessesTheNextRoundsWithoutChangingThem) {
  const SearchSpaceView space = Grid(48, 16);
  const SearchOptions options{.kind = SearchKind::kModel, .budget = {.fraction = 0.15}, .seed = 9};
  const Outcome plain = RunModel(options, space);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Search> search, MakeSearch(options, space));
  std::vector<int64_t> proposed;
  std::set<int64_t> guessed;
  int64_t later = 0;
  int64_t later_guessed = 0;
  int rounds = 0;
  for (std::vector<int64_t> batch = search->Next(search->budget()); !batch.empty();
       batch = search->Next(search->budget())) {
    ++rounds;
    for (int64_t i : batch) {
      if (rounds > 2) {  // the first round's guesses had no result to go on
        ++later;
        later_guessed += guessed.contains(i) ? 1 : 0;
      }
    }
    const std::vector<int64_t> ahead = search->Ahead(2 * static_cast<int64_t>(batch.size()));
    EXPECT_LE(ahead.size(), 2 * batch.size());
    for (int64_t i : ahead) {
      EXPECT_EQ(std::count(proposed.begin(), proposed.end(), i), 0) << i << " was proposed";
      EXPECT_EQ(std::count(batch.begin(), batch.end(), i), 0) << i << " is being measured";
    }
    guessed.insert(ahead.begin(), ahead.end());
    for (int64_t i : batch) search->Record(i, Landscape(space, i));
    proposed.insert(proposed.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(proposed, plain.proposed);
  ASSERT_GT(rounds, 3);
  EXPECT_GT(later_guessed * 3, later) << later_guessed << " of " << later;
  EXPECT_THAT(search->Ahead(10), ::testing::IsEmpty());  // spent: nothing comes next
}

TEST(SearchTest, AheadOfAFixedOrderIsWhatComesNextInIt) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Search> search,
      MakeSearch({.kind = SearchKind::kExhaustive, .budget = {.count = 6}}, Space(10, -1)));
  EXPECT_THAT(search->Ahead(3), ElementsAre(0, 1, 2));
  EXPECT_THAT(search->Next(4), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(search->Ahead(3), ElementsAre(4, 5));  // the budget ends there
  EXPECT_THAT(search->Next(4), ElementsAre(4, 5));
  EXPECT_THAT(search->Ahead(3), ::testing::IsEmpty());
}

TEST(SearchTest, TheModelLearnsFromDerivedFeaturesGivenForEveryVariant) {
  SearchSpaceView space = Grid(5, 2);
  space.derived_count = 2;
  space.derived.assign(19, 1.0F);  // one short
  EXPECT_THAT(MakeSearch({.kind = SearchKind::kModel, .budget = {}}, space),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the model search's derived features: 19 for 10 variants of 2"));
  space.derived.assign(20, 1.0F);
  EXPECT_OK(MakeSearch({.kind = SearchKind::kModel, .budget = {}}, space));
}

}  // namespace
}  // namespace autotune::service
