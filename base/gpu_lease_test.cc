#include "base/gpu_lease.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Each;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Le;
using ::testing::SizeIs;

constexpr char kUuid[] = "GPU-5f3c2a1e-0b7d-4c9e-8a61-2d4f6e8b9c01";

// A child process holding the lease until Release() or its destruction;
// forked before the test starts any thread.
class LeaseHolderChild {
 public:
  LeaseHolderChild(const std::string& dir, const std::string& holder) {
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(go[1]);
      absl::StatusOr<GpuLease> lease = GpuLease::TryAcquire(dir, kUuid, holder);
      const char answer = lease.ok() ? '1' : '0';
      (void)!write(ready[1], &answer, 1);
      char ignored;
      (void)!read(go[0], &ignored, 1);  // returns when the parent closes its end
      _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    go_ = go[1];
    char answer = '0';
    held_ = pid_ > 0 && read(ready[0], &answer, 1) == 1 && answer == '1';
    close(ready[0]);
  }
  ~LeaseHolderChild() {
    Release();
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  bool held() const { return held_; }
  pid_t pid() const { return pid_; }
  // Lets the child exit (and so drop the lease); does not wait for it.
  void Release() {
    if (go_ >= 0) close(go_);
    go_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool held_ = false;
};

class GpuLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(temp_.path().empty()); }

  testing::TempDir temp_;
  const std::string dir_ = temp_.File("leases");  // not there until a lease makes it
};

TEST_F(GpuLeaseTest, LockFileNamesTheGpuAndHoldsPidAndHolder) {
  ASSERT_OK_AND_ASSIGN(GpuLease lease,
                       GpuLease::TryAcquire(dir_, kUuid, "autotuned job 12 serial"));
  EXPECT_EQ(lease.path(), absl::StrCat(dir_, "/gpu-", kUuid, ".lock"));
  ASSERT_OK_AND_ASSIGN(const std::string text, ReadFile(lease.path()));
  EXPECT_EQ(text, absl::StrCat(getpid(), " autotuned job 12 serial\n"));
}

TEST_F(GpuLeaseTest, SecondLeaseInTheSameProcessIsRefusedNamingTheHolder) {
  ASSERT_OK_AND_ASSIGN(GpuLease lease,
                       GpuLease::TryAcquire(dir_, kUuid, "autotuned job 12 serial"));
  EXPECT_THAT(GpuLease::TryAcquire(dir_, kUuid, "bench"),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(absl::StrCat(kUuid, " is leased by pid ", getpid(),
                                                    " (autotuned job 12 serial)")),
                             HasSubstr(lease.path()))));
}

TEST_F(GpuLeaseTest, ReleasedLeaseCanBeTakenAgain) {
  { ASSERT_OK_AND_ASSIGN(GpuLease lease, GpuLease::TryAcquire(dir_, kUuid, "first")); }
  ASSERT_OK_AND_ASSIGN(GpuLease lease, GpuLease::TryAcquire(dir_, kUuid, "second"));
  ASSERT_OK_AND_ASSIGN(const std::string text, ReadFile(lease.path()));
  EXPECT_EQ(text, absl::StrCat(getpid(), " second\n"));
}

TEST_F(GpuLeaseTest, MovedLeaseStaysHeldAndMoveAssignmentReleasesTheOldOne) {
  std::optional<GpuLease> owner;
  {
    ASSERT_OK_AND_ASSIGN(GpuLease lease, GpuLease::TryAcquire(dir_, kUuid, "first"));
    owner.emplace(std::move(lease));
  }  // the moved-from lease is gone
  EXPECT_THAT(GpuLease::TryAcquire(dir_, kUuid, "second"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("(first)")));

  const std::string other_uuid = "GPU-00000000-1111-2222-3333-444444444444";
  ASSERT_OK_AND_ASSIGN(GpuLease other, GpuLease::TryAcquire(dir_, other_uuid, "other"));
  *owner = std::move(other);  // drops kUuid's lease, takes other_uuid's
  EXPECT_OK(GpuLease::TryAcquire(dir_, kUuid, "third"));
  EXPECT_THAT(GpuLease::TryAcquire(dir_, other_uuid, "fourth"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("(other)")));
  owner.reset();
  EXPECT_OK(GpuLease::TryAcquire(dir_, other_uuid, "fifth"));
}

