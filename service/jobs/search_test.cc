#include "service/jobs/search.h"

#include <algorithm>
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

std::vector<int64_t> Proposals(const SearchOptions& options, const SearchSpaceView& space,
                               int64_t batch = 4) {
  absl::StatusOr<std::unique_ptr<Search>> search = MakeSearch(options, space);
  EXPECT_TRUE(search.ok()) << search.status();
  return search.ok() ? Drain(**search, batch) : std::vector<int64_t>{};
}

TEST(SearchTest, ExhaustiveProposesTheSpaceInOrderInBatches) {
  const std::vector<int64_t> all = Proposals({}, {.variants = 10, .default_index = 3}, 4);
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), int64_t{0});
  EXPECT_EQ(all, expected);
}

TEST(SearchTest, TheBudgetIsACountAFractionOrTheSmallerOfBoth) {
  const SearchSpaceView space{.variants = 95, .default_index = -1};
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .max_variants = 7}, space).size(), 7u);
  // 9.5 rounded up.
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .fraction = 0.1}, space).size(), 10u);
  EXPECT_EQ(
      Proposals({.kind = SearchKind::kRandom, .max_variants = 7, .fraction = 0.5}, space).size(),
      7u);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .fraction = 1e-9}, space).size(), 1u);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .max_variants = 1000}, space).size(), 95u);
  // Exhaustive with a budget: the first variants in space order.
  EXPECT_THAT(Proposals({.kind = SearchKind::kExhaustive, .max_variants = 3}, space),
              ElementsAre(0, 1, 2));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Search> search,
                       MakeSearch({.kind = SearchKind::kRandom, .fraction = 0.1}, space));
  EXPECT_EQ(search->budget(), 10);
}

TEST(SearchTest, RandomStartsWithTheDefaultAndProposesEachVariantOnce) {
  const SearchSpaceView space{.variants = 500, .default_index = 123};
  const std::vector<int64_t> all = Proposals({.kind = SearchKind::kRandom, .seed = 7}, space, 64);
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
  const SearchSpaceView space{.variants = 10, .default_index = -1};
  const std::vector<int64_t> first = Proposals({.kind = SearchKind::kRandom, .seed = 1}, space);
  EXPECT_EQ(Proposals({.kind = SearchKind::kRandom, .seed = 1}, space, 3), first);
  EXPECT_NE(Proposals({.kind = SearchKind::kRandom, .seed = 2}, space), first);
  // SplitMix64 and the rejection sampling fix this order; a change of either
  // (or a std:: distribution, which differs between libraries) shows here.
  EXPECT_THAT(first, ElementsAre(4, 2, 8, 1, 9, 3, 0, 6, 7, 5));
}

TEST(SearchTest, BadOptionsAndSpacesAreRefusedNamingWhatIsWrong) {
  const SearchSpaceView space{.variants = 10, .default_index = -1};
  EXPECT_THAT(
      MakeSearch({.max_variants = -1}, space),
      StatusIs(absl::StatusCode::kInvalidArgument, "the budget of -1 variants is negative"));
  EXPECT_THAT(
      MakeSearch({.fraction = 1.5}, space),
      StatusIs(absl::StatusCode::kInvalidArgument, "the budget's fraction 1.5 is not in [0, 1]"));
  EXPECT_THAT(MakeSearch({}, {.variants = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "the search space has no variants"));
  EXPECT_THAT(MakeSearch({}, {.variants = 10, .default_index = 10}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the default config's index 10 is not in the space of 10 variants"));
  EXPECT_THAT(ParseSearchKind("genetic"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown search 'genetic' (exhaustive or random)"));
  ASSERT_OK_AND_ASSIGN(SearchKind kind, ParseSearchKind("random"));
  EXPECT_EQ(kind, SearchKind::kRandom);
}

}  // namespace
}  // namespace autotune::service
