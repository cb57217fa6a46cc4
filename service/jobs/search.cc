#include "service/jobs/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
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

int64_t SearchBudget::Variants(int64_t variants) const {
  int64_t budget = variants;
  if (count > 0) budget = std::min(budget, count);
  if (fraction > 0) {
    const auto share = static_cast<int64_t>(std::ceil(fraction * static_cast<double>(variants)));
    budget = std::min(budget, std::max<int64_t>(share, 1));
  }
  return budget;
}

bool SearchBudget::OutOfTime(double searched_s, int rounds_run) const {
  return rounds_run >= 1 && seconds > 0 && searched_s >= seconds;
}

absl::Status SearchBudget::Check(absl::string_view field, int64_t max_count,
                                 double max_seconds) const {
  // Whole numbers as integers ("1048576", not "1.04858e+06").
  auto text = [](double value) {
    return std::trunc(value) == value && std::fabs(value) < 1e15
               ? absl::StrCat(static_cast<int64_t>(value))
               : absl::StrCat(value);
  };
  // A bound this large is none: the value is only negative.
  auto bad = [&](absl::string_view name, double value, double most) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".", name, " is ", text(value),
                     most >= 1e15 ? ", not at least 0" : absl::StrCat(", not in 0..", text(most)),
                     " (0 = no limit)"));
  };
  if (count < 0 || count > max_count) {
    return bad("max_variants", static_cast<double>(count), static_cast<double>(max_count));
  }
  // Written so that NaN fails too.
  if (!(fraction >= 0 && fraction <= 1)) return bad("max_fraction", fraction, 1);
  if (!(seconds >= 0 && seconds <= max_seconds)) return bad("max_seconds", seconds, max_seconds);
  return absl::OkStatus();
}

std::vector<float> LaunchFeatures(int64_t blocks, int64_t threads, int64_t shared_bytes,
                                  int64_t sms) {
  constexpr int64_t kThreadsPerSm = 2048;
  constexpr int64_t kSharedPerSm = 228 * 1024;
  constexpr int64_t kReservedPerBlock = 1024;
  constexpr int64_t kBlocksPerSm = 32;
  int64_t resident = std::min(kBlocksPerSm, kThreadsPerSm / std::max<int64_t>(threads, 1));
  resident = std::min(resident, kSharedPerSm / (shared_bytes + kReservedPerBlock));
  resident = std::max<int64_t>(resident, 1);
  const double slots = static_cast<double>(std::max<int64_t>(sms, 1) * resident);
  const double waves = static_cast<double>(blocks) / slots;
  const double last = waves - std::floor(waves);
  return {static_cast<float>(blocks),       static_cast<float>(threads),
          static_cast<float>(shared_bytes), static_cast<float>(resident),
          static_cast<float>(waves),        static_cast<float>(last == 0 ? 1.0 : last)};
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
  RETURN_IF_ERROR(options.budget.Check("search", std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<double>::max()));
  for (int64_t hint : space.hints) {
    if (hint < 0 || hint >= space.variants) {
      return absl::InvalidArgumentError(
          absl::StrCat("the hint ", hint, " is not in the space of ", space.variants, " variants"));
    }
  }
  const int64_t budget = options.budget.Variants(space.variants);
  if (options.kind == SearchKind::kModel) {
    if (space.derived_count < 0 ||
        static_cast<int64_t>(space.derived.size()) != space.variants * space.derived_count) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model search's derived features: ", space.derived.size(), " for ",
                       space.variants, " variants of ", space.derived_count));
    }
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
