#include "service/lookup/predictions.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/problem.h"
#include "service/jobs/search.h"
#include "service/lookup/lookup_resolver.h"

namespace autotune::service {
namespace {

// The model's seed: one training set gives one model.
constexpr uint64_t kSeed = 1;

std::string ScopeKey(const FamilyView& family, v1::DType dtype, const std::string& device) {
  return absl::StrCat(family.family.name(), "/", family.content_hash, "/", v1::DType_Name(dtype),
                      "/", device);
}

// A problem's dims in the family's order, then ProblemFeatures.
std::vector<float> FeaturesOf(const v1::KernelFamily& family, const v1::Problem& problem) {
  std::vector<int64_t> dims;
  for (const v1::ProblemDimension& dim : family.dims()) {
    auto it = problem.dims().find(dim.name());
    dims.push_back(it == problem.dims().end() ? 0 : it->second);
  }
  return ProblemFeatures(dims, DTypeBytes(problem.dtype()));
}

// A variant's param values in the family's order, then its launch's
// features on `sms` SMs; nullopt when the config lacks a param.
std::optional<std::vector<float>> VariantFeatures(const v1::KernelFamily& family,
                                                  const v1::Config& config,
                                                  const v1::LaunchDims& launch, int64_t sms) {
  std::vector<float> features;
  for (const v1::TunableParameter& param : family.params()) {
    auto it = config.params().find(param.name());
    if (it == config.params().end()) return std::nullopt;
    features.push_back(static_cast<float>(it->second));
  }
  int64_t blocks = 1, threads = 1;
  for (int64_t extent : launch.grid()) blocks *= extent;
  for (int64_t extent : launch.block()) threads *= extent;
  const std::vector<float> derived =
      LaunchFeatures(blocks, threads, launch.dynamic_shared_bytes(), sms);
  features.insert(features.end(), derived.begin(), derived.end());
  return features;
}

kernels::DeviceLimits TargetOf(const v1::Entry& entry, int64_t sm_count) {
  kernels::DeviceLimits target;
  if (!entry.arch().empty()) target.arch = entry.arch();
  target.sm_count = static_cast<int32_t>(sm_count);
  return target;
}

}  // namespace

struct Predictions::Model {
  int64_t generation = -1;
  std::optional<ConfigPredictor> predictor;  // nullopt: see why_not
  std::string why_not;
  int64_t problems = 0;
  int64_t measurements = 0;
  int64_t sm_count = 0;    // of the device the entries were tuned on
  absl::Mutex predict_mu;  // one prediction at a time through the booster
};

Predictions::Predictions(const cache::Store* store, int64_t min_problems)
    : store_(store), min_problems_(std::max<int64_t>(1, min_problems)) {}

Predictions::~Predictions() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

PredictionAnswer Predictions::Predict(const std::shared_ptr<const FamilyView>& family,
                                      const v1::Problem& problem, const std::string& device,
                                      int32_t sm_count,
                                      const std::shared_ptr<const std::vector<v1::Entry>>& entries,
                                      int64_t generation) {
  PredictionAnswer answer;
  const std::string scope = ScopeKey(*family, problem.dtype(), device);
  std::shared_ptr<Model> model;
  {
    absl::MutexLock lock(&mu_);
    auto found = models_.find(scope);
    if (found != models_.end() && found->second->generation == generation) {
      model = found->second;
    } else {
      // Asked for once per scope and generation; a commit in flight (an odd
      // generation) is not learned from.
      auto asked = asked_.find(scope);
      if (generation % 2 == 0 && (asked == asked_.end() || asked->second != generation) &&
          !stopping_) {
        asked_[scope] = generation;
        queue_.push_back({scope, family, problem.dtype(), device, entries, generation});
        if (!thread_.joinable()) thread_ = std::thread([this] { Learn(); });
      }
      answer.why_not = absl::StrCat("a model of ", family->family.name(), " on ", device,
                                    " is being learned from the problems tuned there; ask again");
      return answer;
    }
  }
  if (!model->predictor.has_value()) {
    answer.why_not = model->why_not;
    return answer;
  }
  const v1::KernelFamily& definition = family->family;
  const std::vector<float> problem_features = FeaturesOf(definition, problem);
  const int64_t sms = sm_count > 0 ? sm_count : model->sm_count;
  std::vector<const v1::Entry*> ranked;
  std::vector<kernels::Variant> variants;
  std::vector<float> rows;
  std::set<std::string> seen;  // configs ranked once
  for (const v1::Entry& entry : *entries) {
    if (entry.device().name() != device || entry.problem().dtype() != problem.dtype()) continue;
    const std::string config = entry.config().ShortDebugString();
    if (!seen.insert(config).second) continue;
    absl::StatusOr<kernels::Variant> fitted =
        family->resolvers.Resolve(problem, entry.config(), TargetOf(entry, sms));
    if (!fitted.ok()) continue;  // the config does not fit this problem
    std::optional<std::vector<float>> features =
        VariantFeatures(definition, entry.config(), fitted->launch, sms);
    if (!features.has_value()) continue;
    rows.insert(rows.end(), features->begin(), features->end());
    ranked.push_back(&entry);
    variants.push_back(*std::move(fitted));
  }
  if (ranked.empty()) {
    answer.why_not = absl::StrCat("no config tuned on ", device, " fits the problem");
    return answer;
  }
  std::optional<std::vector<double>> us;
  {
    absl::MutexLock lock(&model->predict_mu);
    us = model->predictor->Predict(problem_features, rows);
  }
  if (!us.has_value() || us->size() != ranked.size()) {
    answer.why_not = "the model could not rank the tuned configs";
    return answer;
  }
  const size_t best = static_cast<size_t>(std::min_element(us->begin(), us->end()) - us->begin());
  Predicted predicted;
  predicted.entry = *ranked[best];
  predicted.variant = std::move(variants[best]);
  predicted.predicted_us = (*us)[best];
  predicted.problems = model->problems;
  predicted.measurements = model->measurements;
  predicted.ranked = static_cast<int64_t>(ranked.size());
  answer.predicted = std::move(predicted);
  return answer;
}

void Predictions::WaitUntilIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !learning_; };
  mu_.Await(absl::Condition(&idle));
}

