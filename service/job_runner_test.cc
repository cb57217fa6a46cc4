// The job runner's screen phase against a real compile pool (NVRTC) and the
// stand-in profile worker (service/testing/fake_profile_worker.cc), which
// ends each variant the way its MODE param says.
#include "service/job_runner.h"

#include <sqlite3.h>

#include <map>
#include <memory>
#include <string>

#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"

namespace autotune::service {
namespace {

namespace v1 = ::autotune::v1;
using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class ScreenJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open({.path = dir_.path() + "/cache.db"}));
    ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                         kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes.textproto"));
    ASSERT_OK(store_->PutFamily(family, /*builtin=*/false).status());
    ASSERT_OK_AND_ASSIGN(compile_pool_,
                         CompilePool::Start({.worker_path = AUTOTUNE_WORKER_PATH, .workers = 2}));
    JobRunnerOptions options;
    options.profile.worker_path = FAKE_PROFILE_WORKER_PATH;
    options.profile.grace = absl::Seconds(1);
    options.variant_timeout_s = 0.1;
    runner_ = std::make_unique<JobRunner>(store_.get(), compile_pool_.get(), "", options);
  }

  static v1::JobSpec Spec(bool retune = false) {
    v1::JobSpec spec;
    v1::ManifestItem* item = spec.mutable_manifest()->add_items();
    item->set_family("modes");
    v1::ManifestItem::DimValues* n = item->add_dims();
    n->set_name("n");
    n->add_values(256);
    n->add_values(1024);
    item->add_dtypes(v1::FLOAT32);
    spec.mutable_options()->set_retune(retune);
    return spec;
  }

  // Submits and waits for the end.
  v1::Job Run(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = runner_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    v1::Job last;
    EXPECT_OK(runner_->Watch(job->id(), [&](const v1::JobProgress& progress) {
      last = progress.job();
      return true;
    }));
    return last;
  }

  TempDir dir_;
  std::unique_ptr<cache::Store> store_;
  std::unique_ptr<CompilePool> compile_pool_;
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(ScreenJobTest, EveryVariantEndsInOneStoredStatusAndTheFastestValidOneIsChosen) {
  const v1::Job job = Run(Spec());
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  const v1::JobCounts& counts = job.counts();
  EXPECT_EQ(counts.problems(), 2);
  EXPECT_EQ(counts.variants(), 16);
  EXPECT_EQ(counts.measured(), 16);
  EXPECT_EQ(counts.ok(), 4);            // MODE 0 and 1
  EXPECT_EQ(counts.wrong_result(), 2);  // MODE 2
  EXPECT_EQ(counts.timeout(), 4);       // MODE 3 (hangs) and 7 (reported)
  EXPECT_EQ(counts.fault(), 4);         // MODE 4 (dies) and 5 (reported)
  EXPECT_EQ(counts.unsupported(), 2);   // MODE 6
  EXPECT_EQ(job.error(), "");

  ASSERT_THAT(job.results(), SizeIs(2));
  for (const v1::Entry& entry : job.results()) {
    EXPECT_EQ(entry.config().params().at("MODE"), 0);  // 10 us beats 20 us
    EXPECT_EQ(entry.phase(), v1::SCREEN);
    EXPECT_DOUBLE_EQ(entry.margin(), 1.0);
    EXPECT_DOUBLE_EQ(entry.timing().median_us(), 10);
    EXPECT_EQ(entry.device().name(), "Fake GPU");
    EXPECT_EQ(entry.arch(), "sm_90");
    EXPECT_EQ(entry.job_id(), job.id());
    EXPECT_FALSE(entry.binary_sha256().empty());
    ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> stored,
                         store_->FindEntry({.family = "modes",
                                            .family_hash = "",
                                            .problem = entry.problem(),
                                            .device = "Fake GPU"}));
    ASSERT_TRUE(stored.has_value());
    EXPECT_EQ(stored->config().params().at("MODE"), 0);

    ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                         store_->ListMeasurements({.family = "modes",
                                                   .family_hash = entry.family_hash(),
                                                   .problem = entry.problem(),
                                                   .device = "Fake GPU"}));
    ASSERT_THAT(measurements, SizeIs(8));
    std::map<int64_t, v1::Measurement> by_mode;
    for (const v1::Measurement& m : measurements) by_mode[m.config().params().at("MODE")] = m;
    const std::map<int64_t, v1::VariantStatus> expected = {
        {0, v1::OK},    {1, v1::OK},    {2, v1::WRONG_RESULT}, {3, v1::TIMEOUT},
        {4, v1::FAULT}, {5, v1::FAULT}, {6, v1::UNSUPPORTED},  {7, v1::TIMEOUT}};
    for (const auto& [mode, status] : expected) {
      SCOPED_TRACE(mode);
      ASSERT_TRUE(by_mode.contains(mode));
      const v1::Measurement& m = by_mode[mode];
      EXPECT_EQ(m.status(), status);
      EXPECT_EQ(m.phase(), v1::SCREEN);
      EXPECT_EQ(m.job_id(), job.id());
      EXPECT_EQ(m.cache_state(), v1::COLD);
      if (status != v1::OK) {
        // Full context: family, dims, dtype and config.
        EXPECT_THAT(m.detail(), HasSubstr("modes n="));
        EXPECT_THAT(m.detail(), HasSubstr("fp32"));
        EXPECT_THAT(m.detail(), HasSubstr("MODE=" + std::to_string(mode)));
      }
    }
    EXPECT_THAT(by_mode[0].detail(), HasSubstr("validated on 3 seeds"));
    EXPECT_THAT(by_mode[3].detail(), HasSubstr("killed (SIGKILL)"));
  }
}

