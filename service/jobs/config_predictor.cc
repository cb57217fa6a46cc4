#include "service/jobs/config_predictor.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace autotune::service {
namespace {

// Trees a family's model has: more than a search's round needs, since one
// model covers every problem and its interactions with the params.
constexpr int kTrees = 200;
constexpr int kDepth = 8;

}  // namespace

std::vector<float> ProblemFeatures(const std::vector<int64_t>& dims, int64_t dtype_bytes) {
  std::vector<float> features;
  features.reserve(dims.size() + 1);
  for (int64_t value : dims) {
    features.push_back(
        static_cast<float>(std::log2(static_cast<double>(std::max<int64_t>(value, 1)))));
  }
  features.push_back(static_cast<float>(dtype_bytes));
  return features;
}

bool ConfigPredictor::Training::Add(absl::Span<const float> problem,
                                    absl::Span<const float> variant, double median_us) {
  if (static_cast<int64_t>(problem.size()) != problem_columns_ ||
      static_cast<int64_t>(variant.size()) != variant_columns_ || !(median_us > 0) ||
      !std::isfinite(median_us)) {
    return false;
  }
  rows_.insert(rows_.end(), problem.begin(), problem.end());
  rows_.insert(rows_.end(), variant.begin(), variant.end());
  labels_.push_back(static_cast<float>(std::log(median_us)));
  return true;
}

std::optional<ConfigPredictor> ConfigPredictor::Fit(const Training& training, uint64_t seed) {
  const int64_t columns = training.problem_columns_ + training.variant_columns_;
  std::optional<CostModel> model =
      CostModel::Fit(training.rows_, training.labels_, columns, seed, kTrees, kDepth);
  if (!model) return std::nullopt;
  return ConfigPredictor(std::move(*model), training.problem_columns_, training.variant_columns_);
}

std::optional<std::vector<double>> ConfigPredictor::Predict(
    const std::vector<float>& problem, const std::vector<float>& variants) const {
  if (static_cast<int64_t>(problem.size()) != problem_columns_ || variant_columns_ <= 0 ||
      variants.size() % static_cast<size_t>(variant_columns_) != 0) {
    return std::nullopt;
  }
  const size_t n = variants.size() / static_cast<size_t>(variant_columns_);
  const int64_t columns = problem_columns_ + variant_columns_;
  std::vector<float> rows;
  rows.reserve(n * static_cast<size_t>(columns));
  for (size_t i = 0; i < n; ++i) {
    rows.insert(rows.end(), problem.begin(), problem.end());
    const auto first = variants.begin() + static_cast<std::ptrdiff_t>(i * variant_columns_);
    rows.insert(rows.end(), first, first + variant_columns_);
  }
  std::optional<std::vector<float>> logs = model_.Predict(rows, columns);
  if (!logs) return std::nullopt;
  std::vector<double> us;
  us.reserve(logs->size());
  for (float log_us : *logs) us.push_back(std::exp(static_cast<double>(log_us)));
  return us;
}

}  // namespace autotune::service
