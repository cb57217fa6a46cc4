// PREDICTED answers: for a problem nothing was tuned for, the config a model
// of the family predicts fastest, among the configs that won the problems
// tuned on the same device.
//
// One model per scope (family version x dtype x device name), learned from
// the screens stored for the scope's entries: every validated variant's
// median, with its problem's features (the log2 of each dim, the dtype's
// bytes) and its own (its param values, its launch features for the
// device's SMs), as service/jobs/config_predictor.h fits them. A new
// problem's candidates are the scope's entries: each entry's config resolved
// for the new problem (those that do not fit it are left out), ranked by the
// model's predicted median; the fastest is the answer. Ranking the tuned
// winners of other problems, not the whole space, keeps an answer to a few
// hundred microseconds, and on the stored screens of bench/testdata/search
// it chose configs as fast as ranking everything (bench/RESULTS.md).
//
// A model is learned in the background, never inside a lookup: the first
// lookup of a scope (and the first after the store's entries changed) asks
// for one and is answered without a prediction; once learned, a model
// serves every lookup of its scope while the store's entry generation it
// was learned at holds. A scope with fewer than `min_problems` tuned
// problems gets no model. Thread-safe.
#ifndef AUTOTUNE_SERVICE_LOOKUP_PREDICTIONS_H_
#define AUTOTUNE_SERVICE_LOOKUP_PREDICTIONS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cache/store.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "service/jobs/config_predictor.h"

namespace autotune::service {

struct FamilyView;

// Tuned problems a scope needs before it is predicted from.
inline constexpr int64_t kMinPredictionProblems = 3;

// What a prediction says.
struct Predicted {
  v1::Entry entry;           // the tuned entry whose config is predicted fastest
  kernels::Variant variant;  // that config resolved for the requested problem
  double predicted_us = 0;
  int64_t problems = 0;      // tuned problems the model learned from
  int64_t measurements = 0;  // their measured variants it learned from
  int64_t ranked = 0;        // entries whose configs fit the problem and were ranked
};

// A prediction, or why there is none (for the answer's miss_reason).
struct PredictionAnswer {
  std::optional<Predicted> predicted;
  std::string why_not;  // "a model of ... is being learned", "2 tuned problems, 3 needed", ...
};

class Predictions {
 public:
  // `store` outlives this. The learning thread starts with the first model
  // asked for.
  explicit Predictions(const cache::Store* store, int64_t min_problems = kMinPredictionProblems);
  ~Predictions();  // stops learning; waits for the model being learned
  Predictions(const Predictions&) = delete;
  Predictions& operator=(const Predictions&) = delete;

  // The prediction for `problem` of `family` (version family->content_hash)
  // on `device`, from `entries`: the scope's entries as the store held them
  // at entry generation `generation` (Store::ListCandidates; entries of
  // other dtypes or devices are ignored). `sm_count` is the device's, for
  // the launch (0: the entries' device's). When the scope has no model for
  // `generation` yet, asks for one and answers without a prediction.
  PredictionAnswer Predict(const std::shared_ptr<const FamilyView>& family,
                           const v1::Problem& problem, const std::string& device, int32_t sm_count,
                           const std::shared_ptr<const std::vector<v1::Entry>>& entries,
                           int64_t generation);

  // Returns once no model is waiting to be learned or being learned.
  void WaitUntilIdle();

  int64_t min_problems() const { return min_problems_; }

 private:
  struct Model;
  struct Request {
    std::string scope;
    std::shared_ptr<const FamilyView> family;
    v1::DType dtype;
    std::string device;
    std::shared_ptr<const std::vector<v1::Entry>> entries;
    int64_t generation;
  };

  void Learn();  // the learning thread
  std::shared_ptr<Model> LearnOne(const Request& request) const;

  const cache::Store* store_;
  const int64_t min_problems_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Model>> models_ ABSL_GUARDED_BY(mu_);  // by scope
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> asked_ ABSL_GUARDED_BY(mu_);  // scope -> generation queued
  bool learning_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started under mu_, joined by the destructor
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_LOOKUP_PREDICTIONS_H_
