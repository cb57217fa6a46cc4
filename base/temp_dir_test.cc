#include "base/temp_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace autotune::testing {
namespace {

TEST(TempDirTest, IsRemovedWithTheObjectAndNamesItsProcess) {
  std::string path;
  {
    TempDir dir;
    path = dir.path();
    ASSERT_FALSE(path.empty());
    EXPECT_NE(path.find("autotune-test-" + std::to_string(getpid()) + "-"), std::string::npos);
    EXPECT_TRUE(std::filesystem::is_directory(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, FoldersOfDeadProcessesAreReapedAndLiveOnesKept) {
  TempDir parent;  // a parent of our own, so other tests' folders are not touched
  ASSERT_FALSE(parent.path().empty());
  const char* before = getenv("TEST_TMPDIR");
  const std::string previous = before != nullptr ? before : "";
  setenv("TEST_TMPDIR", parent.path().c_str(), 1);
  // However the test ends, TEST_TMPDIR is as it was.
  struct Restore {
    std::string previous;
    ~Restore() {
      if (previous.empty()) {
        unsetenv("TEST_TMPDIR");
      } else {
        setenv("TEST_TMPDIR", previous.c_str(), 1);
      }
    }
  } restore{previous};
  TempDir mine;  // this process is alive: kept
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Made, then the process ends without its destructors, as a killed test would.
    auto* leaked = new TempDir();
    const std::string path = leaked->path();
    (void)!write(pipe_fds[1], path.data(), path.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  char buffer[4096];
  const ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer));
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_GT(got, 0);
  const std::string left(buffer, static_cast<size_t>(got));
  ASSERT_TRUE(std::filesystem::is_directory(left)) << left;

  EXPECT_EQ(ReapTempDirsOfDeadProcesses(parent.path()), 1);
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_TRUE(std::filesystem::is_directory(mine.path()));
}

}  // namespace
}  // namespace autotune::testing