TEST_F(ScreenJobTest, ARerunSkipsTunedProblemsAndRetuneMeasuresAgain) {
  const v1::Job first = Run(Spec());
  ASSERT_EQ(first.state(), v1::SUCCEEDED);
  const v1::Job rerun = Run(Spec());
  // The first job was forgotten when the rerun started; it is read back
  // from the store as it ended.
  v1::Job again;
  ASSERT_OK(runner_->Watch(first.id(), [&](const v1::JobProgress& progress) {
    again = progress.job();
    return true;
  }));
  EXPECT_EQ(again.state(), v1::SUCCEEDED);
  EXPECT_EQ(again.counts().measured(), 16);
  EXPECT_THAT(again.results(), SizeIs(2));
  ASSERT_EQ(rerun.state(), v1::SUCCEEDED);
  EXPECT_EQ(rerun.counts().cached_problems(), 2);
  EXPECT_EQ(rerun.counts().measured(), 0);
  EXPECT_EQ(rerun.counts().compiles(), 0);
  EXPECT_THAT(rerun.results(), SizeIs(2));  // the cached entries, for the report

  const v1::Job retune = Run(Spec(/*retune=*/true));
  ASSERT_EQ(retune.state(), v1::SUCCEEDED);
  EXPECT_EQ(retune.counts().cached_problems(), 0);
  EXPECT_EQ(retune.counts().measured(), 16);
  ASSERT_THAT(retune.results(), SizeIs(2));
  EXPECT_EQ(retune.results(0).job_id(), retune.id());
}

TEST_F(ScreenJobTest, AWinnerFarAheadOfTheRestIsMeasuredAgainBeforeItIsBelieved) {
  setenv("FAKE_WORKER_FAST_MODE0", "1", 1);
  const v1::Job job = Run(Spec());
  unsetenv("FAKE_WORKER_FAST_MODE0");
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_EQ(job.counts().measured(), 16);  // the second measurement is not another variant
  ASSERT_THAT(job.results(), SizeIs(2));
  const v1::Entry& entry = job.results(0);
  EXPECT_EQ(entry.config().params().at("MODE"), 0);
  EXPECT_DOUBLE_EQ(entry.timing().median_us(), 4);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                       store_->ListMeasurements({.family = "modes",
                                                 .family_hash = entry.family_hash(),
                                                 .problem = entry.problem(),
                                                 .device = "Fake GPU"}));
  int mode0 = 0;
  for (const v1::Measurement& m : measurements) {
    if (m.config().params().at("MODE") != 0) continue;
    ++mode0;
    if (mode0 == 2) {
      EXPECT_THAT(m.detail(), HasSubstr("measured again alone"));
    }
  }
  EXPECT_EQ(mode0, 2);
}

TEST_F(ScreenJobTest, AJobStoppedWhileScreeningResumesWithoutMeasuringFinishedProblemsAgain) {
  v1::Job job = Run(Spec());
  ASSERT_EQ(job.state(), v1::SUCCEEDED);
  // The end is in the store once the stream has shown it.
  ASSERT_OK_AND_ASSIGN(v1::Job stored, store_->GetJob(job.id()));
  EXPECT_EQ(stored.state(), v1::SUCCEEDED);
  runner_.reset();
  // As a daemon killed while screening the second problem leaves it: the
  // first problem's entry stored, the second's not, the job SCREENING.
  v1::EntryFilter second;
  second.set_family("modes");
  *second.mutable_problem() = job.results(1).problem();
  ASSERT_OK(store_->Invalidate(second, /*dry_run=*/false).status());
  job.set_state(v1::SCREENING);
  job.clear_results();
  ASSERT_OK(store_->UpdateJob(job));

  JobRunnerOptions options;
  options.profile.worker_path = FAKE_PROFILE_WORKER_PATH;
  options.profile.grace = absl::Seconds(1);
  options.variant_timeout_s = 0.1;
  runner_ = std::make_unique<JobRunner>(store_.get(), compile_pool_.get(), "", options);
  ASSERT_OK_AND_ASSIGN(int resumed, runner_->ResumeUnfinished());
  EXPECT_EQ(resumed, 1);
  v1::Job last;
  ASSERT_OK(runner_->Watch(job.id(), [&](const v1::JobProgress& progress) {
    last = progress.job();
    return true;
  }));
  EXPECT_EQ(last.state(), v1::SUCCEEDED) << last.error();
  EXPECT_EQ(last.counts().cached_problems(), 1);  // its own entry, from before the stop
  EXPECT_EQ(last.counts().measured(), 8);         // only the unfinished problem
  ASSERT_THAT(last.results(), SizeIs(2));
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> entry,
                       store_->FindEntry({.family = "modes",
                                          .family_hash = "",
                                          .problem = second.problem(),
                                          .device = "Fake GPU"}));
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->job_id(), job.id());
  EXPECT_EQ(entry->config().params().at("MODE"), 0);
}

