// Tune-on-miss against a real job runner: a real compile pool (NVRTC) and
// the stand-in profile worker (service/testing/fake_profile_worker.cc).
#include "service/lookup/tune_on_miss.h"

#include <stdlib.h>

#include <memory>
#include <string>

#include "base/scoped_env.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "service/testing/worker_hold.h"

namespace autotune::service {
namespace {

using ::autotune::testing::ScopedEnv;

using ::autotune::testing::TempDir;
using ::autotune::testing::WorkerHold;
using ::testing::HasSubstr;

class TuneOnMissTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open({.path = dir_.path() + "/cache.db"}));
    ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                         kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes.textproto"));
    family.mutable_params(0)->clear_values();
    for (int64_t mode : {0, 1}) family.mutable_params(0)->add_values(mode);
    ASSERT_OK(store_->PutFamily(family, /*builtin=*/false).status());
    ASSERT_OK_AND_ASSIGN(compile_pool_,
                         CompilePool::Start({.worker_path = AUTOTUNE_WORKER_PATH, .workers = 2}));
    JobRunnerOptions options;
    options.profile.worker_path = FAKE_PROFILE_WORKER_PATH;
    // MODE 0 and 1 never hang: a worker held by a test is not taken for hung.
    options.profile.grace = absl::Minutes(2);
    runner_ = std::make_unique<JobRunner>(store_.get(), compile_pool_.get(), "", options);
  }

  std::unique_ptr<TuneOnMiss> Make(int per_hour) {
    return std::make_unique<TuneOnMiss>(
        store_.get(), runner_.get(),
        TuneOnMissOptions{.max_problems_per_hour = per_hour, .now = [this] { return now_; }});
  }

  static v1::LookupRequest Lookup(int64_t n, const std::string& family = "modes",
                                  const std::string& device = "Fake GPU") {
    v1::LookupRequest lookup;
    lookup.set_family(family);
    (*lookup.mutable_problem()->mutable_dims())["n"] = n;
    lookup.mutable_problem()->set_dtype(v1::FLOAT32);
    lookup.mutable_device()->set_name(device);
    return lookup;
  }

  static v1::RequestTuningRequest Request(std::vector<v1::LookupRequest> lookups) {
    v1::RequestTuningRequest request;
    for (v1::LookupRequest& lookup : lookups) *request.add_lookups() = std::move(lookup);
    return request;
  }

  v1::Job WaitFor(const std::string& id) {
    v1::Job last;
    EXPECT_OK(runner_->Watch(id, [&](const v1::JobProgress& progress) {
      last = progress.job();
      return true;
    }));
    return last;
  }

  TempDir dir_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  std::unique_ptr<cache::Store> store_;
  std::unique_ptr<CompilePool> compile_pool_;
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(TuneOnMissTest, AMissIsQueuedOnceAndTunedByAnOrdinaryJob) {
  // The job cannot end, nor store an entry, before its first screened
  // variant is let go: it is still queued at the second request.
  WorkerHold hold(dir_.path() + "/hold", "screen", 1);
  ScopedEnv held("FAKE_WORKER_HOLD", hold.spec());
  std::unique_ptr<TuneOnMiss> tune = Make(60);
  // The same problem twice in one request, and from a second server at once.
  ASSERT_OK_AND_ASSIGN(v1::RequestTuningResponse first,
                       tune->Request(Request({Lookup(256), Lookup(1024), Lookup(256)})));
  ASSERT_EQ(first.results_size(), 3);
  EXPECT_EQ(first.results(0).state(), v1::TUNING_QUEUED) << first.results(0).message();
  EXPECT_EQ(first.results(1).state(), v1::TUNING_QUEUED);
  EXPECT_EQ(first.results(2).job_id(), first.results(0).job_id());
  const std::string job_id = first.results(0).job_id();
  EXPECT_EQ(first.results(1).job_id(), job_id);  // one job for the request
  ASSERT_OK_AND_ASSIGN(v1::RequestTuningResponse again, tune->Request(Request({Lookup(256)})));
  EXPECT_EQ(again.results(0).state(), v1::TUNING_ALREADY_QUEUED);
  EXPECT_EQ(again.results(0).job_id(), job_id);
  hold.Go();

  const v1::Job job = WaitFor(job_id);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_EQ(job.counts().problems(), 2);  // the repeat was not tuned twice
  ASSERT_OK_AND_ASSIGN(v1::RequestTuningResponse after, tune->Request(Request({Lookup(256)})));
  EXPECT_EQ(after.results(0).state(), v1::TUNING_ALREADY_TUNED);
  EXPECT_THAT(after.results(0).message(), HasSubstr(job_id));
}

