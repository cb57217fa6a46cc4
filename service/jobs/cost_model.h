// A cost model: gradient-boosted trees (XGBoost, its C API) regressing a
// label (the log of a median, by its users) on rows of float features. The
// model search (model_search.h) fits one per round over what a problem
// measured; the config predictor (config_predictor.h) one per family over
// what every problem measured.
//
//   std::optional<CostModel> model = CostModel::Fit(rows, labels, columns, seed);
//   std::optional<std::vector<float>> guesses = model->Predict(other_rows, columns);
//
// Trained on one thread with the exact tree method: the same rows, labels
// and seed give the same model and predictions on every run.
#ifndef AUTOTUNE_SERVICE_JOBS_COST_MODEL_H_
#define AUTOTUNE_SERVICE_JOBS_COST_MODEL_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace autotune::service {

class CostModel {
 public:
  // Boosting rounds and tree depth by default: enough for the interactions
  // of a GEMM's tile, stage and path parameters, cheap on a few hundred
  // points.
  static constexpr int kDefaultTrees = 60;
  static constexpr int kDefaultDepth = 6;

  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;
  CostModel(CostModel&& other) noexcept;
  CostModel& operator=(CostModel&& other) = delete;
  ~CostModel();

  // `rows`: labels.size() x `columns`, row-major (NaN = missing). nullopt
  // when XGBoost fails.
  static std::optional<CostModel> Fit(const std::vector<float>& rows,
                                      const std::vector<float>& labels, int64_t columns,
                                      uint64_t seed, int trees = kDefaultTrees,
                                      int depth = kDefaultDepth);

  // One prediction per row of `rows` (n x `columns`); nullopt when XGBoost
  // fails.
  std::optional<std::vector<float>> Predict(const std::vector<float>& rows, int64_t columns) const;

 private:
  CostModel() = default;
  void* booster_ = nullptr;  // BoosterHandle
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_COST_MODEL_H_