void Predictions::Learn() {
  while (true) {
    Request request;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) {
        queue_.clear();
        return;
      }
      request = std::move(queue_.front());
      queue_.pop_front();
      learning_ = true;
    }
    std::shared_ptr<Model> model = LearnOne(request);
    absl::MutexLock lock(&mu_);
    learning_ = false;
    auto& kept = models_[request.scope];
    if (kept == nullptr || kept->generation <= model->generation) kept = std::move(model);
  }
}

std::shared_ptr<Predictions::Model> Predictions::LearnOne(const Request& request) const {
  auto model = std::make_shared<Model>();
  model->generation = request.generation;
  const FamilyView& family = *request.family;
  const v1::KernelFamily& definition = family.family;
  std::vector<const v1::Entry*> tuned;
  for (const v1::Entry& entry : *request.entries) {
    if (entry.device().name() == request.device && entry.problem().dtype() == request.dtype) {
      tuned.push_back(&entry);
    }
  }
  if (static_cast<int64_t>(tuned.size()) < min_problems_) {
    model->why_not = absl::StrCat(tuned.size(), " problems of ", definition.name(), " tuned on ",
                                  request.device, ", ", min_problems_, " needed to predict from");
    return model;
  }
  model->sm_count = tuned.front()->device().sm_count();
  const int64_t problem_columns = definition.dims_size() + 1;
  const int64_t variant_columns = definition.params_size() + kLaunchFeatures;
  ConfigPredictor::Training training(problem_columns, variant_columns);
  for (const v1::Entry* entry : tuned) {
    absl::StatusOr<std::vector<v1::Measurement>> measurements = store_->ListMeasurements(
        cache::EntryKey{definition.name(), family.content_hash, entry->problem(), request.device});
    if (!measurements.ok()) {
      model->why_not = absl::StrCat("the measurements of ", definition.name(),
                                    " could not be read: ", measurements.status().message());
      return model;
    }
    const std::vector<float> problem_features = FeaturesOf(definition, entry->problem());
    const int64_t sms = entry->device().sm_count();
    int64_t added = 0;
    for (const v1::Measurement& measurement : *measurements) {
      if (measurement.status() != v1::OK || measurement.phase() != v1::SCREEN ||
          !(measurement.timing().median_us() > 0)) {
        continue;
      }
      absl::StatusOr<kernels::Variant> variant =
          family.resolvers.Resolve(entry->problem(), measurement.config(), TargetOf(*entry, sms));
      if (!variant.ok()) continue;
      std::optional<std::vector<float>> features =
          VariantFeatures(definition, measurement.config(), variant->launch, sms);
      if (features.has_value() &&
          training.Add(problem_features, *features, measurement.timing().median_us())) {
        ++added;
      }
    }
    model->measurements += added;
    if (added > 0) ++model->problems;
  }
  if (model->problems < min_problems_) {
    model->why_not =
        absl::StrCat(model->problems, " problems of ", definition.name(), " on ", request.device,
                     " have screens stored, ", min_problems_, " needed to predict from");
    return model;
  }
  if (std::optional<ConfigPredictor> fitted = ConfigPredictor::Fit(training, kSeed)) {
    model->predictor.emplace(*std::move(fitted));
  } else {
    model->why_not = absl::StrCat("the model of ", definition.name(), " on ", request.device,
                                  " could not be fitted");
  }
  return model;
}

}  // namespace autotune::service
