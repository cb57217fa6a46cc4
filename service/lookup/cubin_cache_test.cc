#include "service/lookup/cubin_cache.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/sample_bundle.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::_;
using ::testing::HasSubstr;

class CubinCacheTest : public ::testing::Test {
 protected:
  // Four entries, a cubin of 1,000 bytes each.
  void SetUp() override {
    cache::StoreOptions options;
    options.path = dir_.File("cache.db");
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open(options));
    ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, testing::MakeSyntheticBundle(4, 1000));
    ASSERT_OK(store_->Import(bundle, false).status());
    for (const v1::Binary& binary : bundle.binaries()) shas_.push_back(binary.sha256());
    ASSERT_EQ(shas_.size(), 4u);
  }

  void CorruptEveryBinary() { ASSERT_OK(testing::CorruptEveryStoredBinary(dir_.File("cache.db"))); }

  testing::TempDir dir_;
  std::unique_ptr<cache::Store> store_;
  std::vector<std::string> shas_;
};

TEST_F(CubinCacheTest, ACubinIsReadCheckedAndKeptThenServedFromMemory) {
  CubinCache cubins(store_.get(), 10000);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const std::string> first, cubins.Get(shas_[0]));
  EXPECT_EQ(Sha256Hex(*first), shas_[0]);
  EXPECT_EQ(cubins.size(), 1u);
  EXPECT_EQ(cubins.bytes(), 1000u);
  ASSERT_NO_FATAL_FAILURE(CorruptEveryBinary());
  // Kept: the same bytes, not read again.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const std::string> again, cubins.Get(shas_[0]));
  EXPECT_EQ(again, first);
  // Not kept: read, found damaged, refused and not kept.
  EXPECT_THAT(cubins.Get(shas_[1]), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt")));
  EXPECT_EQ(cubins.size(), 1u);
}

TEST_F(CubinCacheTest, AnUnknownCubinIsNotFound) {
  CubinCache cubins(store_.get(), 10000);
  EXPECT_THAT(cubins.Get(std::string(64, 'a')), StatusIs(absl::StatusCode::kNotFound, _));
  EXPECT_EQ(cubins.size(), 0u);
}

TEST_F(CubinCacheTest, TheLeastRecentlyUsedGoBeyondTheBudget) {
  CubinCache cubins(store_.get(), 2500);  // two cubins
  ASSERT_OK(cubins.Get(shas_[0]).status());
  ASSERT_OK(cubins.Get(shas_[1]).status());
  ASSERT_OK(cubins.Get(shas_[0]).status());  // 0 is now the most recent
  ASSERT_OK(cubins.Get(shas_[2]).status());  // 1 goes
  EXPECT_EQ(cubins.size(), 2u);
  EXPECT_EQ(cubins.bytes(), 2000u);
  ASSERT_NO_FATAL_FAILURE(CorruptEveryBinary());
  EXPECT_OK(cubins.Get(shas_[0]).status());
  EXPECT_OK(cubins.Get(shas_[2]).status());
  EXPECT_THAT(cubins.Get(shas_[1]), StatusIs(absl::StatusCode::kDataLoss, _));  // read again
}

TEST_F(CubinCacheTest, ACubinOverTheBudgetIsServedAndNotKept) {
  CubinCache cubins(store_.get(), 999);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const std::string> cubin, cubins.Get(shas_[0]));
  EXPECT_EQ(Sha256Hex(*cubin), shas_[0]);
  EXPECT_EQ(cubins.size(), 0u);
  EXPECT_EQ(cubins.bytes(), 0u);
}

TEST_F(CubinCacheTest, ManyThreadsAtOnceGetTheRightBytesWithinTheBudget) {
  CubinCache cubins(store_.get(), 2500);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string& sha = shas_[static_cast<size_t>((t + i) % 4)];
        absl::StatusOr<std::shared_ptr<const std::string>> cubin = cubins.Get(sha);
        if (!cubin.ok() || Sha256Hex(**cubin) != sha) ++wrong;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cubins.bytes(), 2500u);
  EXPECT_EQ(cubins.bytes(), 1000 * cubins.size());
}

}  // namespace
}  // namespace autotune::service
