// A test with its own real autotuned (tests/support/process.h's Daemon) on
// a database in the test's temporary directory, and the CLI pointed at it.
//
//   class MyTest : public DaemonTest {};
//   TEST_F(MyTest, X) {
//     ASSERT_OK(StartDaemon({"--kernels", "none"}));
//     CommandResult listed = Cli({"ls", "--json"});
//   }
//
// The daemon is left to its destructor (SIGKILL) unless the test stops it:
// StopDaemon() expects a clean exit.
#ifndef AUTOTUNE_TESTS_SUPPORT_DAEMON_TEST_H_
#define AUTOTUNE_TESTS_SUPPORT_DAEMON_TEST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace autotune::testing {

class DaemonTest : public ::testing::Test {
 protected:
  // Starts autotuned with the extra `flags` (after one started before, if
  // any, was stopped or killed).
  absl::Status StartDaemon(std::vector<std::string> flags,
                           absl::Duration timeout = absl::Seconds(20)) {
    daemon_ = std::make_unique<Daemon>(dir_.path(), std::move(flags));
    return daemon_->Start(timeout);
  }

  // SIGTERM to a daemon still running; it must exit with 0.
  void StopDaemon() {
    if (daemon_ == nullptr) return;
    EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Stderr();
    daemon_.reset();
  }

  // A file of the test's directory.
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // `autotune --server ADDRESS args...`, waited for up to cli_timeout_.
  CommandResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {AutotuneCliPath(), "--server", daemon_->address()});
    return RunCommand(args, cli_timeout_);
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  absl::Duration cli_timeout_ = absl::Minutes(2);
};

}  // namespace autotune::testing

#endif  // AUTOTUNE_TESTS_SUPPORT_DAEMON_TEST_H_
