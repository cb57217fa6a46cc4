#include "service/pools/profile_pool.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/scoped_env.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using ::autotune::testing::ScopedEnv;

namespace v1 = ::autotune::v1;
namespace wv1 = ::autotune::worker::v1;
using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

wv1::ProfileTask TaskWithModes(const std::vector<int>& modes) {
  wv1::ProfileTask task;
  task.set_task_id("t1");
  task.set_context("fake n=64 fp32");
  task.set_rtol(1e-5);
  task.set_atol(1e-6);
  task.set_seeds(3);  // MakeProfileTask always fills the settings
  task.set_launch_timeout_s(0.1);
  task.set_timing_budget_s(0.05);
  task.mutable_reference()->set_id("reference");
  for (size_t i = 0; i < modes.size(); ++i) {
    wv1::KernelImage* variant = task.add_variants();
    variant->set_id(absl::StrCat("v", i));
    variant->set_label(absl::StrCat("MODE=", modes[i], " I=", i));
  }
  return task;
}

// Short deadlines; no host-wide lease unless a test asks for one.
ProfilePoolOptions Options(const std::string& worker_path, std::vector<int> devices,
                           const std::string& lease_dir = "") {
  ProfilePoolOptions options;
  options.worker_path = worker_path;
  options.devices = std::move(devices);
  options.start_timeout = absl::Seconds(10);
  options.grace = absl::Seconds(1);
  options.lease_dir = lease_dir;
  return options;
}

