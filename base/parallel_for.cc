#include "base/parallel_for.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace autotune {

void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  const size_t cores = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  const size_t threads = std::min<size_t>(n / 64 + 1, cores);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < n; i += threads) fn(i);
    });
  }
  for (size_t i = 0; i < n; i += threads) fn(i);
  for (std::thread& thread : pool) thread.join();
}

}  // namespace autotune
