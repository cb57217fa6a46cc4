// End to end: the real daemon killed with SIGKILL in the middle of a
// measuring job, then started again on the same database. The stand-in
// profile worker (service/testing/fake_profile_worker.cc, through
// --profile-worker) holds the phase open at a chosen variant
// (FAKE_WORKER_HOLD) until the test has killed the daemon, so the kill lands
// where the test says however fast or slow the machine is; compiles are real
// (NVRTC).
#include <signal.h>
#include <stdlib.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "proto/autotune.pb.h"
#include "service/testing/worker_hold.h"
#include "tests/support/daemon_test.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

constexpr int kProblems = 6;
constexpr int kVariants = 4;  // MODE 0 and 1 OK, 2 WRONG_RESULT, 6 UNSUPPORTED

class ResumeAfterKillTest : public DaemonTest {
 protected:
  void SetUp() override {
    ASSERT_OK(WriteModesFamily(dir_.path(), "[0, 1, 2, 6]", "[256, 512, 1024, 2048, 4096, 8192]"));
  }
  void TearDown() override { unsetenv("FAKE_WORKER_HOLD"); }

  // Starts the daemon whose profile worker holds before its `outcome`-th
  // variant outcome of `phase` ("screen" or "serial"), and registers the
  // family.
  void StartHoldingAt(const std::string& phase, int outcome) {
    hold_ = std::make_unique<WorkerHold>(Path("hold"), phase, outcome);
    ASSERT_FALSE(hold_->spec().empty()) << Path("hold");
    setenv("FAKE_WORKER_HOLD", hold_->spec().c_str(), 1);
    ASSERT_OK(StartDaemon());
    unsetenv("FAKE_WORKER_HOLD");  // the restarted daemon's worker holds nowhere
    CommandResult registered = Cli({"register", Path("modes.textproto")});
    ASSERT_EQ(registered.exit_code, 0) << registered.err;
  }

  absl::Status StartDaemon() {
    return DaemonTest::StartDaemon({"--kernels", "none", "--compile-workers", "2",
                                    "--profile-worker", FAKE_PROFILE_WORKER_PATH, "--lease-dir",
                                    Path("leases")});
  }

  // Starts a warmup (the job `autotune warmup` submits) and follows it on
  // its progress stream, which is live, unlike the jobs list: a running job
  // is stored at most once a second, and not while it waits for a worker.
  // Once the worker holds (StartHoldingAt) and `at` accepts the job, kills
  // the daemon, starts it again and waits for the job to end there. Returns
  // the job as it was just before the kill, and as it ended. While the
  // worker holds the job cannot move past `at`.
  // With `terminate` the daemon gets SIGTERM instead (a restart), must
  // exit 0, and leave the job to resume as a kill does.
  std::pair<v1::Job, v1::Job> KillWhen(const std::function<bool(const v1::Job&)>& at,
                                       bool terminate = false) {
    v1::SubmitJobRequest request;
    absl::StatusOr<std::string> manifest = ReadFile(Path("modes.manifest"));
    EXPECT_OK(manifest.status());
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
        manifest.value_or(""), request.mutable_spec()->mutable_manifest()));
    std::unique_ptr<v1::Autotune::Stub> stub = v1::Autotune::NewStub(
        grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
    absl::Mutex mu;
    v1::Job latest;
    grpc::ClientContext context;
    std::thread warmup([&] {
      std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
          stub->SubmitJob(&context, request);
      v1::JobProgress progress;
      while (reader->Read(&progress)) {
        absl::MutexLock lock(&mu);
        latest = progress.job();
      }
      reader->Finish();  // cut short by the kill
    });
    EXPECT_TRUE(hold_->WaitHeld()) << "the worker never held" << daemon_->Stderr();
    v1::Job before;
    {
      absl::MutexLock lock(&mu);
      const auto there = [&] { return at(latest); };
      mu.AwaitWithTimeout(absl::Condition(&there), absl::Minutes(1));
      before = latest;
    }
    if (terminate) {
      // The stream is given up at once so the daemon need not wait for it;
      // the held variant is let go only once the job has been told to stop.
      EXPECT_EQ(kill(daemon_->pid(), SIGTERM), 0);
      context.TryCancel();
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (!absl::StrContains(daemon_->Stderr(), "stopping 1 running job") &&
             absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      EXPECT_THAT(daemon_->Stderr(), ::testing::HasSubstr("stopping 1 running job"));
      hold_->Go();  // the held variant ends, then the job stops
      EXPECT_EQ(daemon_->WaitExit(absl::Seconds(60)), 0) << daemon_->Stderr();
      EXPECT_THAT(daemon_->Stderr(), ::testing::HasSubstr("it resumes when the daemon starts"));
    } else {
      daemon_->Kill();
    }
    warmup.join();
    hold_->Go();
    EXPECT_TRUE(at(before)) << "the job never got there: " << before.ShortDebugString();
    EXPECT_OK(StartDaemon());
    const v1::Job after = WaitForNewestJob(
        daemon_->address(),
        [&](const v1::Job& job) {
          return job.id() == before.id() &&
                 (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED ||
                  job.state() == v1::CANCELLED);
        },
        absl::Minutes(2));
    return {before, after};
  }

  // Every problem's entry and the measurements behind it.
  std::vector<v1::GetEntryResponse> Entries() {
    std::vector<v1::GetEntryResponse> entries;
    for (int n : {256, 512, 1024, 2048, 4096, 8192}) {
      CommandResult shown =
          Cli({"show", "modes", "--dims", absl::StrCat("n=", n), "--dtype", "fp32", "--json"});
      EXPECT_EQ(shown.exit_code, 0) << shown.err;
      v1::GetEntryResponse response;
      EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(shown.out, &response).ok())
          << shown.out;
      entries.push_back(std::move(response));
    }
    return entries;
  }

  // Measurements of `phase` per config ("MODE=1"), of the job `id`.
  static std::map<int64_t, int> CountByMode(const v1::GetEntryResponse& entry, v1::Phase phase,
                                            const std::string& id) {
    std::map<int64_t, int> counts;
    for (const v1::Measurement& m : entry.measurements()) {
      if (m.phase() == phase && m.job_id() == id) ++counts[m.config().params().at("MODE")];
    }
    return counts;
  }

  std::unique_ptr<WorkerHold> hold_;
};

