#include "service/jobs/model_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/jobs/cost_model.h"
#include "service/jobs/search_random.h"

namespace autotune::service {
namespace {

// A failed variant's label: this many times the slowest valid median.
constexpr double kFailurePenalty = 2;
// The search stops after this many model rounds in a row that did not
// improve the best by at least kImprovement (relative)...
constexpr int kPatience = 3;
constexpr double kImprovement = 1e-3;
// ...and a coverage round that did not either: before it stops, a search
// measures, for each value of each parameter, the unseen variant with that
// value the model ranks fastest (a region the model has seen too little of
// gets one more look). At most this many per search: a coverage round that
// improves the best starts the count of rounds without gain again.
constexpr int kCoverageRounds = 2;

class ModelSearch final : public Search {
 public:
  ModelSearch(const SearchOptions& options, const SearchSpaceView& space, int64_t budget)
      : space_(space),
        columns_(space.feature_count),
        budget_(budget),
        seed_(options.seed),
        random_(options.seed),
        state_(static_cast<size_t>(space.variants), State::kUnseen),
        median_(static_cast<size_t>(space.variants), 0) {
    // Each parameter's distinct values, and every variant by its values:
    // what finding a neighbour needs.
    values_.resize(static_cast<size_t>(columns_));
    for (int64_t i = 0; i < space_.variants; ++i) {
      for (int64_t c = 0; c < columns_; ++c) values_[c].insert(Feature(i, c));
      by_key_.emplace(Key(Row(i)), i);
    }
  }

  std::vector<int64_t> Next(int64_t max) override {
    std::vector<int64_t> batch;
    if (stopped_ || pending_ > 0 || max <= 0 || proposed_ >= budget_) return batch;
    const int64_t room = std::min(max, budget_ - proposed_);
    if (rounds_ == 0) {
      // The baseline and the winners of the nearest problems, then a
      // sample that shows the model the whole space.
      Take(space_.default_index, room, &batch);
      for (int64_t hint : space_.hints) Take(hint, room, &batch);
      const int64_t initial = std::min(room, InitialSize());
      TakeRandom(initial - static_cast<int64_t>(batch.size()), &batch);
    } else if (coverage_next_) {
      coverage_next_ = false;
      coverage_round_ = true;
      Coverage(std::min(room, RoundSize()), &batch);
    } else {
      FromModel(std::min(room, RoundSize()), &batch);
    }
    ++rounds_;
    pending_ = static_cast<int64_t>(batch.size());
    proposed_ += pending_;
    best_before_round_ = best_;
    return batch;
  }

  void Record(int64_t index, const SearchResult& result) override {
    if (index < 0 || index >= space_.variants || state_[index] != State::kProposed) return;
    state_[index] = result.valid ? State::kValid : State::kFailed;
    if (result.valid) {
      median_[index] = result.median_us;
      best_ = std::min(best_, result.median_us);
      slowest_ = std::max(slowest_, result.median_us);
    }
    measured_.push_back(index);
    if (--pending_ > 0) return;
    // A round ended: did it improve the best? The first round sets it.
    if (rounds_ > 1) {
      const bool improved = best_ < best_before_round_ * (1 - kImprovement);
      if (coverage_round_) {
        coverage_round_ = false;
        if (!improved) stopped_ = true;
        no_gain_ = 0;
        return;
      }
      no_gain_ = improved ? 0 : no_gain_ + 1;
      if (no_gain_ >= kPatience) {
        if (coverages_ < kCoverageRounds) {
          ++coverages_;
          coverage_next_ = true;
        } else {
          stopped_ = true;
        }
      }
    }
  }

  // While a round is measured: the guided part of the next round as the
  // model fitted to the rounds before it ranks the space (its random part
  // cannot be guessed), then more of the model's ranking up to `max`.
  std::vector<int64_t> Ahead(int64_t max) const override {
    if (stopped_ || max <= 0 || proposed_ >= budget_) return {};
    std::optional<std::vector<int64_t>> guided = Guided(RoundSize() / 4, max);
    return guided ? *std::move(guided) : std::vector<int64_t>();
  }

  int64_t budget() const override { return budget_; }

 private:
  enum class State : uint8_t { kUnseen, kProposed, kValid, kFailed };

  // A fifth of the budget first, then rounds of a tenth (at most 128 and
  // 64: a large budget is spent in more rounds, so that the search can stop
  // early): batches big enough to keep the compilers and the GPU busy.
  int64_t InitialSize() const { return std::clamp<int64_t>(budget_ / 5, 16, 128); }
  int64_t RoundSize() const { return std::clamp<int64_t>(budget_ / 10, 8, 64); }

