// Which variants of one problem to measure, in what order, and when to stop:
// the search over a problem's search space (kernels/search_space.h). A job
// measures what its search proposes; the replay harness
// (bench/search_replay.cc) drives the same searches over stored screens, with
// no GPU, to say how close each gets to the exhaustive best and how fast.
//
//   SearchSpaceView view{.variants = space.variants.size(), .default_index = d};
//   ASSIGN_OR_RETURN(std::unique_ptr<Search> search, MakeSearch(options, view));
//   for (std::vector<int64_t> batch = search->Next(64); !batch.empty();
//        batch = search->Next(64)) {
//     Compile(search->Ahead(64));  // while the batch is measured
//     for (int64_t i : batch) search->Record(i, Screen(space.variants[i]));
//   }
//
// Every search proposes each variant at most once and is deterministic: the
// same options (seed included), space and recorded results give the same
// proposals on every machine (no std:: distribution, whose output the
// standard leaves to the library).
//
// Thread-safety: a Search is used by one thread at a time.
#ifndef AUTOTUNE_SERVICE_JOBS_SEARCH_H_
#define AUTOTUNE_SERVICE_JOBS_SEARCH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune::service {

enum class SearchKind {
  kExhaustive,  // every variant, in search-space order
  kRandom,      // the default config, then a seeded random order
  kModel,       // guided by a cost model fitted to the measurements (model_search.h)
};

// "exhaustive", "random", "model"; INVALID_ARGUMENT naming the choices
// otherwise.
absl::StatusOr<SearchKind> ParseSearchKind(absl::string_view name);
const char* SearchKindName(SearchKind kind);

struct SearchOptions {
  SearchKind kind = SearchKind::kExhaustive;
  // How many variants to measure: at most max_variants (0 = no count
  // limit) and at most fraction of the space, rounded up (0 = no fraction
  // limit); both set: the smaller. Exhaustive ignores neither: a budget
  // below the space's size ends it early, in space order.
  int64_t max_variants = 0;
  double fraction = 0;
  uint64_t seed = 0;
  // The job's rounds stop proposing for this problem once they have run
  // this long (0 = no time limit); the job runner applies it, between
  // rounds.
  double max_seconds = 0;
};

// What a search needs to know of a problem's space.
struct SearchSpaceView {
  int64_t variants = 0;
  int64_t default_index = -1;  // the family's default config; -1 when not in the space
  // Each variant's parameter values, row-major (variants x feature_count):
  // what the model learns from. Needed by kModel only.
  std::vector<float> features;
  int64_t feature_count = 0;
  // Variants to measure early: the winners of the nearest tuned problems
  // (kModel measures them first, after the default).
  std::vector<int64_t> hints;
};

// The variants a search of `variants` measures at most under `options`.
int64_t SearchBudget(const SearchOptions& options, int64_t variants);

// The outcome of measuring one variant, as the search sees it.
struct SearchResult {
  bool valid = false;    // validated and timed
  double median_us = 0;  // when valid
};

class Search {
 public:
  virtual ~Search() = default;
  // Up to `max` variants (indices into the space) not proposed before, in
  // the order to measure them; empty once the budget is spent or the space
  // exhausted. A search may wait for results: call Record for what it
  // proposed before asking again.
  virtual std::vector<int64_t> Next(int64_t max) = 0;
  // The result of a proposed variant.
  virtual void Record(int64_t index, const SearchResult& result) = 0;
  // Up to `max` variants, not proposed yet, that the search expects to
  // propose next, likeliest first: what a job compiles while the batch
  // proposed last is being measured. A guess that changes nothing (no
  // state, no random draws): Next proposes what it would without it. May
  // be empty (no guess to make).
  virtual std::vector<int64_t> Ahead(int64_t max) const = 0;
  // Variants this search may measure in all: the budget applied to the space.
  virtual int64_t budget() const = 0;
};

// INVALID_ARGUMENT for a negative count, a fraction outside [0, 1], an
// empty space, a default index or hint outside it, or (kModel) features
// that are not variants x feature_count.
absl::StatusOr<std::unique_ptr<Search>> MakeSearch(const SearchOptions& options,
                                                   const SearchSpaceView& space);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SEARCH_H_
