#include "service/pools/compile_pool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/pools/worker_process.h"
#include "service/worker/confinement.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;
using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
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

std::unique_ptr<CompilePool> StartPool(int workers, bool allow_unconfined = false) {
  CompilePoolOptions options;
  options.worker_path = AUTOTUNE_WORKER_PATH;
  options.workers = workers;
  options.allow_unconfined = allow_unconfined;
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

// The worker's own confinement, below every check of the family's source:
// a task that names a host file by its absolute path, by a relative path
// from the worker's folder, and through -include, reaches NVRTC (the daemon
// refuses such families at registration; this sends the task directly), and
// NVRTC may read none of them. Found on e01f360, where a source's #include
// read a 0600 file and its lines came back in the compile log; without
// Landlock this test fails on the first read.
TEST(CompilePoolTest, AConfinedWorkerReadsNoFileOfTheHost) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  ASSERT_THAT(pool->confinement(), StartsWith("Landlock ABI "))
      << "this kernel cannot confine compiles: " << pool->confinement();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string secret =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/compile_pool_test.", getpid(), ".secret.h");
  { std::ofstream(secret) << "#error TOPSECRET-51c2\n"; }
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  for (const std::string& include :
       {absl::StrCat("#include \"", secret, "\"\n"), std::string("#include \"/etc/passwd\"\n"),
        absl::StrCat("#include \"", std::filesystem::relative(secret, cwd).string(), "\"\n")}) {
    wv1::CompileOutcome outcome = pool->Compile(Task("host", include + kScale), absl::Seconds(60));
    EXPECT_EQ(outcome.status(), wv1::CompileOutcome::COMPILE_ERROR) << include;
    EXPECT_THAT(outcome.log(), Not(HasSubstr("TOPSECRET"))) << include;
    EXPECT_THAT(outcome.log(), Not(HasSubstr("root:"))) << include;
  }
  std::filesystem::remove(secret);
  // The toolkit's headers still are readable.
  EXPECT_EQ(pool->Compile(Task("fp16", "#include <cuda_fp16.h>\n" + std::string(kScale)),
                          absl::Seconds(60))
                .status(),
            wv1::CompileOutcome::OK);
}

// Compiles run in an empty folder of the pool's own, whatever this
// process's working directory holds: an unconfined worker (where the kernel
// has no Landlock) finds no file by a relative path either. A compile worker
// started in a folder that holds files refuses to serve; the pool removes
// its folder when it goes.
TEST(CompilePoolTest, WorkersRunInAnEmptyFolderOfThePoolsOwn) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/compile_pool_test.", getpid(), ".cwd");
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/secret.h") << "#error TOPSECRET-9e1f\n"; }
  WorkerProcess worker;
  EXPECT_THAT(
      worker.Start(AUTOTUNE_WORKER_PATH, {"compile", "--allow-unconfined"}, absl::Seconds(60), dir),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("is not empty"), HasSubstr("secret.h"))));

  ASSERT_EQ(chdir(dir.c_str()), 0);
  std::string work_dir;
  {
    std::unique_ptr<CompilePool> pool = StartPool(1, /*allow_unconfined=*/true);
    ASSERT_NE(pool, nullptr);
    const wv1::CompileOutcome outcome = pool->Compile(
        Task("relative", "#include \"secret.h\"\n" + std::string(kScale)), absl::Seconds(60));
    EXPECT_EQ(outcome.status(), wv1::CompileOutcome::COMPILE_ERROR);
    EXPECT_THAT(outcome.log(), Not(HasSubstr("TOPSECRET")));
    work_dir = pool->work_dir();
    EXPECT_THAT(work_dir, HasSubstr("autotune-compile-"));
    EXPECT_NE(std::filesystem::canonical(work_dir), std::filesystem::canonical(dir));
    EXPECT_TRUE(std::filesystem::is_empty(work_dir));
  }
  EXPECT_FALSE(std::filesystem::exists(work_dir));
  ASSERT_EQ(chdir("/"), 0);
  std::filesystem::remove_all(dir);
}

