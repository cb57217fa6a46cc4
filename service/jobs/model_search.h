// The model-guided search (SearchKind::kModel), made by MakeSearch
// (search.h); declared here for it and for its tests.
//
// It measures the family's default config, the hints (the winners of the
// nearest tuned problems) and a seeded random sample first; then, round by
// round, it fits a cost model to everything measured so far and proposes the
// variants the model ranks fastest, a few random ones (so that a wrong model
// is found out) and the untried neighbours of the best (one parameter one
// value away). It stops at its budget, or when several rounds in a row have
// not improved the best and neither has a coverage round: the best measured
// moved to each other value of each parameter (the unseen variant nearest
// it with that value), so that a search stuck where single steps lead
// nowhere looks once at the best's counterpart on every other path, stage
// count or layout before it gives up (at most twice a search).
//
// The model: gradient-boosted trees (XGBoost) regressing the log of the
// screen median on the parameter values. Trees suit a GEMM-like space (tile
// sizes, stages, paths: discrete values whose effects interact and jump
// where a resource runs out), train on hundreds of points in milliseconds,
// and need no scaling of the inputs. Failures are labels too: a variant
// that did not compile, validate or finish is given twice the slowest valid
// median, so the model learns to steer away from the region it came from.
// Trained on one thread with the exact tree method: the same results give
// the same model and proposals on every run.
#ifndef AUTOTUNE_SERVICE_JOBS_MODEL_SEARCH_H_
#define AUTOTUNE_SERVICE_JOBS_MODEL_SEARCH_H_

#include <cstdint>
#include <memory>

#include "service/jobs/search.h"

namespace autotune::service {

// `space` has features; `budget` is at least 1 and at most its variants.
std::unique_ptr<Search> MakeModelSearch(const SearchOptions& options, const SearchSpaceView& space,
                                        int64_t budget);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_MODEL_SEARCH_H_