TEST_F(ScreenJobTest, WithoutACompiledReferenceEveryVariantEndsUnsupportedAndTheProblemFails) {
  ASSERT_OK_AND_ASSIGN(
      v1::KernelFamily family,
      kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes_no_reference.textproto"));
  ASSERT_OK(store_->PutFamily(family, /*builtin=*/false).status());
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->set_family("modes_no_reference");
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  const v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.counts().compile_errors(), 1);  // the reference
  EXPECT_EQ(job.counts().unsupported(), 8);
  EXPECT_THAT(job.results(), SizeIs(0));
  EXPECT_THAT(job.error(), HasSubstr("1 problems have no valid variant"));
  EXPECT_THAT(job.error(), HasSubstr("twice_reference_missing"));
  v1::Problem problem;
  (*problem.mutable_dims())["n"] = 256;
  problem.set_dtype(v1::FLOAT32);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                       store_->ListMeasurements({.family = "modes_no_reference",
                                                 .family_hash = "",
                                                 .problem = problem,
                                                 .device = "Fake GPU"}));
  ASSERT_THAT(measurements, SizeIs(8));
  for (const v1::Measurement& m : measurements) {
    EXPECT_EQ(m.status(), v1::UNSUPPORTED);
    EXPECT_THAT(m.detail(), HasSubstr("not run: the reference kernel 'twice_reference_missing'"));
  }
}

TEST_F(ScreenJobTest, ACompileOnlyJobMeasuresNothing) {
  v1::JobSpec spec = Spec();
  spec.mutable_options()->set_compile_only(true);
  const v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.counts().measured(), 0);
  EXPECT_THAT(job.results(), SizeIs(0));
}

TEST_F(ScreenJobTest, AnArchTheGpuCannotRunIsRefused) {
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->set_arch("sm_80");
  EXPECT_THAT(runner_->Submit(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot run on Fake GPU")));
}

// Two configs within the noise are a declared tie: the first in parameter
// order wins, and a retune keeps whatever the entry holds among the tied.
TEST_F(ScreenJobTest, ATieIsDeclaredAndDecidedTheSameWayEveryTime) {
  setenv("FAKE_WORKER_TIE", "1", 1);
  struct Unset {
    ~Unset() { unsetenv("FAKE_WORKER_TIE"); }
  } unset;  // on every path, an ASSERT's included
  const v1::Job first = Run(Spec());
  ASSERT_EQ(first.state(), v1::SUCCEEDED) << first.error();
  ASSERT_THAT(first.results(), SizeIs(2));
  v1::Entry entry = first.results(0);
  EXPECT_EQ(entry.config().params().at("MODE"), 0);
  EXPECT_TRUE(entry.tie());
  EXPECT_EQ(entry.tied(), 2);

  // The entry now holds MODE 1, tied with MODE 0: a retune keeps it.
  (*entry.mutable_config()->mutable_params())["MODE"] = 1;
  ASSERT_OK(store_->PutEntry(entry));
  const v1::Job again = Run(Spec(/*retune=*/true));
  ASSERT_EQ(again.state(), v1::SUCCEEDED) << again.error();
  bool seen = false;
  for (const v1::Entry& result : again.results()) {
    if (result.problem().dims().at("n") != entry.problem().dims().at("n")) continue;
    seen = true;
    EXPECT_EQ(result.config().params().at("MODE"), 1);
    EXPECT_TRUE(result.tie());
    EXPECT_LT(result.margin(), 0);  // kept although 0.1 % slower
  }
  EXPECT_TRUE(seen);
}

// A store that cannot give back a binary fails the problem and the job; it
// is never taken for a missing compile or a miss.
TEST_F(ScreenJobTest, AStoreErrorFailsTheProblemAndTheJob) {
  v1::JobSpec compile = Spec();
  compile.mutable_options()->set_compile_only(true);
  ASSERT_EQ(Run(compile).state(), v1::SUCCEEDED);
  // Every binary the measuring job will read from the compile cache is now
  // corrupt: GetBinary answers DATA_LOSS.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() + "/cache.db").c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE binaries SET cubin = randomblob(length(cubin))", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  const v1::Job job = Run(Spec());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.error(), HasSubstr("the store failed"));
  EXPECT_THAT(job.error(), HasSubstr("cannot read binary"));
  EXPECT_THAT(job.error(), HasSubstr("2 problems have no valid variant"));
  EXPECT_THAT(job.results(), SizeIs(0));
  EXPECT_EQ(job.counts().measured(), 0);
}

}  // namespace
}  // namespace autotune::service
