#include "service/pools/compile_pool.h"

#include <thread>
#include <vector>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;
using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kScale[] = R"(
extern "C" __global__ void scale(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
)";

wv1::CompileTask Task(const std::string& id, const std::string& source = kScale) {
  wv1::CompileTask task;
  task.set_task_id(id);
  task.set_source(source);
  task.set_program_name("scale.cu");
  task.set_name_expression("scale");
  task.add_options("-DBLOCK=128");
  task.set_arch("sm_90");
  return task;
}

std::unique_ptr<CompilePool> StartPool(int workers) {
  CompilePoolOptions options;
  options.worker_path = AUTOTUNE_WORKER_PATH;
  options.workers = workers;
  auto pool = CompilePool::Start(options);
  EXPECT_OK(pool);
  return pool.ok() ? std::move(*pool) : nullptr;
}

TEST(CompilePoolTest, CompilesInAWorkerProcess) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  EXPECT_THAT(pool->nvrtc_version(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+"));
  wv1::CompileOutcome outcome = pool->Compile(Task("a"), absl::Seconds(60));
  ASSERT_EQ(outcome.status(), wv1::CompileOutcome::OK) << outcome.log();
  EXPECT_EQ(outcome.task_id(), "a");
  EXPECT_THAT(outcome.cubin(), StartsWith("\x7f"
                                          "ELF"));
  EXPECT_EQ(outcome.lowered_name(), "scale");
}

TEST(CompilePoolTest, CompileErrorsComeBackWithTheLog) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  wv1::CompileOutcome outcome = pool->Compile(
      Task("bad", "extern \"C\" __global__ void scale() { oops; }"), absl::Seconds(60));
  EXPECT_EQ(outcome.status(), wv1::CompileOutcome::COMPILE_ERROR);
  EXPECT_THAT(outcome.log(), HasSubstr("scale.cu"));
  EXPECT_THAT(outcome.log(), HasSubstr("oops"));
  // The worker is still there for the next task.
  EXPECT_EQ(pool->Compile(Task("good"), absl::Seconds(60)).status(), wv1::CompileOutcome::OK);
  EXPECT_EQ(pool->replaced(), 0);
}

TEST(CompilePoolTest, ACompilePastItsDeadlineIsKilledAndTheWorkerReplaced) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  wv1::CompileOutcome late = pool->Compile(Task("late"), absl::Microseconds(1));
  EXPECT_EQ(late.status(), wv1::CompileOutcome::TIMEOUT);
  EXPECT_THAT(late.log(), HasSubstr("killed"));
  EXPECT_EQ(pool->replaced(), 1);
  wv1::CompileOutcome next = pool->Compile(Task("next"), absl::Seconds(60));
  EXPECT_EQ(next.status(), wv1::CompileOutcome::OK) << next.log();
}

TEST(CompilePoolTest, WorkersCompileInParallel) {
  auto pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  std::vector<wv1::CompileOutcome> outcomes(6);
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      wv1::CompileTask task = Task(std::to_string(i));
      task.set_options(0, "-DBLOCK=" + std::to_string(64 << (i % 3)));
      outcomes[i] = pool->Compile(task, absl::Seconds(120));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(outcomes[i].status(), wv1::CompileOutcome::OK) << outcomes[i].log();
    EXPECT_EQ(outcomes[i].task_id(), std::to_string(i));
  }
  EXPECT_EQ(outcomes[0].cubin(), outcomes[3].cubin());  // same BLOCK, same bytes
  EXPECT_NE(outcomes[0].cubin(), outcomes[1].cubin());
}

TEST(CompilePoolTest, AMissingWorkerIsReportedAtStart) {
  CompilePoolOptions options;
  options.worker_path = "/nonexistent/autotune-worker";
  EXPECT_THAT(CompilePool::Start(options),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/nonexistent")));
}

}  // namespace
}  // namespace autotune::service
