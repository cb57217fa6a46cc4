#include "service/jobs/compile_phase.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/search_space.h"

namespace autotune::service {
namespace {

using ::testing::HasSubstr;

// A compile pool of the fake worker, each compile giving `cubin_bytes`.
std::unique_ptr<CompilePool> FakePool(int64_t cubin_bytes) {
  setenv("FAKE_WORKER_CUBIN_BYTES", absl::StrCat(cubin_bytes).c_str(), 1);
  CompilePoolOptions options;
  options.worker_path = FAKE_PROFILE_WORKER_PATH;
  options.workers = 1;
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(options);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? std::move(*pool) : nullptr;
}

CompileUnit Unit(const std::string& key) {
  CompileUnit unit;
  unit.key = key;
  auto record = std::make_shared<cache::FamilyRecord>();
  record->family.set_name("scale");
  record->family.set_source("extern \"C\" __global__ void scale() {}");
  record->content_hash = "0123";
  unit.record = std::move(record);
  unit.name_expression = "scale";
  unit.arch = "sm_90";
  return unit;
}

TEST(CompilePhaseTest, ACubinOverTheLimitIsACompileErrorSayingSoAndIsNotKept) {
  ::autotune::testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<cache::Store> store,
                       cache::Store::Open({.path = dir.File("cache.db")}));
  const std::atomic<bool> cancel{false};
  const auto ignore = [](const CompileUnit&, const CompileEnd&) {};

  std::unique_ptr<CompilePool> big = FakePool(kernels::kMaxCubinBytes + 1);
  ASSERT_NE(big, nullptr);
  CompileResults over = RunCompilePhase({Unit("big")}, *store, *big, {}, cancel, ignore);
  ASSERT_EQ(over.count("big"), 1u);
  EXPECT_EQ(over["big"].status, v1::COMPILE_ERROR);
  EXPECT_THAT(over["big"].log,
              HasSubstr(absl::StrCat("the cubin is ", kernels::kMaxCubinBytes + 1,
                                     " bytes, more than the limit of ", kernels::kMaxCubinBytes)));
  ASSERT_OK_AND_ASSIGN(cache::StoreStats after_big, store->Stats());
  EXPECT_EQ(after_big.binaries, 0);

  // At the limit it is kept: the check is on the size, not on this worker.
  std::unique_ptr<CompilePool> limit = FakePool(kernels::kMaxCubinBytes);
  ASSERT_NE(limit, nullptr);
  CompileResults at = RunCompilePhase({Unit("at")}, *store, *limit, {}, cancel, ignore);
  EXPECT_EQ(at["at"].status, v1::OK) << at["at"].log;
  ASSERT_OK_AND_ASSIGN(cache::StoreStats after_at, store->Stats());
  EXPECT_EQ(after_at.binaries, 1);
  EXPECT_EQ(after_at.binary_bytes, kernels::kMaxCubinBytes);
}

}  // namespace
}  // namespace autotune::service