TEST_F(ResumeAfterKillTest, KilledWhileScreeningItScreensOnlyWhatWasNotScreened) {
  // Held before the 7th screened variant: the second problem half done.
  ASSERT_NO_FATAL_FAILURE(StartHoldingAt("screen", kVariants + 3));
  const auto [before, after] = KillWhen([](const v1::Job& job) {
    return job.state() == v1::SCREENING && job.counts().measured() >= kVariants + 2;
  });
  ASSERT_EQ(after.state(), v1::SUCCEEDED) << after.error() << daemon_->Stderr();
  EXPECT_THAT(daemon_->Stderr(), ::testing::HasSubstr("resuming after a restart"));
  const std::vector<v1::GetEntryResponse> entries = Entries();
  for (const v1::GetEntryResponse& entry : entries) {
    EXPECT_EQ(entry.entry().job_id(), before.id());
    EXPECT_EQ(entry.entry().config().params().at("MODE"), 0);
    // Each variant screened once: none lost, none measured again.
    const std::map<int64_t, int> screens = CountByMode(entry, v1::SCREEN, before.id());
    EXPECT_EQ(screens, (std::map<int64_t, int>{{0, 1}, {1, 1}, {2, 1}, {6, 1}}))
        << entry.entry().problem().ShortDebugString();
  }
}

// Found on e01f360: SIGTERM cancelled running jobs for good, so a restart
// lost work a crash would not have. Stopped, the job resumes.
TEST_F(ResumeAfterKillTest, StoppedBySigtermWhileScreeningItResumesInsteadOfBeingCancelled) {
  ASSERT_NO_FATAL_FAILURE(StartHoldingAt("screen", kVariants + 3));
  const auto [before, after] = KillWhen(
      [](const v1::Job& job) {
        return job.state() == v1::SCREENING && job.counts().measured() >= kVariants + 2;
      },
      /*terminate=*/true);
  ASSERT_EQ(after.state(), v1::SUCCEEDED) << after.error() << daemon_->Stderr();
  EXPECT_EQ(after.id(), before.id());
  EXPECT_THAT(daemon_->Stderr(), ::testing::HasSubstr("resuming after a restart"));
  EXPECT_EQ(after.results_size(), kProblems);
}

TEST_F(ResumeAfterKillTest, KilledInTheSerialPhaseItKeepsTheEntriesItHadStored) {
  // Each problem's serial phase validates its two candidates (MODE 0 and 1)
  // in one worker process, then again in a fresh one, which goes on to the
  // next problem; a worker counts its outcomes from 1. Held before the
  // second worker's 3rd serial outcome (the second problem's first), the
  // first problem has its entry.
  ASSERT_NO_FATAL_FAILURE(StartHoldingAt("serial", 3));
  const auto [before, after] = KillWhen([](const v1::Job& job) {
    return job.state() == v1::VALIDATING && job.results_size() >= 1 &&
           job.results_size() < kProblems;
  });
  ASSERT_EQ(after.state(), v1::SUCCEEDED) << after.error() << daemon_->Stderr();
  EXPECT_EQ(after.results_size(), kProblems);
  std::map<std::string, v1::Entry> stored_before;
  for (const v1::Entry& entry : before.results()) {
    stored_before[entry.problem().ShortDebugString()] = entry;
  }
  for (const v1::GetEntryResponse& entry : Entries()) {
    const std::string problem = entry.entry().problem().ShortDebugString();
    EXPECT_EQ(entry.entry().job_id(), before.id());
    // No screen is made again after the restart.
    EXPECT_EQ(CountByMode(entry, v1::SCREEN, before.id()),
              (std::map<int64_t, int>{{0, 1}, {1, 1}, {2, 1}, {6, 1}}))
        << problem;
    auto it = stored_before.find(problem);
    if (it == stored_before.end()) continue;
    // An entry stored before the kill is the one served after it, and its
    // candidates were timed serially once in each of its two worker
    // processes.
    EXPECT_EQ(entry.entry().tuned_at(), it->second.tuned_at()) << problem;
    EXPECT_EQ(CountByMode(entry, v1::SERIAL_VALIDATION, before.id()),
              (std::map<int64_t, int>{{0, 2}, {1, 2}}))
        << problem;
  }
}

}  // namespace
}  // namespace autotune::testing
