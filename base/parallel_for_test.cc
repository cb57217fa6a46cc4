#include "base/parallel_for.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

TEST(ParallelForTest, CallsEachIndexOnce) {
  for (size_t n : {0u, 1u, 63u, 64u, 1000u}) {
    std::vector<std::atomic<int>> calls(n);
    ParallelFor(n, [&](size_t i) { calls[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << "n " << n << " i " << i;
  }
}

TEST(ParallelForTest, ManyItemsUseMoreThanTheCallingThreadWhenThereAreCores) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  ParallelFor(1000, [&](size_t) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_TRUE(seen.contains(std::this_thread::get_id()));
  const size_t expected = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  EXPECT_EQ(seen.size(), expected);
}

}  // namespace
}  // namespace autotune