  float Feature(int64_t variant, int64_t column) const {
    return space_.features[static_cast<size_t>(variant * columns_ + column)];
  }
  std::vector<float> Row(int64_t variant) const {
    const auto begin = space_.features.begin() + variant * columns_;
    return std::vector<float>(begin, begin + columns_);
  }
  // What the model sees of a variant: its parameters, then its derived features.
  std::vector<float> ModelRow(int64_t variant) const {
    std::vector<float> row = Row(variant);
    const int64_t derived = space_.derived_count;
    const auto begin = space_.derived.begin() + variant * derived;
    row.insert(row.end(), begin, begin + derived);
    return row;
  }
  static std::string Key(const std::vector<float>& row) {
    std::string key(row.size() * sizeof(float), '\0');
    std::memcpy(key.data(), row.data(), key.size());
    return key;
  }

  void Take(int64_t index, int64_t room, std::vector<int64_t>* batch) {
    if (index < 0 || index >= space_.variants || static_cast<int64_t>(batch->size()) >= room ||
        state_[index] != State::kUnseen) {
      return;
    }
    state_[index] = State::kProposed;
    batch->push_back(index);
  }

  // `n` variants not proposed before, uniformly at random.
  void TakeRandom(int64_t n, std::vector<int64_t>* batch) {
    std::vector<int64_t> unseen = Unseen();
    for (int64_t k = 0; k < n && !unseen.empty(); ++k) {
      const size_t j = static_cast<size_t>(random_.Below(unseen.size()));
      std::swap(unseen[j], unseen.back());
      state_[unseen.back()] = State::kProposed;
      batch->push_back(unseen.back());
      unseen.pop_back();
    }
  }

  std::vector<int64_t> Unseen() const {
    std::vector<int64_t> unseen;
    for (int64_t i = 0; i < space_.variants; ++i) {
      if (state_[i] == State::kUnseen) unseen.push_back(i);
    }
    return unseen;
  }

  // The variants one parameter one value away from `variant`.
  std::vector<int64_t> Neighbours(int64_t variant) const {
    std::vector<int64_t> found;
    std::vector<float> row = Row(variant);
    for (int64_t c = 0; c < columns_; ++c) {
      const std::set<float>& values = values_[c];
      const float own = row[c];
      auto it = values.find(own);
      std::vector<float> adjacent;
      if (it != values.begin()) adjacent.push_back(*std::prev(it));
      if (std::next(it) != values.end()) adjacent.push_back(*std::next(it));
      for (float value : adjacent) {
        row[c] = value;
        auto hit = by_key_.find(Key(row));
        if (hit != by_key_.end()) found.push_back(hit->second);
      }
      row[c] = own;
    }
    return found;
  }

  // A round: the untried neighbours of the best measured and the model's
  // fastest predictions (Guided), and a few at random.
  void FromModel(int64_t size, std::vector<int64_t>* batch) {
    const int64_t explore = std::max<int64_t>(1, size / 8);
    std::optional<std::vector<int64_t>> guided = Guided(size / 4, size - explore);
    if (!guided) {  // nothing valid to learn from yet, or XGBoost failed
      TakeRandom(size, batch);
      return;
    }
    for (int64_t i : *guided) Take(i, size, batch);
    TakeRandom(size - static_cast<int64_t>(batch->size()), batch);
  }

  // A coverage round, a coordinate move from the best measured: for each
  // parameter and each of its other values, the unseen variant with that
  // value nearest the best (fewest other parameters changed: a constraint
  // may tie two parameters), the model's fastest prediction among equals;
  // up to `size` of them, the nearest first. So a search stuck where single
  // steps lead nowhere (another instruction path needs another warp layout,
  // say) measures the best's counterpart on every other path once.
  void Coverage(int64_t size, std::vector<int64_t>* batch) {
    int64_t base = -1;
    for (int64_t i : measured_) {
      if (state_[i] == State::kValid && (base < 0 || median_[i] < median_[base])) base = i;
    }
    std::vector<int64_t> unseen = Unseen();
    std::optional<std::vector<float>> predicted = Predicted(unseen);
    if (base < 0 || !predicted) {
      TakeRandom(size, batch);
      return;
    }
    const std::vector<float> from = Row(base);
    // (column, value) -> (parameters changed, prediction, variant), the least.
    using Pick = std::tuple<int64_t, float, int64_t>;
    std::map<std::pair<int64_t, float>, Pick> best;
    for (size_t k = 0; k < unseen.size(); ++k) {
      const std::vector<float> row = Row(unseen[k]);
      int64_t changed = 0;
      for (int64_t c = 0; c < columns_; ++c) changed += row[c] != from[c] ? 1 : 0;
      const Pick pick = {changed, (*predicted)[k], unseen[k]};
      for (int64_t c = 0; c < columns_; ++c) {
        if (row[c] == from[c]) continue;
        auto [it, inserted] = best.emplace(std::make_pair(c, row[c]), pick);
        if (!inserted && pick < it->second) it->second = pick;
      }
    }
    std::vector<Pick> picks;
    for (const auto& [key, pick] : best) picks.push_back(pick);
    std::sort(picks.begin(), picks.end());
    for (const Pick& pick : picks) Take(std::get<2>(pick), size, batch);
  }

