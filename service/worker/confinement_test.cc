#include "service/worker/confinement.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernel_worker {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

// A folder of its own under the test's temporary directory, with an allowed
// subfolder holding a header and a secret file beside it.
class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> abi = LandlockAbi();
    if (!abi.ok()) GTEST_SKIP() << "no Landlock on this kernel: " << abi.status().message();
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
            absl::StrCat("confinement_test.", getpid());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "allowed" / "sub");
    Write(root_ / "allowed" / "sub" / "header.h", "#define X 1\n");
    Write(root_ / "secret.txt", "private key\n");
  }
  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  static void Write(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  // Runs `body` in a forked child (one thread, so Landlock may confine it)
  // and returns its exit status: each check in the body exits with its own
  // code when it fails.
  static int InChild(const std::function<int()>& body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  }

  std::filesystem::path root_;
};

TEST_F(ConfinementTest, ReadsOnlyBeneathTheAllowedFoldersAndWritesNothing) {
  const std::string allowed = (root_ / "allowed").string();
  const std::string header = (root_ / "allowed" / "sub" / "header.h").string();
  const std::string secret = (root_ / "secret.txt").string();
  const std::string created = (root_ / "created.txt").string();
  const std::string created_inside = (root_ / "allowed" / "new.txt").string();
  const int code = InChild([&]() -> int {
    // Before: everything is readable and writable.
    if (access(secret.c_str(), R_OK) != 0) return 1;
    absl::StatusOr<Confinement> confined = ConfineToReadOnly({allowed, ""});
    if (!confined.ok()) return 2;
    if (confined->description.find(allowed) == std::string::npos) return 3;
    const int readable = open(header.c_str(), O_RDONLY);
    if (readable < 0) return 4;
    close(readable);
    if (open(secret.c_str(), O_RDONLY) >= 0 || errno != EACCES) return 5;
    if (open("/etc/passwd", O_RDONLY) >= 0) return 6;
    if (open(header.c_str(), O_WRONLY) >= 0) return 7;
    if (open(created.c_str(), O_WRONLY | O_CREAT, 0600) >= 0) return 8;
    if (open(created_inside.c_str(), O_WRONLY | O_CREAT, 0600) >= 0) return 9;
    if (truncate(header.c_str(), 0) == 0) return 10;
    if (unlink(header.c_str()) == 0) return 11;
    if (mkdir((root_ / "made").c_str(), 0700) == 0) return 12;
    if (rename(header.c_str(), (root_ / "moved.h").c_str()) == 0) return 13;
    if (symlink(secret.c_str(), (root_ / "allowed" / "link").c_str()) == 0) return 14;
    return 0;
  });
  EXPECT_EQ(code, 0) << "the first check that failed is numbered in the test";
  EXPECT_TRUE(std::filesystem::exists(root_ / "allowed" / "sub" / "header.h"));
  EXPECT_FALSE(std::filesystem::exists(root_ / "created.txt"));
  EXPECT_FALSE(std::filesystem::exists(root_ / "allowed" / "new.txt"));
  EXPECT_FALSE(std::filesystem::exists(root_ / "made"));
}

TEST_F(ConfinementTest, AChildOfAConfinedProcessIsConfinedToo) {
  const std::string secret = (root_ / "secret.txt").string();
  const int code = InChild([&]() -> int {
    if (!ConfineToReadOnly({}).ok()) return 2;
    return InChild([&]() -> int { return open(secret.c_str(), O_RDONLY) >= 0 ? 1 : 0; });
  });
  EXPECT_EQ(code, 0);
}

TEST_F(ConfinementTest, AnAllowedPathThatDoesNotExistIsAnError) {
  const std::string missing = (root_ / "missing").string();
  const int code = InChild([&]() -> int {
    absl::StatusOr<Confinement> confined = ConfineToReadOnly({missing});
    if (confined.ok()) return 1;
    if (confined.status().code() != absl::StatusCode::kFailedPrecondition) return 2;
    if (confined.status().message().find(missing) == absl::string_view::npos) return 3;
    return 0;
  });
  EXPECT_EQ(code, 0);
}

TEST(LimitMemoryTest, CapsTheDataSegment) {
  if (kSanitizerBuild)
    GTEST_SKIP() << "a sanitizer's allocator aborts instead of failing an allocation";
  const int code = [] {
    const pid_t pid = fork();
    if (pid == 0) {
      if (!LimitMemory(int64_t{64} << 20).ok()) _exit(1);
      rlimit limit{};
      if (getrlimit(RLIMIT_DATA, &limit) != 0 || limit.rlim_cur != (rlim_t{64} << 20)) _exit(2);
      // 256 MiB, touched so that nothing lazy hides the allocation.
      void* big = malloc(size_t{256} << 20);
      _exit(big == nullptr ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  }();
  EXPECT_EQ(code, 0);
  EXPECT_THAT(LimitMemory(0), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0")));
}

}  // namespace
}  // namespace autotune::kernel_worker
