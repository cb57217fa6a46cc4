#include "service/jobs/search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "service/jobs/model_search.h"
#include "service/jobs/search_random.h"

namespace autotune::service {
namespace {

// Proposes a fixed order, up to the budget, without waiting for results.
class OrderedSearch final : public Search {
 public:
  OrderedSearch(std::vector<int64_t> order, int64_t budget)
      : order_(std::move(order)), budget_(budget) {}

  std::vector<int64_t> Next(int64_t max) override {
    const int64_t end = std::min(budget_, next_ + std::max<int64_t>(max, 0));
    std::vector<int64_t> batch(order_.begin() + next_, order_.begin() + end);
    next_ = end;
    return batch;
  }
  void Record(int64_t, const SearchResult&) override {}
  std::vector<int64_t> Ahead(int64_t max) const override {
    const int64_t end = std::min(budget_, next_ + std::max<int64_t>(max, 0));
    return std::vector<int64_t>(order_.begin() + next_, order_.begin() + end);
  }
  int64_t budget() const override { return budget_; }

 private:
  std::vector<int64_t> order_;  // at least budget_ long
  int64_t budget_;
  int64_t next_ = 0;
};

}  // namespace

int64_t SearchBudget(const SearchOptions& options, int64_t variants) {
  int64_t budget = variants;
  if (options.max_variants > 0) budget = std::min(budget, options.max_variants);
  if (options.fraction > 0) {
    const auto share =
        static_cast<int64_t>(std::ceil(options.fraction * static_cast<double>(variants)));
    budget = std::min(budget, std::max<int64_t>(share, 1));
  }
  return budget;
}

absl::StatusOr<SearchKind> ParseSearchKind(absl::string_view name) {
  for (SearchKind kind : {SearchKind::kExhaustive, SearchKind::kRandom, SearchKind::kModel}) {
    if (name == SearchKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown search '", name, "' (exhaustive, random or model)"));
}

const char* SearchKindName(SearchKind kind) {
  switch (kind) {
    case SearchKind::kExhaustive:
      return "exhaustive";
    case SearchKind::kRandom:
      return "random";
    case SearchKind::kModel:
      return "model";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Search>> MakeSearch(const SearchOptions& options,
                                                   const SearchSpaceView& space) {
  if (space.variants <= 0) {
    return absl::InvalidArgumentError("the search space has no variants");
  }
  if (space.default_index < -1 || space.default_index >= space.variants) {
    return absl::InvalidArgumentError(absl::StrCat("the default config's index ",
                                                   space.default_index, " is not in the space of ",
                                                   space.variants, " variants"));
  }
  if (options.max_variants < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the budget of ", options.max_variants, " variants is negative"));
  }
  if (!(options.fraction >= 0 && options.fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the budget's fraction ", options.fraction, " is not in [0, 1]"));
  }
  for (int64_t hint : space.hints) {
    if (hint < 0 || hint >= space.variants) {
      return absl::InvalidArgumentError(
          absl::StrCat("the hint ", hint, " is not in the space of ", space.variants, " variants"));
    }
  }
  const int64_t budget = SearchBudget(options, space.variants);
  if (options.kind == SearchKind::kModel) {
    if (space.feature_count <= 0 ||
        static_cast<int64_t>(space.features.size()) != space.variants * space.feature_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model search needs each variant's parameter values: ", space.features.size(),
          " features for ", space.variants, " variants of ", space.feature_count));
    }
    return MakeModelSearch(options, space, budget);
  }
  std::vector<int64_t> order(static_cast<size_t>(space.variants));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options.kind == SearchKind::kRandom) {
    // The default config first (the baseline every report compares with),
    // then a Fisher-Yates shuffle of the rest.
    size_t first = 0;
    if (space.default_index >= 0) {
      std::swap(order[0], order[static_cast<size_t>(space.default_index)]);
      first = 1;
    }
    SplitMix64 random(options.seed);
    for (size_t i = order.size(); i > first + 1; --i) {
      const size_t j = first + static_cast<size_t>(random.Below(i - first));
      std::swap(order[i - 1], order[j]);
    }
  }
  return std::make_unique<OrderedSearch>(std::move(order), budget);
}

}  // namespace autotune::service