  // Up to `size` unseen variants, no one twice: first up to `polish`
  // untried neighbours of the three best measured, the model's best first,
  // then the model's fastest predictions. nullopt without a model (nothing
  // valid to learn from yet, or XGBoost failed).
  std::optional<std::vector<int64_t>> Guided(int64_t polish, int64_t size) const {
    std::vector<int64_t> unseen = Unseen();
    std::optional<std::vector<float>> predicted = Predicted(unseen);
    if (!predicted) return std::nullopt;
    std::map<int64_t, float> prediction;
    for (size_t k = 0; k < unseen.size(); ++k) prediction[unseen[k]] = (*predicted)[k];
    const auto by_prediction = [&](int64_t a, int64_t b) {
      return prediction[a] != prediction[b] ? prediction[a] < prediction[b] : a < b;
    };
    // Neighbours of the three best, the model's best first.
    std::vector<int64_t> valid;
    for (int64_t i : measured_) {
      if (state_[i] == State::kValid) valid.push_back(i);
    }
    std::sort(valid.begin(), valid.end(), [&](int64_t a, int64_t b) {
      return median_[a] != median_[b] ? median_[a] < median_[b] : a < b;
    });
    std::vector<int64_t> near;
    for (size_t k = 0; k < std::min<size_t>(3, valid.size()); ++k) {
      for (int64_t n : Neighbours(valid[k])) {
        if (state_[n] == State::kUnseen) near.push_back(n);
      }
    }
    std::sort(near.begin(), near.end(), by_prediction);
    near.erase(std::unique(near.begin(), near.end()), near.end());
    std::vector<int64_t> chosen;
    std::set<int64_t> taken;
    const auto take = [&](int64_t i, int64_t room) {
      if (static_cast<int64_t>(chosen.size()) < room && taken.insert(i).second) {
        chosen.push_back(i);
      }
    };
    polish = std::min(polish, size);
    for (size_t k = 0; k < near.size() && static_cast<int64_t>(chosen.size()) < polish; ++k) {
      take(near[k], polish);
    }
    std::sort(unseen.begin(), unseen.end(), by_prediction);
    for (size_t k = 0; k < unseen.size() && static_cast<int64_t>(chosen.size()) < size; ++k) {
      take(unseen[k], size);
    }
    return chosen;
  }

  // The model's log-median for each of `variants`; nullopt without a valid
  // measurement to learn from, or when XGBoost fails.
  std::optional<std::vector<float>> Predicted(const std::vector<int64_t>& variants) const {
    if (!(slowest_ > 0) || variants.empty()) return std::nullopt;
    std::vector<float> rows;
    std::vector<float> labels;
    const double failed = std::log(slowest_ * kFailurePenalty);
    for (int64_t i : measured_) {
      const std::vector<float> row = ModelRow(i);
      rows.insert(rows.end(), row.begin(), row.end());
      labels.push_back(
          static_cast<float>(state_[i] == State::kValid ? std::log(median_[i]) : failed));
    }
    const int64_t model_columns = columns_ + space_.derived_count;
    std::optional<CostModel> model = CostModel::Fit(rows, labels, model_columns, seed_);
    if (!model) return std::nullopt;
    rows.clear();
    for (int64_t i : variants) {
      const std::vector<float> row = ModelRow(i);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return model->Predict(rows, model_columns);
  }

  const SearchSpaceView space_;
  const int64_t columns_;
  const int64_t budget_;
  const uint64_t seed_;
  SplitMix64 random_;
  std::vector<State> state_;
  std::vector<double> median_;
  std::vector<std::set<float>> values_;
  std::map<std::string, int64_t> by_key_;
  std::vector<int64_t> measured_;  // in the order recorded
  int64_t proposed_ = 0;
  int64_t pending_ = 0;  // proposed, not yet recorded
  int rounds_ = 0;
  int no_gain_ = 0;
  int coverages_ = 0;            // coverage rounds proposed
  bool coverage_next_ = false;   // the next round is one
  bool coverage_round_ = false;  // the round being measured is one
  bool stopped_ = false;
  double best_ = std::numeric_limits<double>::infinity();
  double best_before_round_ = std::numeric_limits<double>::infinity();
  double slowest_ = 0;
};

}  // namespace

std::unique_ptr<Search> MakeModelSearch(const SearchOptions& options, const SearchSpaceView& space,
                                        int64_t budget) {
  return std::make_unique<ModelSearch>(options, space, budget);
}

}  // namespace autotune::service
