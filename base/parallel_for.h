// Runs a loop's iterations on a few threads, for short CPU-bound work on
// many small items (reading and checking a thousand files at start-up).
//
//   ParallelFor(paths.size(), [&](size_t i) { results[i] = Check(paths[i]); });
//
// fn(i) is called once for each i in [0, n), on the calling thread and up
// to three more (never more threads than cores, one per 64 items), and
// ParallelFor returns when every call has. Calls for different i run at
// once: each may write only its own i's results.
#ifndef AUTOTUNE_BASE_PARALLEL_FOR_H_
#define AUTOTUNE_BASE_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

namespace autotune {

void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_PARALLEL_FOR_H_