TEST_F(TuneOnMissTest, ProblemsBeyondTheHourlyLimitAreRateLimitedUntilTheHourPasses) {
  std::unique_ptr<TuneOnMiss> tune = Make(2);
  ASSERT_OK_AND_ASSIGN(v1::RequestTuningResponse answer,
                       tune->Request(Request({Lookup(256), Lookup(512), Lookup(768)})));
  EXPECT_EQ(answer.results(0).state(), v1::TUNING_QUEUED);
  EXPECT_EQ(answer.results(1).state(), v1::TUNING_QUEUED);
  EXPECT_EQ(answer.results(2).state(), v1::TUNING_RATE_LIMITED);
  EXPECT_THAT(answer.results(2).message(), HasSubstr("accepted 2 problems in the last hour"));
  WaitFor(answer.results(0).job_id());
  now_ += absl::Minutes(59);
  ASSERT_OK_AND_ASSIGN(answer, tune->Request(Request({Lookup(768)})));
  EXPECT_EQ(answer.results(0).state(), v1::TUNING_RATE_LIMITED);
  now_ += absl::Minutes(2);
  ASSERT_OK_AND_ASSIGN(answer, tune->Request(Request({Lookup(768)})));
  EXPECT_EQ(answer.results(0).state(), v1::TUNING_QUEUED);
  WaitFor(answer.results(0).job_id());
}

TEST_F(TuneOnMissTest, WhatCannotBeTunedHereIsRefusedWithTheReason) {
  std::unique_ptr<TuneOnMiss> tune = Make(60);
  v1::LookupRequest bad_dims = Lookup(256);
  bad_dims.mutable_problem()->mutable_dims()->erase("n");
  ASSERT_OK_AND_ASSIGN(v1::RequestTuningResponse answer,
                       tune->Request(Request({Lookup(256, "no_such_family"),
                                              Lookup(256, "modes", "NVIDIA B200"), bad_dims})));
  for (const v1::TuningRequestResult& result : answer.results()) {
    EXPECT_EQ(result.state(), v1::TUNING_REFUSED) << result.message();
    EXPECT_TRUE(result.job_id().empty());
  }
  EXPECT_THAT(answer.results(0).message(), HasSubstr("no_such_family"));
  EXPECT_THAT(answer.results(1).message(), HasSubstr("this daemon tunes on Fake GPU"));
  EXPECT_THAT(answer.results(2).message(), HasSubstr("lookups[2].problem"));

  ASSERT_OK_AND_ASSIGN(answer, Make(0)->Request(Request({Lookup(256)})));
  EXPECT_EQ(answer.results(0).state(), v1::TUNING_REFUSED);
  EXPECT_THAT(answer.results(0).message(), HasSubstr("tune-on-miss is off"));
}

TEST_F(TuneOnMissTest, WithoutAGpuEveryProblemIsRefused) {
  JobRunnerOptions options;
  options.profile_off_reason = "the daemon runs with --gpus none";
  JobRunner compile_only(store_.get(), compile_pool_.get(), "", options);
  TuneOnMiss tune(store_.get(), &compile_only, {});
  ASSERT_OK_AND_ASSIGN(v1::RequestTuningResponse answer, tune.Request(Request({Lookup(256)})));
  EXPECT_EQ(answer.results(0).state(), v1::TUNING_REFUSED);
  EXPECT_THAT(answer.results(0).message(), HasSubstr("--gpus none"));
}

}  // namespace
}  // namespace autotune::service
