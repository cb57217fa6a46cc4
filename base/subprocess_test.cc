#include "base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/file.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

int WaitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

TEST(SpawnTiedToThisThreadTest, RunsTheProgramWithTheGivenDescriptors) {
  testing::TempDir dir;
  const std::string out = dir.File("out");
  const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char*> args = {const_cast<char*>("/bin/echo"), const_cast<char*>("hello"), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(SpawnTiedToThisThread(args, {{fd, STDOUT_FILENO}}, SIGTERM, &pid), 0);
  close(fd);
  const int status = WaitFor(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  absl::StatusOr<std::string> written = ReadFile(out);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, "hello\n");
}

TEST(SpawnTiedToThisThreadTest, AProgramThatCannotRunIsItsErrno) {
  std::vector<char*> args = {const_cast<char*>("/nonexistent/program"), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(SpawnTiedToThisThread(args, {}, SIGTERM, &pid), ENOENT);
  EXPECT_EQ(pid, -1);
}

// The child gets the signal when the thread that started it ends, as it
// would when the whole process is killed.
TEST(SpawnTiedToThisThreadTest, TheChildGetsTheSignalWhenItsThreadEnds) {
  std::vector<char*> args = {const_cast<char*>("/bin/sleep"), const_cast<char*>("60"), nullptr};
  pid_t pid = -1;
  int error = -1;
  std::thread starter([&] { error = SpawnTiedToThisThread(args, {}, SIGTERM, &pid); });
  starter.join();
  ASSERT_EQ(error, 0);
  const int status = WaitFor(pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(WaitForExitTest, SaysHowAChildEndedAndReapsIt) {
  std::vector<char*> args = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>("exit 7"), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(SpawnTiedToThisThread(args, {}, SIGKILL, &pid), 0);
  int status = 0;
  ASSERT_TRUE(WaitForExit(pid, absl::Now() + absl::Seconds(30), &status));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  // Reaped: no longer a child to wait for.
  EXPECT_TRUE(WaitForExit(pid, absl::Now(), &status));
  EXPECT_EQ(status, -1);
  EXPECT_FALSE(WIFEXITED(status));
  EXPECT_FALSE(WIFSIGNALED(status));
}

TEST(WaitForExitTest, AChildStillRunningAtTheDeadlineIsFalse) {
  std::vector<char*> args = {const_cast<char*>("/bin/sleep"), const_cast<char*>("30"), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(SpawnTiedToThisThread(args, {}, SIGKILL, &pid), 0);
  int status = 0;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(WaitForExit(pid, absl::Now(), &status));
  EXPECT_FALSE(WaitForExit(pid, absl::Now() + absl::Milliseconds(100), &status));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  kill(pid, SIGKILL);
  ASSERT_TRUE(WaitForExit(pid, absl::InfiniteFuture(), &status));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

}  // namespace
}  // namespace autotune
