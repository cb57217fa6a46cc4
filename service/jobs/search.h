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

#include "absl/status/status.h"
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

// What one problem's search may spend, each limit 0 = none (the wire's
// SearchOptions.max_variants, max_fraction and max_seconds, which the CLI's
// --budget and the Python client's `budget` set one at a time):
//  - count: variants measured at most;
//  - fraction: a share of the space, rounded up, at least one variant;
//    with count too, the smaller;
//  - seconds: the job's search rounds (compiles and screens) stop proposing
//    for the problem once they have run this long, after its first round.
// The variant limits end even an exhaustive search (in space order). Its
// one check (Check) and its two uses (Variants by MakeSearch and the plan,
// OutOfTime by the job's rounds) are here.
struct SearchBudget {
  int64_t count = 0;
  double fraction = 0;
  double seconds = 0;

  // The variants of a space of `variants` the search may measure.
  int64_t Variants(int64_t variants) const;
  // Whether rounds that have run `searched_s` seconds, `rounds_run` of them,
  // may propose no further round.
  bool OutOfTime(double searched_s, int rounds_run) const;
  // INVALID_ARGUMENT naming the field ("<field>.max_fraction is 2, not in
  // 0..1 (0 = no limit)") when a limit is negative, NaN, a fraction above 1,
  // a count above `max_count` or seconds above `max_seconds`.
  absl::Status Check(absl::string_view field, int64_t max_count, double max_seconds) const;
};

struct SearchOptions {
  SearchKind kind = SearchKind::kExhaustive;
  SearchBudget budget;
  uint64_t seed = 0;
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
  // Further features the model learns from but does not search along (its
  // neighbours and coverage rounds move over the parameters only): for each
  // variant derived_count values, row-major; empty = none (LaunchFeatures).
  std::vector<float> derived;
  int64_t derived_count = 0;
};

// What a variant's launch says about how it fills the GPU, for the model
// (SearchSpaceView.derived): its blocks, threads per block and dynamic
// shared bytes; the blocks an SM holds at once (by threads, at most 2048,
// and shared memory, 228 KiB with 1 KiB reserved a block; at most 32); the
// waves of `sms` SMs that many blocks take; and how full the last wave is
// (1 = full). kLaunchFeatures values.
inline constexpr int64_t kLaunchFeatures = 6;
std::vector<float> LaunchFeatures(int64_t blocks, int64_t threads, int64_t shared_bytes,
                                  int64_t sms);

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

// INVALID_ARGUMENT for a budget that fails its Check (no count or time
// limit beyond the type's own), an empty space, a default index or hint
// outside it, or (kModel) features that are not variants x feature_count.
absl::StatusOr<std::unique_ptr<Search>> MakeSearch(const SearchOptions& options,
                                                   const SearchSpaceView& space);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SEARCH_H_