TEST_F(GpuLeaseTest, DirectoryIsStickyAndWorldWritableAndFileIsSharedWhateverTheUmask) {
  const mode_t old_umask = umask(077);
  absl::StatusOr<GpuLease> lease = GpuLease::TryAcquire(dir_, kUuid, "job");
  umask(old_umask);
  ASSERT_OK(lease);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(stat(lease->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
}

TEST_F(GpuLeaseTest, UuidThatCannotNameAFileIsInvalid) {
  for (const std::string& uuid :
       {std::string(""), std::string("GPU-1/../../etc/passwd"), std::string("GPU-1\0x", 7)}) {
    EXPECT_THAT(GpuLease::TryAcquire(dir_, uuid, "job"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot name a lock file")))
        << uuid;
    EXPECT_THAT(GpuLease::Acquire(dir_, uuid, "job", absl::Seconds(1), nullptr),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot name a lock file")));
  }
}

TEST_F(GpuLeaseTest, DirectoryThatCannotBeMadeIsAnErrorNamingIt) {
  const std::string dir = temp_.File("missing/leases");
  EXPECT_THAT(GpuLease::TryAcquire(dir, kUuid, "job"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(absl::StrCat("cannot create lease directory ", dir))));
}

TEST_F(GpuLeaseTest, SymlinkInPlaceOfTheLockFileIsRefusedAndItsTargetUntouched) {
  ASSERT_OK(WriteFileAtomically(temp_.File("precious"), "keep me"));
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  const std::string path = absl::StrCat(dir_, "/gpu-", kUuid, ".lock");
  ASSERT_EQ(symlink(temp_.File("precious").c_str(), path.c_str()), 0);
  EXPECT_THAT(GpuLease::TryAcquire(dir_, kUuid, "job"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(path)));
  ASSERT_OK_AND_ASSIGN(const std::string text, ReadFile(temp_.File("precious")));
  EXPECT_EQ(text, "keep me");
}

TEST_F(GpuLeaseTest, LeaseHeldByAnotherProcessIsRefusedNamingItsPid) {
  LeaseHolderChild child(dir_, "autotuned job 7 serial");
  ASSERT_TRUE(child.held());
  const std::string holder = absl::StrCat("pid ", child.pid(), " (autotuned job 7 serial)");
  EXPECT_THAT(GpuLease::TryAcquire(dir_, kUuid, "bench"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat(kUuid, " is leased by ", holder))));

  std::vector<std::string> reported;
  const absl::Time start = absl::Now();
  EXPECT_THAT(GpuLease::Acquire(dir_, kUuid, "bench", absl::Milliseconds(2500),
                                [&](const std::string& holder) {
                                  reported.push_back(holder);
                                  return true;
                                }),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("waited 2.5s"), HasSubstr(holder))));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(2500));
  // At the first refusal and about once a second after: not at every try.
  EXPECT_THAT(reported, AllOf(SizeIs(AllOf(Ge(1u), Le(3u))), Each(holder)));
}

TEST_F(GpuLeaseTest, ZeroWaitTriesOnce) {
  LeaseHolderChild child(dir_, "job");
  ASSERT_TRUE(child.held());
  EXPECT_THAT(
      GpuLease::Acquire(dir_, kUuid, "bench", absl::ZeroDuration(), nullptr),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(absl::StrCat("pid ", child.pid()))));
}

TEST_F(GpuLeaseTest, AcquireGetsTheLeaseOnceTheHolderExits) {
  LeaseHolderChild child(dir_, "autotuned job 7 serial");
  ASSERT_TRUE(child.held());
  int reports = 0;
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(
      GpuLease lease,
      GpuLease::Acquire(dir_, kUuid, "bench", absl::Seconds(20), [&](const std::string& holder) {
        EXPECT_THAT(holder, HasSubstr(absl::StrCat("pid ", child.pid())));
        ++reports;
        child.Release();
        return true;
      }));
  EXPECT_GE(reports, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ASSERT_OK_AND_ASSIGN(const std::string text, ReadFile(lease.path()));
  EXPECT_EQ(text, absl::StrCat(getpid(), " bench\n"));
}

TEST_F(GpuLeaseTest, OnWaitReturningFalseGivesUpAtOnce) {
  LeaseHolderChild child(dir_, "job");
  ASSERT_TRUE(child.held());
  int reports = 0;
  const absl::Time start = absl::Now();
  EXPECT_THAT(GpuLease::Acquire(dir_, kUuid, "bench", absl::Seconds(20),
                                [&](const std::string&) {
                                  ++reports;
                                  return false;
                                }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr(absl::StrCat("pid ", child.pid()))));
  EXPECT_EQ(reports, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace autotune
