#include "service/jobs/cost_model.h"

#include <xgboost/c_api.h>

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace autotune::service {

CostModel::CostModel(CostModel&& other) noexcept
    : booster_(std::exchange(other.booster_, nullptr)) {}

CostModel::~CostModel() {
  if (booster_ != nullptr) XGBoosterFree(booster_);
}

std::optional<CostModel> CostModel::Fit(const std::vector<float>& rows,
                                        const std::vector<float>& labels, int64_t columns,
                                        uint64_t seed, int trees, int depth) {
  if (columns <= 0 || labels.empty() ||
      rows.size() != labels.size() * static_cast<size_t>(columns)) {
    return std::nullopt;
  }
  DMatrixHandle train = nullptr;
  if (XGDMatrixCreateFromMat(rows.data(), labels.size(), static_cast<bst_ulong>(columns),
                             std::numeric_limits<float>::quiet_NaN(), &train) != 0) {
    return std::nullopt;
  }
  CostModel model;
  bool ok = XGDMatrixSetFloatInfo(train, "label", labels.data(), labels.size()) == 0 &&
            XGBoosterCreate(&train, 1, &model.booster_) == 0;
  const std::string seed_text = absl::StrCat(seed % 2147483647u);
  const std::string depth_text = absl::StrCat(depth);
  const std::pair<const char*, const char*> params[] = {
      {"objective", "reg:squarederror"},
      {"tree_method", "exact"},  // deterministic, and exact on small data
      {"nthread", "1"},
      {"max_depth", depth_text.c_str()},
      {"eta", "0.3"},
      {"min_child_weight", "1"},
      {"verbosity", "0"},
      {"seed", seed_text.c_str()},
  };
  for (const auto& [name, value] : params) {
    ok = ok && XGBoosterSetParam(model.booster_, name, value) == 0;
  }
  for (int i = 0; ok && i < trees; ++i) {
    ok = XGBoosterUpdateOneIter(model.booster_, i, train) == 0;
  }
  XGDMatrixFree(train);
  if (!ok) return std::nullopt;
  return model;
}

std::optional<std::vector<float>> CostModel::Predict(const std::vector<float>& rows,
                                                     int64_t columns) const {
  if (columns <= 0 || rows.size() % static_cast<size_t>(columns) != 0) return std::nullopt;
  const bst_ulong n = rows.size() / static_cast<size_t>(columns);
  DMatrixHandle data = nullptr;
  if (XGDMatrixCreateFromMat(rows.data(), n, static_cast<bst_ulong>(columns),
                             std::numeric_limits<float>::quiet_NaN(), &data) != 0) {
    return std::nullopt;
  }
  bst_ulong length = 0;
  const float* out = nullptr;
  const bool ok = XGBoosterPredict(booster_, data, 0, 0, 0, &length, &out) == 0 && length == n;
  std::optional<std::vector<float>> predictions;
  if (ok) predictions.emplace(out, out + length);
  XGDMatrixFree(data);
  return predictions;
}

}  // namespace autotune::service