std::unique_ptr<ProfilePool> StartPool() {
  absl::StatusOr<std::unique_ptr<ProfilePool>> pool =
      ProfilePool::Start(Options(FAKE_PROFILE_WORKER_PATH, {}));
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

TEST(ProfilePoolTest, StartFailsWithTheWorkersOwnReason) {
  ScopedEnv no_device("FAKE_WORKER_NO_DEVICE", "1");
  EXPECT_THAT(ProfilePool::Start(Options(FAKE_PROFILE_WORKER_PATH, {})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA driver")));
}

TEST(ProfilePoolTest, MissingWorkerIsAFailedPrecondition) {
  EXPECT_THAT(ProfilePool::Start(Options("/nonexistent/autotune-worker", {})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/nonexistent")));
}

TEST(ProfilePoolTest, GpusOfDifferentModelsAreRefused) {
  ScopedEnv mixed("FAKE_WORKER_MIXED", "1");
  EXPECT_THAT(
      ProfilePool::Start(Options(FAKE_PROFILE_WORKER_PATH, {})),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("device 1 is Fake GPU (114 SMs)")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ProfilePool> one,
                       ProfilePool::Start(Options(FAKE_PROFILE_WORKER_PATH, {1})));
  ASSERT_EQ(one->devices().size(), 1u);
  EXPECT_EQ(one->devices()[0].sm_count(), 114);
}

TEST(ProfilePoolTest, ReportsTheDevice) {
  std::unique_ptr<ProfilePool> pool = StartPool();
  ASSERT_NE(pool, nullptr);
  ASSERT_EQ(pool->devices().size(), 1u);
  EXPECT_EQ(pool->devices()[0].name(), "Fake GPU");
  EXPECT_EQ(pool->devices()[0].compute_capability(), 90);
}

TEST(ProfilePoolTest, EveryVariantEndsInItsStatusAndTheRestGoOnInANewWorker) {
  TempDir dir;
  const std::string log = dir.path() + "/tasks.log";
  ScopedEnv log_env("FAKE_WORKER_LOG", log);
  std::unique_ptr<ProfilePool> pool = StartPool();
  ASSERT_NE(pool, nullptr);
  // ok, wrong, unsupported, fault, ok, dies, ok, timeout (reported), ok,
  // hangs, ok
  const wv1::ProfileTask task = TaskWithModes({0, 2, 6, 5, 0, 4, 0, 7, 1, 3, 0});
  std::vector<std::string> streamed;
  ProfileResult result = pool->Profile(
      task, [&](const wv1::VariantOutcome& outcome) { streamed.push_back(outcome.variant_id()); });

  std::vector<v1::VariantStatus> statuses;
  for (const wv1::VariantOutcome& outcome : result.outcomes) statuses.push_back(outcome.status());
  EXPECT_THAT(statuses, ElementsAre(v1::OK, v1::WRONG_RESULT, v1::UNSUPPORTED, v1::FAULT, v1::OK,
                                    v1::FAULT, v1::OK, v1::TIMEOUT, v1::OK, v1::TIMEOUT, v1::OK));
  ASSERT_EQ(result.outcomes.size(), 11u);
  EXPECT_EQ(streamed.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(result.outcomes[i].variant_id(), absl::StrCat("v", i));
  EXPECT_EQ(result.done.status(), v1::OK);
  // The worker that died and the one that hung are named with the variant.
  EXPECT_THAT(result.outcomes[5].detail(), HasSubstr("fake n=64 fp32 [MODE=4 I=5]"));
  EXPECT_THAT(result.outcomes[5].detail(), HasSubstr("exited with status 1"));
  EXPECT_THAT(result.outcomes[9].detail(), HasSubstr("fake n=64 fp32 [MODE=3 I=9]"));
  EXPECT_THAT(result.outcomes[9].detail(), HasSubstr("killed (SIGKILL)"));
  EXPECT_EQ(result.workers_replaced, 4);
  EXPECT_EQ(pool->replaced(), 4);

  // One request with every variant (its worker says when the reference
  // ran); after each lost worker the next one gets only the variants that
  // remain.
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line.substr(line.find(' ') + 1));
  EXPECT_THAT(lines, ElementsAre("fake n=64 fp32 variants=11", "fake n=64 fp32 variants=7",
                                 "fake n=64 fp32 variants=5", "fake n=64 fp32 variants=3",
                                 "fake n=64 fp32 variants=1"));

  // The pool still serves.
  ProfileResult again = pool->Profile(TaskWithModes({1}));
  ASSERT_EQ(again.outcomes.size(), 1u);
  EXPECT_EQ(again.outcomes[0].status(), v1::OK);
  EXPECT_DOUBLE_EQ(again.outcomes[0].timing().median_us(), 20);
}

TEST(ProfilePoolTest, ARenewedReservationRunsItsNextTaskInAFreshWorker) {
  TempDir dir;
  const std::string log = dir.path() + "/tasks.log";
  ScopedEnv log_env("FAKE_WORKER_LOG", log);
  std::unique_ptr<ProfilePool> pool = StartPool();
  ASSERT_NE(pool, nullptr);
  std::unique_ptr<ProfilePool::Reservation> gpu = pool->Reserve();
  EXPECT_EQ(gpu->Profile(TaskWithModes({0})).done.status(), v1::OK);
  ASSERT_TRUE(gpu->Renew().ok());
  EXPECT_EQ(gpu->Profile(TaskWithModes({0})).done.status(), v1::OK);
  std::ifstream in(log);
  std::vector<std::string> pids;
  for (std::string line; std::getline(in, line);) pids.push_back(line.substr(0, line.find(' ')));
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_NE(pids[0], pids[1]);
  EXPECT_EQ(pool->replaced(), 0);  // renewed, not lost
}

TEST(ProfilePoolTest, AReferenceFaultEndsTheProblemWithoutBlamingAVariant) {
  std::unique_ptr<ProfilePool> pool = StartPool();
  ASSERT_NE(pool, nullptr);
  ScopedEnv fault("FAKE_WORKER_REFERENCE_FAULT", "1");
  // The worker started before the variable was set; a later one sees it.
  ProfileResult first = pool->Profile(TaskWithModes({5}));  // the variant faults
  ASSERT_EQ(first.outcomes.size(), 1u);
  EXPECT_EQ(first.outcomes[0].status(), v1::FAULT);
  ProfileResult result = pool->Profile(TaskWithModes({0, 0}));
  EXPECT_TRUE(result.outcomes.empty());
  EXPECT_EQ(result.done.status(), v1::FAULT);
  EXPECT_EQ(result.done.phase(), "reference");
  EXPECT_THAT(result.done.detail(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
}

// A caller that gives the GPU back and asks again at once (a job going from
// one problem to the next) does not pass another that was waiting.
TEST(ProfilePoolTest, AGreedyCallerDoesNotPassAWaitingOne) {
  std::unique_ptr<ProfilePool> pool = StartPool();
  ASSERT_NE(pool, nullptr);
  std::atomic<int> greedy_turns{0};
  std::atomic<int> turns_before_waiter{-1};
  std::unique_ptr<ProfilePool::Reservation> first = pool->Reserve();
  std::thread waiter([&] {
    std::unique_ptr<ProfilePool::Reservation> gpu = pool->Reserve();
    turns_before_waiter = greedy_turns.load();
  });
  // Until the waiter is queued (a loaded machine may take a while to run it).
  for (int i = 0; i < 2000 && pool->waiting() < 1; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(pool->waiting(), 1);
  std::thread greedy([&] {
    first.reset();
    for (int i = 0; i < 50 && turns_before_waiter < 0; ++i) {
      std::unique_ptr<ProfilePool::Reservation> gpu = pool->Reserve();
      ++greedy_turns;
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  waiter.join();
  greedy.join();
  EXPECT_EQ(turns_before_waiter.load(), 0);
}

TEST(ProfilePoolTest, VariantDeadlineGrowsWithTheLaunchTimeout) {
  wv1::ProfileTask task;
  task.set_launch_timeout_s(1);
  const absl::Duration short_deadline = ProfilePool::VariantDeadline(task, absl::Seconds(5));
  task.set_launch_timeout_s(30);
  const absl::Duration long_deadline = ProfilePool::VariantDeadline(task, absl::Seconds(5));
  EXPECT_GT(short_deadline, absl::Seconds(5 + 3));
  EXPECT_GT(long_deadline, absl::Seconds(30 * 3));
  EXPECT_GT(long_deadline, short_deadline);
}

}  // namespace
}  // namespace autotune::service