// A daemon killed by a signal cannot remove its pool's folder: the next pool
// removes the empty folders of processes that are gone, and nothing else.
TEST(CompilePoolTest, APoolRemovesTheEmptyFoldersOfKilledDaemons) {
  TempDir temp;
  ASSERT_EQ(setenv("TMPDIR", temp.path().c_str(), 1), 0);
  // A process that is gone: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::filesystem::path root(temp.path());
  const std::filesystem::path gone = root / absl::StrCat("autotune-compile-", child, "-abc123");
  const std::filesystem::path gone_with_file =
      root / absl::StrCat("autotune-compile-", child, "-def456");
  const std::filesystem::path alive =
      root / absl::StrCat("autotune-compile-", getppid(), "-ghi789");
  const std::filesystem::path other = root / "autotune-compile-notapid-jkl012";
  for (const auto& folder : {gone, gone_with_file, alive, other}) {
    ASSERT_TRUE(std::filesystem::create_directory(folder));
  }
  { std::ofstream(gone_with_file / "kept") << "x"; }
  {
    std::unique_ptr<CompilePool> pool = StartPool(1, /*allow_unconfined=*/true);
    ASSERT_NE(pool, nullptr);
    EXPECT_THAT(pool->work_dir(), HasSubstr(absl::StrCat("autotune-compile-", getpid(), "-")));
  }
  unsetenv("TMPDIR");
  EXPECT_FALSE(std::filesystem::exists(gone));
  EXPECT_TRUE(std::filesystem::exists(gone_with_file));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(other));
}

// A source that grows the compiler's memory without end (an initializer of
// 10^8 elements from nested macros) fails against the worker's memory cap
// long before its deadline, instead of taking the host's memory.
TEST(CompilePoolTest, ACompilePastTheMemoryLimitFailsQuickly) {
  if (kSanitizerBuild) GTEST_SKIP() << "sanitizer builds run the worker without a memory cap";
  CompilePoolOptions options;
  options.worker_path = AUTOTUNE_WORKER_PATH;
  options.workers = 1;
  options.memory_limit_mb = 512;
  ASSERT_OK_AND_ASSIGN(auto pool, CompilePool::Start(options));
  EXPECT_EQ(pool->memory_limit(), "512 MiB (RLIMIT_DATA)");
  constexpr char kBomb[] = R"(
#define A0 1,1,1,1,1,1,1,1,1,1,
#define A1 A0 A0 A0 A0 A0 A0 A0 A0 A0 A0
#define A2 A1 A1 A1 A1 A1 A1 A1 A1 A1 A1
#define A3 A2 A2 A2 A2 A2 A2 A2 A2 A2 A2
#define A4 A3 A3 A3 A3 A3 A3 A3 A3 A3 A3
#define A5 A4 A4 A4 A4 A4 A4 A4 A4 A4 A4
#define A6 A5 A5 A5 A5 A5 A5 A5 A5 A5 A5
#define A7 A6 A6 A6 A6 A6 A6 A6 A6 A6 A6
__device__ int table[] = {A7 0};
)";
  const absl::Time start = absl::Now();
  wv1::CompileOutcome outcome =
      pool->Compile(Task("bomb", std::string(kBomb) + kScale), absl::Seconds(300));
  EXPECT_NE(outcome.status(), wv1::CompileOutcome::OK);
  EXPECT_NE(outcome.status(), wv1::CompileOutcome::TIMEOUT) << outcome.log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(120));
  // The pool goes on with a fresh worker if that one died.
  EXPECT_EQ(pool->Compile(Task("after"), absl::Seconds(60)).status(), wv1::CompileOutcome::OK);
}

TEST(CompilePoolTest, AMissingWorkerIsReportedAtStart) {
  CompilePoolOptions options;
  options.worker_path = "/nonexistent/autotune-worker";
  EXPECT_THAT(CompilePool::Start(options),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/nonexistent")));
}

}  // namespace
}  // namespace autotune::service
