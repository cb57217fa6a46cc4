// Which configs of a family run fastest on a problem no one has measured,
// predicted from what other problems of the family measured: one cost model
// (cost_model.h) over every measured variant of every problem, its inputs a
// problem's features (ProblemFeatures: the log2 of each dim, the bytes of
// its dtype) followed by a variant's (its param values, then its launch
// features, search.h's LaunchFeatures), its label the log of the median.
// A new problem's variants are then ranked by their predicted medians.
//
//   ConfigPredictor::Training training(problem_columns, variant_columns);
//   training.Add(ProblemFeatures(dims, dtype_bytes), variant_features, median_us);
//   std::optional<ConfigPredictor> predictor = ConfigPredictor::Fit(training, seed);
//   std::optional<std::vector<double>> us = predictor->Predict(problem, variants);
//
// Deterministic for one training set and seed (CostModel). A problem's dims
// must be given in one order for every problem of a family (by name).
#ifndef AUTOTUNE_SERVICE_JOBS_CONFIG_PREDICTOR_H_
#define AUTOTUNE_SERVICE_JOBS_CONFIG_PREDICTOR_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "service/jobs/cost_model.h"

namespace autotune::service {

// A problem's features: the log2 of each dim value (values below 1 count as
// 1), then the bytes of its dtype.
std::vector<float> ProblemFeatures(const std::vector<int64_t>& dims, int64_t dtype_bytes);

class ConfigPredictor {
 public:
  // What the predictor learns from: measured variants of several problems.
  class Training {
   public:
    Training(int64_t problem_columns, int64_t variant_columns)
        : problem_columns_(problem_columns), variant_columns_(variant_columns) {}

    // One variant that validated and was timed at `median_us` (> 0); false
    // (nothing added) when a width does not match or the median is not
    // positive.
    bool Add(absl::Span<const float> problem, absl::Span<const float> variant, double median_us);
    int64_t size() const { return static_cast<int64_t>(labels_.size()); }

   private:
    friend class ConfigPredictor;
    int64_t problem_columns_;
    int64_t variant_columns_;
    std::vector<float> rows_;
    std::vector<float> labels_;
  };

  // nullopt when there is nothing to learn from or XGBoost fails.
  static std::optional<ConfigPredictor> Fit(const Training& training, uint64_t seed);

  // The predicted median (µs) of each variant of `variants` (n x the
  // variant columns, row-major) for `problem`; nullopt when a width does
  // not match or XGBoost fails.
  std::optional<std::vector<double>> Predict(const std::vector<float>& problem,
                                             const std::vector<float>& variants) const;

 private:
  ConfigPredictor(CostModel model, int64_t problem_columns, int64_t variant_columns)
      : model_(std::move(model)),
        problem_columns_(problem_columns),
        variant_columns_(variant_columns) {}

  CostModel model_;
  int64_t problem_columns_;
  int64_t variant_columns_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_CONFIG_PREDICTOR_H_
