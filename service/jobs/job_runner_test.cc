// The job runner's screen phase against a real compile pool (NVRTC) and the
// stand-in profile worker (service/testing/fake_profile_worker.cc), which
// ends each variant the way its MODE param says.
#include "service/jobs/job_runner.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/gpu_lease.h"
#include "base/sanitizers.h"
#include "base/scoped_env.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/profile_task.h"
#include "service/jobs/serial_phase.h"
#include "service/testing/worker_hold.h"
#include "tests/support/sample_bundle.h"

namespace autotune::service {
namespace {

// The serial tasks the fake workers logged (FAKE_WORKER_LOG): "<pid>
// <context> variants=<n> serial" each.
std::vector<std::string> SerialTasks(const std::string& log) {
  std::ifstream in(log);
  std::vector<std::string> serial;
  for (std::string line; std::getline(in, line);) {
    if (absl::EndsWith(line, " serial")) serial.push_back(line);
  }
  return serial;
}

using ::autotune::testing::ScopedEnv;

namespace v1 = ::autotune::v1;
using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::autotune::testing::WorkerHold;
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
    options.compile_ahead = compile_ahead_;
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

  // Submits and waits for the end; `messages` gets every progress message,
  // `phases` every phase seen, and `on_progress` sees every progress.
  v1::Job Run(const v1::JobSpec& spec, std::vector<std::string>* messages = nullptr,
              std::set<std::string>* phases = nullptr,
              const std::function<void(const v1::JobProgress&)>& on_progress = nullptr) {
    absl::StatusOr<v1::Job> job = runner_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    v1::Job last;
    EXPECT_OK(runner_->Watch(job->id(), [&](const v1::JobProgress& progress) {
      last = progress.job();
      if (messages != nullptr && !progress.message().empty()) {
        messages->push_back(progress.message());
      }
      if (phases != nullptr) phases->insert(progress.timing().phase());
      if (on_progress) on_progress(progress);
      return true;
    }));
    return last;
  }

  // Leaves `job` as a daemon killed in the serial phase of its last problem
  // does: that problem's entry (the newest) gone, the job VALIDATING with no
  // results or reports.
  void StopInTheLastSerialPhase(v1::Job& job) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_.path() + "/cache.db").c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    ASSERT_EQ(sqlite3_exec(db,
                           "DELETE FROM entries WHERE id IN (SELECT id FROM entries ORDER BY id "
                           "DESC LIMIT 1)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    job.set_state(v1::VALIDATING);
    job.clear_results();
    job.clear_reports();
    ASSERT_OK(store_->UpdateJob(job));
  }

  // Resumes the one unfinished job `id` and waits for its end.
  v1::Job ResumeAndWait(const std::string& id) {
    absl::StatusOr<int> resumed = runner_->ResumeUnfinished();
    EXPECT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed.value_or(0), 1);
    v1::Job last;
    EXPECT_OK(runner_->Watch(id, [&](const v1::JobProgress& progress) {
      last = progress.job();
      return true;
    }));
    return last;
  }

  void RestartRunner(const std::string& lease_dir = "", int64_t max_job_variants = 0,
                     int max_unfinished = 0) {
    runner_.reset();
    JobRunnerOptions options;
    options.max_job_variants = max_job_variants;
    options.max_unfinished_jobs_per_submitter = max_unfinished;
    options.profile.worker_path = FAKE_PROFILE_WORKER_PATH;
    options.profile.grace = grace_;
    options.profile.lease_dir = lease_dir;
    options.variant_timeout_s = 0.1;
    options.compile_ahead = compile_ahead_;
    runner_ = std::make_unique<JobRunner>(store_.get(), compile_pool_.get(), "", options);
  }

  // Registers `name`: the modes family with MODE 0 and 1 only and, for
  // each of `pads`, a parameter the kernel never reads with that many
  // values (copies of each MODE); returns a job of its problem n=256 fp32
  // under a model search.
  v1::JobSpec PaddedModesJob(const std::string& name,
                             const std::vector<std::pair<std::string, int>>& pads) {
    absl::StatusOr<v1::KernelFamily> family =
        kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes.textproto");
    EXPECT_TRUE(family.ok()) << family.status();
    if (!family.ok()) return {};
    family->set_name(name);
    family->mutable_params(0)->clear_values();
    family->mutable_params(0)->add_values(0);
    family->mutable_params(0)->add_values(1);
    for (const auto& [pad_name, count] : pads) {
      v1::TunableParameter* pad = family->add_params();
      pad->set_name(pad_name);
      for (int i = 0; i < count; ++i) pad->add_values(i);
    }
    EXPECT_OK(store_->PutFamily(*family, /*builtin=*/false).status());
    v1::JobSpec spec;
    v1::ManifestItem* item = spec.mutable_manifest()->add_items();
    item->set_family(name);
    item->add_dims()->set_name("n");
    item->mutable_dims(0)->add_values(256);
    item->add_dtypes(v1::FLOAT32);
    spec.mutable_options()->mutable_search()->set_strategy(v1::MODEL);
    return spec;
  }

  // How long past a variant's launch timeout RestartRunner's workers may
  // take to answer before they are taken for hung: short, for the MODE 3
  // variants. A test whose worker holds (WorkerHold) for longer, and whose
  // family has no MODE 3, lengthens it.
  absl::Duration grace_ = absl::Seconds(1);
  int compile_ahead_ = kDefaultCompileAhead;  // RestartRunner's
  TempDir dir_;
  std::unique_ptr<cache::Store> store_;
  std::unique_ptr<CompilePool> compile_pool_;
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(ScreenJobTest, ASearchMeasuresOnlyItsBudgetAndTheReportSaysHowItWent) {
  v1::JobSpec spec = Spec();
  // The first two configs in space order: MODE 0 (10 us) and 1 (20 us).
  spec.mutable_options()->mutable_search()->set_strategy(v1::EXHAUSTIVE);
  spec.mutable_options()->mutable_search()->set_max_variants(2);
  std::vector<std::string> messages;
  const v1::Job job = Run(spec, &messages);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_EQ(job.counts().variants(), 16);
  EXPECT_EQ(job.counts().search_budget(), 4);
  EXPECT_EQ(job.counts().measured(), 4);
  EXPECT_EQ(job.counts().ok(), 4);
  EXPECT_EQ(job.counts().compiles(), 3);  // MODE 0, MODE 1 and the reference
  ASSERT_THAT(job.results(), SizeIs(2));
  for (const v1::Entry& entry : job.results()) {
    EXPECT_EQ(entry.config().params().at("MODE"), 0);
    EXPECT_EQ(entry.search(), "exhaustive: 2 of 8 variants measured (25.0%)");
  }
  ASSERT_THAT(job.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : job.reports()) {
    const v1::SearchReport& search = report.search();
    EXPECT_EQ(search.strategy(), v1::EXHAUSTIVE);
    EXPECT_EQ(search.space(), 8);
    EXPECT_EQ(search.budget(), 2);
    EXPECT_EQ(search.measured(), 2);
    EXPECT_EQ(search.rounds(), 1);
    ASSERT_THAT(search.best(), SizeIs(1));  // MODE 0, first, was never beaten
    EXPECT_EQ(search.best(0).measured(), 1);
    EXPECT_DOUBLE_EQ(search.best(0).median_us(), 10);
  }
  // The variants never proposed were neither compiled nor stored.
  for (const v1::Entry& entry : job.results()) {
    ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> stored,
                         store_->ListMeasurements({.family = "modes",
                                                   .family_hash = entry.family_hash(),
                                                   .problem = entry.problem(),
                                                   .device = "Fake GPU"}));
    for (const v1::Measurement& m : stored) EXPECT_LE(m.config().params().at("MODE"), 1);
  }
}

// A time budget ends a search between rounds, after its first: a model
// search over 40 variants (16 in its first round, 8 a round after) stops
// after one round when its time is up, and says so.
TEST_F(ScreenJobTest, ATimeBudgetEndsTheSearchAfterTheRoundThatReachedIt) {
  v1::JobSpec spec = PaddedModesJob("modes_wide", {{"PAD", 20}});
  v1::SearchOptions* search = spec.mutable_options()->mutable_search();
  search->set_seed(3);

  const v1::Job unlimited = Run(spec);
  ASSERT_EQ(unlimited.state(), v1::SUCCEEDED) << unlimited.error();
  ASSERT_THAT(unlimited.reports(), SizeIs(1));
  EXPECT_GT(unlimited.reports(0).search().rounds(), 1);
  EXPECT_GT(unlimited.reports(0).search().measured(), 16);
  EXPECT_FALSE(unlimited.reports(0).search().out_of_time());

  search->set_max_seconds(0.001);
  spec.mutable_options()->set_retune(true);
  const v1::Job timed = Run(spec);
  ASSERT_EQ(timed.state(), v1::SUCCEEDED) << timed.error();
  ASSERT_THAT(timed.reports(), SizeIs(1));
  const v1::SearchReport& report = timed.reports(0).search();
  EXPECT_TRUE(report.out_of_time());
  EXPECT_EQ(report.rounds(), 1);
  EXPECT_EQ(report.measured(), 16);
  EXPECT_THAT(
      timed.reports(0).entry().search(),
      HasSubstr("16 of 40 variants measured (40.0%); stopped at its time budget of 0.001 s"));
}

// A problem of 100,000 configs: planned, searched within its budget, and
// only what the search measured is compiled and stored. Under ASan, whose
// build plans 100k configs in a minute, 10,000 cover the same code.
constexpr int kHugePads = kAddressSanitizerBuild ? 100 : 1000;
constexpr int64_t kHugeSpace = int64_t{2} * kHugePads * 50;

TEST_F(ScreenJobTest, AProblemOf100kConfigsCompilesAndStoresOnlyWhatItsSearchMeasured) {
  v1::JobSpec spec = PaddedModesJob("modes_huge", {{"PAD", kHugePads}, {"TILE", 50}});
  v1::SearchOptions* search = spec.mutable_options()->mutable_search();
  search->set_max_variants(40);
  search->set_seed(5);

  std::vector<std::string> messages;
  const v1::Job job = Run(spec, &messages);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_EQ(job.counts().variants(), kHugeSpace);
  ASSERT_THAT(job.reports(), SizeIs(1));
  const v1::SearchReport& report = job.reports(0).search();
  EXPECT_EQ(report.space(), kHugeSpace);
  EXPECT_GT(report.measured(), 16);
  EXPECT_LE(report.measured(), 40);
  EXPECT_EQ(job.counts().measured(), report.measured());
  EXPECT_EQ(job.counts().compiles(), report.measured() + 1);  // and the reference
  EXPECT_THAT(job.reports(0).entry().search(),
              HasSubstr(absl::StrCat(report.measured(), " of ", kHugeSpace, " variants measured")));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> stored,
                       store_->ListMeasurements({.family = "modes_huge",
                                                 .family_hash = job.results(0).family_hash(),
                                                 .problem = job.results(0).problem(),
                                                 .device = "Fake GPU"}));
  ASSERT_OK_AND_ASSIGN(cache::FamilyRecord family, store_->GetFamily("modes_huge"));
  std::set<std::string> screened;  // the serial phase re-measures a few of them
  for (const v1::Measurement& m : stored) {
    if (m.phase() == v1::SCREEN) screened.insert(kernels::ConfigLabel(family.family, m.config()));
  }
  EXPECT_EQ(static_cast<int64_t>(screened.size()), report.measured());
  // Besides the screens, the serial timings: every candidate in the first
  // worker process, the leaders again in the second.
  const int64_t serial = static_cast<int64_t>(stored.size()) - report.measured();
  EXPECT_GE(serial, job.results(0).candidates() + 2);
  EXPECT_LE(serial, 2 * job.results(0).candidates());
  // Its later rounds were compiled while the earlier ones were measured;
  // what was compiled ahead and never proposed was neither counted nor
  // stored (above: compiles and measurements are the measured variants').
  EXPECT_GT(report.rounds(), 1);
  EXPECT_THAT(messages, ::testing::Contains(HasSubstr("compiled ahead of their rounds: ")));
}

// A model search over 40 variants runs several rounds: compiled ahead by
// default, each round only what it proposed with compile_ahead 0.
TEST_F(ScreenJobTest, CompilingAheadCanBeTurnedOff) {
  v1::JobSpec spec = PaddedModesJob("modes_wide", {{"PAD", 20}});
  std::vector<std::string> messages;
  const v1::Job ahead = Run(spec, &messages);
  ASSERT_EQ(ahead.state(), v1::SUCCEEDED) << ahead.error();
  ASSERT_THAT(ahead.reports(), SizeIs(1));
  EXPECT_GT(ahead.reports(0).search().rounds(), 1);
  EXPECT_THAT(messages, ::testing::Contains(HasSubstr("compiled ahead of their rounds")));

  compile_ahead_ = 0;
  RestartRunner();
  spec.mutable_options()->set_retune(true);
  messages.clear();
  const v1::Job off = Run(spec, &messages);
  ASSERT_EQ(off.state(), v1::SUCCEEDED) << off.error();
  EXPECT_GT(off.reports(0).search().rounds(), 1);
  EXPECT_THAT(messages, ::testing::Not(::testing::Contains(HasSubstr("compiled ahead"))));
}

TEST_F(ScreenJobTest, AnItemsModelSearchReplacesTheJobsAndEndsInItsStatusesAndReport) {
  v1::JobSpec spec = Spec();
  spec.mutable_options()->mutable_search()->set_strategy(v1::RANDOM);
  spec.mutable_options()->mutable_search()->set_max_variants(1);
  v1::SearchOptions* item = spec.mutable_manifest()->mutable_items(0)->mutable_search();
  item->set_strategy(v1::MODEL);
  item->set_seed(4);
  const v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  // A space of 8 is one round of the model's first sample: all of it.
  EXPECT_EQ(job.counts().measured(), 16);
  ASSERT_THAT(job.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : job.reports()) {
    EXPECT_EQ(report.search().strategy(), v1::MODEL);
    EXPECT_EQ(report.search().seed(), 4u);
    EXPECT_EQ(report.search().measured(), 8);
    EXPECT_EQ(report.entry().config().params().at("MODE"), 0);
    EXPECT_EQ(report.entry().search(), "model, seed 4: 8 of 8 variants measured");
  }
}

// A model search starts from the configs that won tuned problems of the
// family on this GPU model: none for the first job, MODE 0 (the winner of
// both problems) once they are tuned.
TEST_F(ScreenJobTest, AModelSearchIsSeededWithTheWinnersOfTunedProblems) {
  v1::JobSpec spec = Spec();
  spec.mutable_options()->mutable_search()->set_strategy(v1::MODEL);
  const v1::Job first = Run(spec);
  ASSERT_EQ(first.state(), v1::SUCCEEDED) << first.error();
  ASSERT_THAT(first.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : first.reports()) {
    EXPECT_EQ(report.search().hints(), 0);
  }
  v1::JobSpec again = Spec(/*retune=*/true);
  *again.mutable_options()->mutable_search() = spec.options().search();
  const v1::Job second = Run(again);
  ASSERT_EQ(second.state(), v1::SUCCEEDED) << second.error();
  ASSERT_THAT(second.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : second.reports()) {
    EXPECT_EQ(report.search().hints(), 1);
    EXPECT_THAT(report.entry().search(),
                HasSubstr("seeded with 1 winning config of tuned problems"));
  }
}

// Each problem's report says where its screen's time went: the worker's
// stages of every variant it measured, the task's set-up, and the daemon's
// own side.
TEST_F(ScreenJobTest, TheReportSaysWhereTheScreensTimeWent) {
  const v1::Job job = Run(Spec());
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : job.reports()) {
    const v1::ScreenTime& time = report.screen_time();
    EXPECT_EQ(time.variants(), 8);
    // The fake worker's stages of the two OK variants (MODE 0 and 1).
    EXPECT_DOUBLE_EQ(time.load_s(), 0.002);
    EXPECT_DOUBLE_EQ(time.validate_s(), 0.004);
    EXPECT_DOUBLE_EQ(time.graph_s(), 0.008);
    EXPECT_DOUBLE_EQ(time.warmup_s(), 0.006);
    EXPECT_DOUBLE_EQ(time.samples_s(), 0.016);
    EXPECT_DOUBLE_EQ(time.gpu_s(), 0.012);
    EXPECT_GT(time.worker_s(), 0);
    EXPECT_GT(time.store_s(), 0);
    EXPECT_GE(time.wall_s(), time.worker_s() + time.cubins_s());
  }
}

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
    EXPECT_EQ(entry.phase(), v1::SERIAL_VALIDATION);
    EXPECT_EQ(entry.candidates(), 2);  // the two valid ones
    // Timed in two worker processes of 6 rounds each: the second the leader
    // and the runner-up again.
    EXPECT_EQ(entry.rounds(), 12);
    EXPECT_EQ(entry.worker_processes(), 2);
    EXPECT_GT(entry.noise(), 0);
    EXPECT_LE(entry.noise(), 0.001);
    EXPECT_EQ(entry.bound(), 0);  // faster than the other beyond doubt
    EXPECT_FALSE(entry.tie());
    EXPECT_THAT(entry.choice(), HasSubstr("the fastest; the next, MODE=1, is "));
    EXPECT_THAT(entry.choice(), HasSubstr("over 12 rounds in 2 worker processes; at most 0.00% "
                                          "slower than any candidate"));
    EXPECT_FALSE(entry.contended());
    EXPECT_FALSE(entry.throttled());
    EXPECT_DOUBLE_EQ(entry.limits().copy_gbps(), 4000);
    EXPECT_EQ(entry.limits().default_sm_clock_mhz(), 1980);
    EXPECT_DOUBLE_EQ(entry.limits().max_power_w(), 612);
    EXPECT_DOUBLE_EQ(entry.limits().power_limit_w(), 700);
    EXPECT_EQ(entry.limits().max_temperature_c(), 64);
    EXPECT_THAT(entry.stop(), HasSubstr("worker process 1: every candidate separated from the "
                                        "fastest or within 0.50% of it after 6 rounds; worker "
                                        "process 2: "));
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
    ASSERT_THAT(measurements, SizeIs(12));  // 8 screened, 2 timed serially twice
    std::map<int64_t, v1::Measurement> by_mode;
    std::map<int64_t, v1::Measurement> serial;
    for (const v1::Measurement& m : measurements) {
      (m.phase() == v1::SERIAL_VALIDATION ? serial : by_mode)[m.config().params().at("MODE")] = m;
    }
    ASSERT_THAT(serial, SizeIs(2));
    EXPECT_DOUBLE_EQ(serial[0].timing().median_us(), 10);
    EXPECT_EQ(serial[0].rounds(), 6);
    EXPECT_THAT(serial[0].detail(), HasSubstr("interleaved rounds with 1 other candidates"));
    EXPECT_THAT(serial[0].detail(), HasSubstr("serial, worker process 2 of 2"));
    EXPECT_DOUBLE_EQ(serial[1].timing().median_us(), 20);
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

// The screen only ranks: a variant that screened fastest but is slower when
// timed serially does not win.
TEST_F(ScreenJobTest, TheSerialPhaseDecidesNotTheScreen) {
  ScopedEnv lies("FAKE_WORKER_SCREEN_LIES", "1");
  const v1::Job job = Run(Spec());
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_EQ(job.counts().measured(), 16);  // serial timings are not more variants
  ASSERT_THAT(job.results(), SizeIs(2));
  const v1::Entry& entry = job.results(0);
  EXPECT_EQ(entry.config().params().at("MODE"), 0);
  EXPECT_DOUBLE_EQ(entry.timing().median_us(), 10);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                       store_->ListMeasurements({.family = "modes",
                                                 .family_hash = entry.family_hash(),
                                                 .problem = entry.problem(),
                                                 .device = "Fake GPU"}));
  bool screened_fast = false;
  for (const v1::Measurement& m : measurements) {
    if (m.config().params().at("MODE") == 1 && m.phase() == v1::SCREEN) {
      screened_fast = m.timing().median_us() == 5;
    }
  }
  EXPECT_TRUE(screened_fast);
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

  RestartRunner();
  const v1::Job last = ResumeAndWait(job.id());
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

// A family that gains a parameter value screens only the new variants: the
// others compile to the binaries the older version screened.
TEST_F(ScreenJobTest, NewParameterValuesAreScreenedAloneAndTheOldBestIsACandidate) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                       kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes.textproto"));
  const auto with_modes = [&](std::vector<int64_t> modes) {
    v1::KernelFamily version = family;
    version.mutable_params(0)->clear_values();
    for (int64_t mode : modes) version.mutable_params(0)->add_values(mode);
    return version;
  };
  ASSERT_OK_AND_ASSIGN(cache::FamilyRecord old_version,
                       store_->PutFamily(with_modes({1, 2, 6}), /*builtin=*/false));
  const v1::Job first = Run(Spec());
  ASSERT_EQ(first.state(), v1::SUCCEEDED) << first.error();
  EXPECT_EQ(first.counts().measured(), 6);
  EXPECT_EQ(first.counts().carried(), 0);
  ASSERT_THAT(first.results(), SizeIs(2));
  EXPECT_EQ(first.results(0).config().params().at("MODE"), 1);

  // MODE=0, the new value, is faster.
  ASSERT_OK_AND_ASSIGN(cache::FamilyRecord new_version,
                       store_->PutFamily(with_modes({0, 1, 2, 6}), /*builtin=*/false));
  std::vector<std::string> messages;
  const v1::Job second = Run(Spec(), &messages);
  ASSERT_EQ(second.state(), v1::SUCCEEDED) << second.error();
  EXPECT_EQ(second.counts().cached_problems(), 0);
  EXPECT_EQ(second.counts().measured(), 2);  // MODE=0 of each problem
  EXPECT_EQ(second.counts().carried(), 6);
  EXPECT_EQ(second.counts().ok(), 4);
  EXPECT_EQ(second.counts().wrong_result(), 2);
  ASSERT_THAT(second.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : second.reports()) {
    EXPECT_EQ(report.entry().config().params().at("MODE"), 0);
    EXPECT_EQ(report.entry().family_hash(), new_version.content_hash);
    EXPECT_EQ(report.screens_carried(), 3);
    EXPECT_EQ(report.screens_carried_from(), old_version.content_hash);
    EXPECT_EQ(report.previous().config().params().at("MODE"), 1);
    EXPECT_EQ(report.screened(), 2);
    EXPECT_EQ(report.status_counts().at("WRONG_RESULT"), 1);
  }
  EXPECT_THAT(messages, ::testing::Contains(HasSubstr("3 screens carried from family version")));
  // The carried screens are stored under the new version, marked, with the
  // binary and the old job named.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                       store_->ListMeasurements({.family = "modes",
                                                 .family_hash = new_version.content_hash,
                                                 .problem = second.results(0).problem(),
                                                 .device = "Fake GPU"}));
  int carried = 0;
  for (const v1::Measurement& m : measurements) {
    if (m.phase() != v1::SCREEN) continue;
    EXPECT_EQ(m.carried(), m.config().params().at("MODE") != 0) << m.ShortDebugString();
    if (!m.carried()) continue;
    ++carried;
    EXPECT_EQ(m.job_id(), second.id());
    EXPECT_THAT(m.detail(), HasSubstr(absl::StrCat("carried from the screen of job ", first.id())));
    EXPECT_FALSE(m.binary_sha256().empty());
  }
  EXPECT_EQ(carried, 3);

  // A version that changes what a variant computes carries nothing.
  v1::KernelFamily stricter = with_modes({0, 1, 2, 6});
  stricter.mutable_tolerances(0)->set_atol(1e-9);
  ASSERT_OK(store_->PutFamily(stricter, /*builtin=*/false).status());
  const v1::Job third = Run(Spec());
  ASSERT_EQ(third.state(), v1::SUCCEEDED) << third.error();
  EXPECT_EQ(third.counts().carried(), 0);
  EXPECT_EQ(third.counts().measured(), 8);
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
  ASSERT_EQ(job.state(), v1::FAILED);
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
  ASSERT_OK(testing::CorruptEveryStoredBinary(dir_.path() + "/cache.db"));

  const v1::Job job = Run(Spec());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.error(), HasSubstr("the store failed"));
  EXPECT_THAT(job.error(), HasSubstr("cannot read binary"));
  EXPECT_THAT(job.error(), HasSubstr("2 problems have no valid variant"));
  EXPECT_THAT(job.results(), SizeIs(0));
  EXPECT_EQ(job.counts().measured(), 0);
}

// Contention: the serial phase waits for a quiet GPU and says why.
TEST_F(ScreenJobTest, TheSerialPhaseWaitsForAQuietGpu) {
  ScopedEnv foreign("FAKE_WORKER_FOREIGN", "4121:2147483648");
  // The screen's probe and the serial phase's first two see it.
  ScopedEnv probes("FAKE_WORKER_FOREIGN_PROBES", "3");
  std::vector<std::string> messages;
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  const v1::Job job = Run(spec, &messages);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.results(), SizeIs(1));
  EXPECT_FALSE(job.results(0).contended());
  EXPECT_GT(job.timing().waited_s(), 1);
  ASSERT_THAT(job.reports(), SizeIs(1));
  EXPECT_THAT(job.reports(0).screen_contention(), HasSubstr("pid 4121 (2.0 GiB)"));
  bool said = false;
  for (const std::string& m : messages) {
    said = said || (absl::StrContains(m, "waiting for a quiet GPU 0: pid 4121 (2.0 GiB)") &&
                    absl::StrContains(m, "utilization 97%"));
  }
  EXPECT_TRUE(said);
}

TEST_F(ScreenJobTest, AGpuThatStaysBusyFailsTheProblemUnlessForced) {
  ScopedEnv foreign("FAKE_WORKER_FOREIGN", "4121:2147483648");
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  spec.mutable_options()->set_quiet_wait_s(1.5);
  const v1::Job waited = Run(spec);
  ASSERT_EQ(waited.state(), v1::FAILED) << waited.error();
  EXPECT_THAT(waited.results(), SizeIs(0));
  EXPECT_THAT(waited.error(), HasSubstr("not quiet for the serial phase within 1.5s"));
  EXPECT_THAT(waited.error(), HasSubstr("pid 4121"));
  EXPECT_THAT(waited.error(), HasSubstr("measure anyway with JobOptions.force"));
  ASSERT_THAT(waited.reports(), SizeIs(1));
  EXPECT_FALSE(waited.reports(0).has_entry());
  EXPECT_THAT(waited.reports(0).error(), HasSubstr("not quiet"));

  spec.mutable_options()->set_force(true);
  const v1::Job forced = Run(spec);
  ASSERT_EQ(forced.state(), v1::SUCCEEDED) << forced.error();
  ASSERT_THAT(forced.results(), SizeIs(1));
  const v1::Entry& entry = forced.results(0);
  EXPECT_TRUE(entry.contended());
  EXPECT_THAT(entry.contention(), HasSubstr("pid 4121 (2.0 GiB); utilization 97%"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                       store_->ListMeasurements({.family = "modes",
                                                 .family_hash = entry.family_hash(),
                                                 .problem = entry.problem(),
                                                 .device = "Fake GPU"}));
  int contended = 0;
  for (const v1::Measurement& m : measurements) contended += m.contended() ? 1 : 0;
  EXPECT_EQ(contended, 4);  // both serial timings, in both worker processes
}

// Rounds too noisy to resolve two candidates of equal medians: the leaders
// are timed again in fresh worker processes, up to four, and the entry
// states the bound it could reach (above the band), not a tie.
TEST_F(ScreenJobTest, UnresolvedLeadersAreTimedAgainInFreshWorkersAndTheBoundSaysSo) {
  const std::string log = dir_.path() + "/worker.log";
  ScopedEnv logged("FAKE_WORKER_LOG", log);
  ScopedEnv tie("FAKE_WORKER_TIE", "1");
  ScopedEnv noisy("FAKE_WORKER_NOISY", "1");
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  const v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.results(), SizeIs(1));
  const v1::Entry& entry = job.results(0);
  EXPECT_EQ(entry.worker_processes(), 4);
  EXPECT_EQ(entry.rounds(), 24);
  EXPECT_GT(entry.bound(), 0.005);
  EXPECT_FALSE(entry.tie());  // not within the band: the leader, not a tie-break
  EXPECT_THAT(entry.choice(), HasSubstr("1 candidates not resolved within the rounds"));
  EXPECT_THAT(entry.stop(), HasSubstr("worker process 4: "));
  std::set<std::string> serial_pids;
  for (const std::string& line : SerialTasks(log))
    serial_pids.insert(line.substr(0, line.find(' ')));
  EXPECT_EQ(serial_pids.size(), 4u);
}

// A GPU held below its clocks (the worker kept too few rounds above the
// throttle fraction before its time cap) is detected, not measured: the
// rounds are measured again, then the problem fails naming the clocks and
// why; with JobOptions.force the entry is stored marked throttled.
TEST_F(ScreenJobTest, AThrottledGpuIsMeasuredAgainThenRefusedUnlessForced) {
  const std::string log = dir_.path() + "/worker.log";
  ScopedEnv logged("FAKE_WORKER_LOG", log);
  ScopedEnv throttled("FAKE_WORKER_THROTTLED", "1");
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  std::vector<std::string> messages;
  const v1::Job refused = Run(spec, &messages);
  ASSERT_EQ(refused.state(), v1::FAILED) << refused.error();
  EXPECT_THAT(refused.results(), SizeIs(0));
  EXPECT_THAT(refused.error(),
              HasSubstr("ran throttled in the serial rounds: SM clock down to 990 MHz of 1980, 9 "
                        "rounds dropped (power cap, thermal slowdown)"));
  EXPECT_THAT(refused.error(), HasSubstr("JobOptions.force"));
  const size_t serial_tasks = SerialTasks(log).size();
  EXPECT_EQ(serial_tasks, static_cast<size_t>(1 + kContendedRetries));
  bool said = false;
  for (const std::string& m : messages) said = said || absl::StrContains(m, "measuring again");
  EXPECT_TRUE(said);

  spec.mutable_options()->set_force(true);
  const v1::Job forced = Run(spec);
  ASSERT_EQ(forced.state(), v1::SUCCEEDED) << forced.error();
  ASSERT_THAT(forced.results(), SizeIs(1));
  const v1::Entry& entry = forced.results(0);
  EXPECT_TRUE(entry.throttled());
  EXPECT_EQ(entry.throttled_rounds(), 18);  // 9 in each worker process
  EXPECT_EQ(entry.limits().min_sm_clock_mhz(), 990);
  EXPECT_EQ(entry.limits().clocks_events(), "power cap, thermal slowdown");
}

// A process that comes during the rounds: they are measured again once the
// GPU is quiet, and the entry is clean.
TEST_F(ScreenJobTest, RoundsWithAForeignProcessAreMeasuredAgain) {
  const std::string log = dir_.path() + "/worker.log";
  ScopedEnv logged("FAKE_WORKER_LOG", log);
  ScopedEnv foreign("FAKE_WORKER_FOREIGN", "77:0");
  ScopedEnv probes("FAKE_WORKER_FOREIGN_PROBES", "0");
  ScopedEnv serials("FAKE_WORKER_FOREIGN_SERIALS", "1");
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  std::vector<std::string> messages;
  const v1::Job job = Run(spec, &messages);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.results(), SizeIs(1));
  EXPECT_FALSE(job.results(0).contended());
  const size_t serial_tasks = SerialTasks(log).size();
  // Each worker process's first serial task is contended (the fake counts
  // per process): measured again in the first, and in the second (fresh)
  // one.
  EXPECT_EQ(serial_tasks, 4u);
  bool said = false;
  for (const std::string& m : messages) said = said || absl::StrContains(m, "measuring again");
  EXPECT_TRUE(said);
}

// Valid in the screen, wrong when validated again (a race), or faulting in
// the rounds: the candidate ends in that status and another wins.
TEST_F(ScreenJobTest, ACandidateThatFailsTheSerialPhaseIsDropped) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                       kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes_serial.textproto"));
  ASSERT_OK(store_->PutFamily(family, /*builtin=*/false).status());
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->set_family("modes_serial");
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  const v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.results(), SizeIs(1));
  const v1::Entry& entry = job.results(0);
  EXPECT_EQ(entry.config().params().at("MODE"), 0);
  EXPECT_EQ(entry.candidates(), 2);  // 0 and the default, 1
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> measurements,
                       store_->ListMeasurements({.family = "modes_serial",
                                                 .family_hash = entry.family_hash(),
                                                 .problem = entry.problem(),
                                                 .device = "Fake GPU"}));
  std::map<int64_t, v1::VariantStatus> serial;
  for (const v1::Measurement& m : measurements) {
    if (m.phase() == v1::SERIAL_VALIDATION) serial[m.config().params().at("MODE")] = m.status();
  }
  EXPECT_EQ(serial[8], v1::WRONG_RESULT);
  EXPECT_EQ(serial[9], v1::FAULT);
  EXPECT_EQ(serial[0], v1::OK);
  ASSERT_THAT(job.reports(), SizeIs(1));
  const v1::ProblemReport& report = job.reports(0);
  EXPECT_DOUBLE_EQ(report.default_median_us(), 20);
  EXPECT_DOUBLE_EQ(report.speedup(), 2);
  EXPECT_EQ(report.status_counts().at("OK"), 2);
  EXPECT_EQ(report.status_counts().at("WRONG_RESULT"), 1);
  EXPECT_EQ(report.status_counts().at("FAULT"), 1);
  EXPECT_EQ(report.screened(), 4);
}

TEST_F(ScreenJobTest, ReportsTimingAndPhasesAndComparesWithTheCache) {
  // The serial phase of two problems is over in moments: a watcher that
  // comes late sees the states after it folded into one. It is held at its
  // first validation until the watcher has seen it.
  WorkerHold serial(dir_.path() + "/hold", "serial", 1);
  ScopedEnv held("FAKE_WORKER_HOLD", serial.spec());
  std::set<std::string> phases;
  const v1::Job first = Run(Spec(), nullptr, &phases, [&](const v1::JobProgress& progress) {
    if (progress.timing().phase() == "serial") serial.Go();
  });
  ASSERT_EQ(first.state(), v1::SUCCEEDED) << first.error();
  EXPECT_THAT(phases, ::testing::IsSupersetOf({"compile", "screen", "serial", "done"}));
  EXPECT_EQ(first.timing().phase(), "done");
  EXPECT_GT(first.timing().elapsed_s(), 0);
  EXPECT_GT(first.timing().screen_s(), 0);
  EXPECT_GT(first.timing().serial_s(), 0);
  ASSERT_THAT(first.reports(), SizeIs(2));
  for (const v1::ProblemReport& report : first.reports()) {
    EXPECT_TRUE(report.has_entry());
    EXPECT_FALSE(report.has_previous());
    EXPECT_FALSE(report.cached());
    EXPECT_EQ(report.status_counts().at("OK"), 2);
    EXPECT_EQ(report.status_counts().at("TIMEOUT"), 2);
  }
  const v1::Job rerun = Run(Spec());
  ASSERT_THAT(rerun.reports(), SizeIs(2));
  EXPECT_TRUE(rerun.reports(0).cached());

  // The cached entry claims 8 us; the retune measures 10: a regression
  // beyond the noise, said as such.
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> stored,
                       store_->FindEntry({.family = "modes",
                                          .family_hash = "",
                                          .problem = first.results(0).problem(),
                                          .device = "Fake GPU"}));
  ASSERT_TRUE(stored.has_value());
  stored->mutable_timing()->set_median_us(8);
  ASSERT_OK(store_->PutEntry(*stored));
  const v1::Job retune = Run(Spec(/*retune=*/true));
  ASSERT_EQ(retune.state(), v1::SUCCEEDED) << retune.error();
  int compared = 0;
  for (const v1::ProblemReport& report : retune.reports()) {
    ASSERT_TRUE(report.has_previous());
    EXPECT_EQ(report.previous_differs(), "earlier run");
    if (report.problem().dims().at("n") == stored->problem().dims().at("n")) {
      ++compared;
      EXPECT_DOUBLE_EQ(report.previous_ratio(), 0.8);
      EXPECT_TRUE(report.regression());
    } else {
      EXPECT_DOUBLE_EQ(report.previous_ratio(), 1);
      EXPECT_FALSE(report.regression());
    }
  }
  EXPECT_EQ(compared, 1);
}

// A job stopped after its screen resumes with the serial phase only.
TEST(PhaseRatesTest, AreWallSecondsPerUnitOfEachPhase) {
  v1::Job job;
  job.mutable_counts()->set_compiles(10);
  job.mutable_counts()->set_variants(100);
  job.mutable_counts()->set_problems(5);
  job.mutable_counts()->set_cached_problems(1);
  job.mutable_timing()->set_compile_s(2);
  job.mutable_timing()->set_screen_s(5);
  job.mutable_timing()->set_serial_s(8);
  const PhaseRates rates = PhaseRates::Of(job);
  EXPECT_DOUBLE_EQ(rates.compile_s, 0.2);
  EXPECT_DOUBLE_EQ(rates.screen_s, 0.05);
  EXPECT_DOUBLE_EQ(rates.serial_s, 2);
  // A compile-only job measures only the compile rate.
  v1::Job compile_only = job;
  compile_only.mutable_timing()->set_compile_s(1);
  compile_only.mutable_timing()->clear_screen_s();
  compile_only.mutable_timing()->clear_serial_s();
  const PhaseRates updated = rates.Updated(PhaseRates::Of(compile_only));
  EXPECT_DOUBLE_EQ(updated.compile_s, 0.1);
  EXPECT_DOUBLE_EQ(updated.screen_s, 0.05);
  EXPECT_DOUBLE_EQ(updated.serial_s, 2);
}

TEST_F(ScreenJobTest, TheEtaCoversEveryPhaseOnceAJobHasRunThem) {
  // The first progress of each job: nothing of it has run yet.
  const auto first_timing = [&](const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = runner_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    std::vector<v1::JobTiming> timings;
    EXPECT_OK(runner_->Watch(job.value_or(v1::Job()).id(), [&](const v1::JobProgress& progress) {
      if (!progress.timing().phase().empty()) timings.push_back(progress.timing());
      return true;
    }));
    EXPECT_EQ(timings.back().phase(), "done");
    // The end counts the job's problems, all done (not "done 0/0").
    EXPECT_GT(timings.back().total(), 0);
    EXPECT_EQ(timings.back().done(), timings.back().total());
    return timings.front();  // after "queued", which has none
  };
  const v1::JobTiming fresh = first_timing(Spec());
  EXPECT_EQ(fresh.phase(), "compile");
  EXPECT_TRUE(fresh.eta_partial());  // no job has run here before
  EXPECT_EQ(fresh.eta_s(), 0);

  const v1::JobTiming second = first_timing(Spec(/*retune=*/true));
  EXPECT_FALSE(second.eta_partial());
  EXPECT_GT(second.eta_s(), 0);

  // A restarted daemon learns the rates from the jobs in the store.
  RestartRunner();
  const v1::JobTiming restarted = first_timing(Spec(/*retune=*/true));
  EXPECT_FALSE(restarted.eta_partial());
  EXPECT_GT(restarted.eta_s(), 0);
}

// Jobs running at once take turns on the GPU problem by problem: a small
// job submitted while a large one measures ends long before it. The large
// one is held at its second screened variant until the small one has
// compiled and goes for the GPU, so the small one's turns come while the
// large one has nearly all its problems ahead, however slow the machine.
TEST_F(ScreenJobTest, ASmallJobIsNotQueuedBehindALargeOne) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                       kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes.textproto"));
  family.mutable_params(0)->clear_values();
  for (int64_t mode : {0, 1}) family.mutable_params(0)->add_values(mode);
  ASSERT_OK(store_->PutFamily(family, /*builtin=*/false).status());
  WorkerHold hold(dir_.path() + "/hold", "screen", 2);
  ScopedEnv held("FAKE_WORKER_HOLD", hold.spec());
  grace_ = absl::Minutes(2);  // MODE 0 and 1 never hang
  RestartRunner();            // its workers start with the variable set

  v1::JobSpec large = Spec();
  v1::ManifestItem::DimValues* n = large.mutable_manifest()->mutable_items(0)->mutable_dims(0);
  n->clear_values();
  for (int64_t value = 1; value <= 12; ++value) n->add_values(value * 256);
  v1::JobSpec small = Spec();
  small.mutable_manifest()->mutable_items(0)->mutable_dims(0)->clear_values();
  small.mutable_manifest()->mutable_items(0)->mutable_dims(0)->add_values(100000);

  ASSERT_OK_AND_ASSIGN(v1::Job first, runner_->Submit(large));
  ASSERT_TRUE(hold.WaitHeld()) << "the large job never screened its second variant";
  // Once the large job measures, the small one comes.
  bool measuring = false;
  ASSERT_OK(runner_->Watch(first.id(), [&](const v1::JobProgress& progress) {
    measuring = progress.job().counts().measured() > 0;
    return !measuring;
  }));
  ASSERT_TRUE(measuring);
  ASSERT_OK_AND_ASSIGN(v1::Job second, runner_->Submit(small));
  // It compiles while the large job cannot go on, then waits for the GPU.
  ASSERT_OK(runner_->Watch(second.id(), [&](const v1::JobProgress& progress) {
    return !absl::StrContains(progress.message(), "validating and timing the variants");
  }));
  hold.Go();
  v1::Job small_end;
  ASSERT_OK(runner_->Watch(second.id(), [&](const v1::JobProgress& progress) {
    small_end = progress.job();
    return true;
  }));
  ASSERT_EQ(small_end.state(), v1::SUCCEEDED) << small_end.error();
  // The large job is still measuring when the small one has ended.
  ASSERT_OK_AND_ASSIGN(v1::Job large_now, store_->GetJob(first.id()));
  v1::Job large_end;
  ASSERT_OK(runner_->Watch(first.id(), [&](const v1::JobProgress& progress) {
    if (large_end.id().empty()) large_now = progress.job();
    large_end = progress.job();
    return true;
  }));
  EXPECT_NE(large_now.state(), v1::SUCCEEDED);
  EXPECT_LT(large_now.results_size(), 12);
  ASSERT_EQ(large_end.state(), v1::SUCCEEDED) << large_end.error();
  EXPECT_EQ(large_end.results_size(), 12);
}

TEST_F(ScreenJobTest, AJobTooLargeOrOneSubmitterTooManyIsRefusedNamingTheLimit) {
  RestartRunner("", /*max_variants=*/1);
  EXPECT_THAT(runner_->Submit(Spec(), "token:ci"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_job_variants")));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> none, store_->ListJobs(10));
  EXPECT_THAT(none, SizeIs(0));  // nothing was stored

  // The first job cannot end before its first screened variant is let go:
  // it still runs at the second submission.
  WorkerHold hold(dir_.path() + "/hold", "screen", 1);
  ScopedEnv held("FAKE_WORKER_HOLD", hold.spec());
  RestartRunner("", /*max_variants=*/0, /*max_unfinished=*/1);
  ASSERT_OK_AND_ASSIGN(v1::Job first, runner_->Submit(Spec(), "token:ci"));
  EXPECT_EQ(first.submitted_by(), "token:ci");
  EXPECT_THAT(runner_->Submit(Spec(), "token:ci"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("token:ci has 1 jobs that have not ended")));
  // Another submitter is not held back by it.
  ASSERT_OK(runner_->Submit(Spec(), "token:nightly").status());
  hold.Go();
  ASSERT_OK(runner_->Watch(first.id(), [](const v1::JobProgress&) { return true; }));
  // Once its job has ended, the submitter may submit again.
  ASSERT_OK(runner_->Submit(Spec(), "token:ci").status());
}

// Found on e01f360: 40 submits sent at once got 18 jobs through a
// per-submitter limit of 16 (each counted the others before any started).
TEST_F(ScreenJobTest, SubmitsSentAtOnceNeverPassTheLimitTogether) {
  WorkerHold hold(dir_.path() + "/hold", "screen", 1);
  ScopedEnv held("FAKE_WORKER_HOLD", hold.spec());
  constexpr int kLimit = 3;
  RestartRunner("", /*max_variants=*/0, /*max_unfinished=*/kLimit);
  std::mutex mu;
  std::vector<v1::Job> accepted;
  int refused = 0;
  std::vector<std::thread> submitters;
  for (int i = 0; i < 12; ++i) {
    submitters.emplace_back([&] {
      absl::StatusOr<v1::Job> job = runner_->Submit(Spec(), "token:ci");
      std::lock_guard<std::mutex> lock(mu);
      if (job.ok()) {
        accepted.push_back(*job);
      } else {
        EXPECT_THAT(job.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                           HasSubstr("jobs that have not ended")));
        ++refused;
      }
    });
  }
  for (std::thread& submitter : submitters) submitter.join();
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kLimit));
  EXPECT_EQ(refused, 12 - kLimit);
  hold.Go();
  for (const v1::Job& job : accepted) {
    ASSERT_OK(runner_->Watch(job.id(), [](const v1::JobProgress&) { return true; }));
  }
}

// Found on the H200 (e01f360): `warmup --retune --force` under a foreign
// load replaced clean 68.2 us entries with CONTENDED 193 us ones. A forced
// measurement is stored where there was none, never over a clean one.
TEST_F(ScreenJobTest, AForcedContendedResultNeverReplacesACleanEntry) {
  const v1::Job clean = Run(Spec());
  ASSERT_EQ(clean.state(), v1::SUCCEEDED) << clean.error();
  ASSERT_THAT(clean.results(), SizeIs(::testing::Gt(0)));

  ScopedEnv foreign("FAKE_WORKER_FOREIGN", "4121:1073741824");
  ScopedEnv in_rounds("FAKE_WORKER_FOREIGN_SERIALS", "1000");
  RestartRunner();
  v1::JobSpec forced = Spec(/*retune=*/true);
  forced.mutable_options()->set_force(true);
  const v1::Job job = Run(forced);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_EQ(job.reports_size(), clean.results_size());
  for (const v1::ProblemReport& report : job.reports()) {
    EXPECT_THAT(report.kept_clean(), HasSubstr("was measured under contention"));
    EXPECT_THAT(report.kept_clean(), HasSubstr("the clean entry tuned at"));
    EXPECT_FALSE(report.entry().contended());
  }
  for (const v1::Entry& before : clean.results()) {
    ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> now,
                         store_->FindEntry({.family = before.family(),
                                            .family_hash = before.family_hash(),
                                            .problem = before.problem(),
                                            .device = before.device().name()}));
    ASSERT_TRUE(now.has_value());
    EXPECT_FALSE(now->contended());
    EXPECT_EQ(now->tuned_at(), before.tuned_at()) << "the clean entry stays";
  }
}

TEST_F(ScreenJobTest, AJobStoppedAfterItsScreenResumesWithoutScreeningAgain) {
  v1::Job job = Run(Spec());
  ASSERT_EQ(job.state(), v1::SUCCEEDED);
  ASSERT_NO_FATAL_FAILURE(StopInTheLastSerialPhase(job));

  const std::string log = dir_.path() + "/worker.log";
  ScopedEnv logged("FAKE_WORKER_LOG", log);
  RestartRunner();
  const v1::Job last = ResumeAndWait(job.id());
  EXPECT_EQ(last.state(), v1::SUCCEEDED) << last.error();
  ASSERT_THAT(last.results(), SizeIs(2));
  EXPECT_EQ(last.counts().measured(), 0);  // nothing screened again
  // The tasks the workers got: the serial ones alone (every candidate,
  // then the leaders in a fresh worker).
  std::ifstream in(log);
  std::vector<std::string> tasks;
  for (std::string line; std::getline(in, line);) tasks.push_back(line);
  ASSERT_THAT(tasks, SizeIs(2));
  EXPECT_THAT(tasks, ::testing::Each(::testing::EndsWith(" serial")));
}

// A searched job resumed after its screen proposes the same variants (the
// search is deterministic for its seed and measurements) and finds every
// one of them screened: nothing is measured again, and the report says
// the same search.
TEST_F(ScreenJobTest, ASearchedJobResumesWithoutScreeningAgain) {
  v1::JobSpec spec = Spec();
  spec.mutable_options()->mutable_search()->set_strategy(v1::RANDOM);
  spec.mutable_options()->mutable_search()->set_max_variants(3);
  spec.mutable_options()->mutable_search()->set_seed(5);
  v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.reports(), SizeIs(2));
  const v1::ProblemReport second = job.reports(1);
  ASSERT_EQ(second.search().measured(), 3);
  ASSERT_NO_FATAL_FAILURE(StopInTheLastSerialPhase(job));

  RestartRunner();
  const v1::Job last = ResumeAndWait(job.id());
  EXPECT_EQ(last.state(), v1::SUCCEEDED) << last.error();
  ASSERT_THAT(last.results(), SizeIs(2));
  EXPECT_EQ(last.counts().measured(), 0);  // nothing screened again
  const v1::ProblemReport* resumed = nullptr;
  for (const v1::ProblemReport& report : last.reports()) {
    if (report.problem().DebugString() == second.problem().DebugString()) {
      resumed = &report;
    }
  }
  ASSERT_NE(resumed, nullptr);
  EXPECT_FALSE(resumed->has_screen_time());  // nothing measured now
  EXPECT_EQ(resumed->search().strategy(), v1::RANDOM);
  EXPECT_EQ(resumed->search().seed(), 5u);
  EXPECT_EQ(resumed->search().measured(), 3);
}

// A model search resumed after a restart starts from the hints it had: the
// winner this job stored for its first problem before the restart is not
// one of them, so the search proposes what it had already screened.
TEST_F(ScreenJobTest, AResumedModelSearchIsNotSeededWithItsOwnWinners) {
  v1::JobSpec spec = Spec();
  spec.mutable_options()->mutable_search()->set_strategy(v1::MODEL);
  v1::Job job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.reports(), SizeIs(2));
  const v1::Problem second = job.reports(1).problem();
  ASSERT_NO_FATAL_FAILURE(StopInTheLastSerialPhase(job));

  RestartRunner();
  const v1::Job last = ResumeAndWait(job.id());
  EXPECT_EQ(last.state(), v1::SUCCEEDED) << last.error();
  EXPECT_EQ(last.counts().measured(), 0);
  const v1::ProblemReport* resumed = nullptr;
  for (const v1::ProblemReport& report : last.reports()) {
    if (report.problem().DebugString() == second.DebugString()) resumed = &report;
  }
  ASSERT_NE(resumed, nullptr);
  EXPECT_EQ(resumed->search().strategy(), v1::MODEL);
  EXPECT_EQ(resumed->search().hints(), 0);
}

// Another holder of the GPU's lease (another daemon, a benchmark) makes the
// job wait, and says so; released, the job goes on.
TEST_F(ScreenJobTest, AJobWaitsForTheGpuLeaseOfAnotherHolder) {
  const std::string leases = dir_.path() + "/leases";
  RestartRunner(leases);
  ASSERT_OK_AND_ASSIGN(GpuLease held,
                       GpuLease::TryAcquire(leases, "GPU-fake-0", "benchmark in the test"));
  std::optional<GpuLease> holder(std::move(held));
  // The holder lets go a second after the job says it waits, however long
  // the job took to get there (a sanitizer build is slow).
  absl::Notification waiting;
  std::thread release([&] {
    waiting.WaitForNotificationWithTimeout(absl::Minutes(2));
    absl::SleepFor(absl::Seconds(1));
    holder.reset();
  });
  v1::JobSpec spec = Spec();
  spec.mutable_manifest()->mutable_items(0)->mutable_dims(0)->mutable_values()->RemoveLast();
  absl::StatusOr<v1::Job> submitted = runner_->Submit(spec);
  ASSERT_OK(submitted.status());
  v1::Job job;
  absl::Time waited_from = absl::InfiniteFuture();
  EXPECT_OK(runner_->Watch(submitted->id(), [&](const v1::JobProgress& progress) {
    job = progress.job();
    if (absl::StrContains(progress.message(), "waiting for the lease of the GPU, held by") &&
        !waiting.HasBeenNotified()) {
      waited_from = absl::Now();
      waiting.Notify();
    }
    return true;
  }));
  if (!waiting.HasBeenNotified()) waiting.Notify();
  release.join();
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_THAT(job.results(), SizeIs(1));
  EXPECT_GE(absl::Now() - waited_from, absl::Seconds(0.9))
      << "the job said it waits, then went on before the lease was free";
}

// A host with two GPUs of one model, played by the stand-in worker
// (FAKE_WORKER_GPUS=2). Each worker writes the span of every task it ran
// (FAKE_WORKER_SPANS), so what ran where, and when, can be checked. What
// must happen at once (both GPUs busy) is made to by holding each GPU's
// worker (WorkerHold) until the other's holds too.
class TwoGpuTest : public ScreenJobTest {
 protected:
  struct Span {
    std::string uuid;
    int64_t start_us = 0;
    int64_t end_us = 0;
    std::string kind;  // "screen" or "serial"
  };

  void SetUp() override {
    ScreenJobTest::SetUp();
    spans_path_ = dir_.path() + "/spans";
    leases_ = dir_.path() + "/leases";
  }

  // "pair": MODE 0 and 1 (OK) and 2 (WRONG_RESULT), on `store`.
  static absl::Status RegisterPair(cache::Store& store) {
    ASSIGN_OR_RETURN(v1::KernelFamily family,
                     kernels::LoadFamilyFile(SERVICE_TESTDATA_DIR "/modes.textproto"));
    family.set_name("pair");
    family.mutable_params(0)->clear_values();
    for (int mode : {0, 1, 2}) family.mutable_params(0)->add_values(mode);
    return store.PutFamily(family, /*builtin=*/false).status();
  }

  static v1::JobSpec PairSpec() {
    v1::JobSpec spec;
    v1::ManifestItem* item = spec.mutable_manifest()->add_items();
    item->set_family("pair");
    v1::ManifestItem::DimValues* n = item->add_dims();
    n->set_name("n");
    for (int value : {256, 512, 1024, 2048}) n->add_values(value);
    item->add_dtypes(v1::FLOAT32);
    return spec;
  }

  static std::unique_ptr<JobRunner> Runner(cache::Store* store, CompilePool* pool,
                                           const std::string& leases) {
    JobRunnerOptions options;
    options.profile.worker_path = FAKE_PROFILE_WORKER_PATH;
    options.profile.grace = absl::Minutes(2);  // no variant of "pair" hangs; a held one waits
    options.profile.lease_dir = leases;
    options.variant_timeout_s = 0.1;
    return std::make_unique<JobRunner>(store, pool, "", options);
  }

  // Submits and waits for the end; `on_progress` sees every progress.
  static v1::Job RunOn(JobRunner& runner, const v1::JobSpec& spec,
                       const std::function<void(const v1::JobProgress&)>& on_progress = nullptr) {
    absl::StatusOr<v1::Job> job = runner.Submit(spec);
    EXPECT_OK(job.status());
    if (!job.ok()) return {};
    v1::Job last;
    EXPECT_OK(runner.Watch(job->id(), [&](const v1::JobProgress& progress) {
      last = progress.job();
      if (on_progress) on_progress(progress);
      return true;
    }));
    return last;
  }

  // Holds of each GPU's worker before its first variant outcome of `phase`,
  // and the FAKE_WORKER_HOLD naming them.
  std::vector<std::unique_ptr<WorkerHold>> HoldEachGpu(const std::string& phase) {
    std::vector<std::unique_ptr<WorkerHold>> holds;
    for (int ordinal : {0, 1}) {
      holds.push_back(std::make_unique<WorkerHold>(
          absl::StrCat(dir_.path(), "/hold-", phase, "-", ordinal), phase, 1, ordinal));
    }
    return holds;
  }
  static std::string Specs(const std::vector<std::unique_ptr<WorkerHold>>& holds) {
    std::vector<std::string> specs;
    for (const auto& hold : holds) specs.push_back(hold->spec());
    return absl::StrJoin(specs, ",");
  }
  // Until every hold holds (each within `timeout`), then lets them all go.
  // Whether all held.
  static bool AllHeldThenGo(const std::vector<std::unique_ptr<WorkerHold>>& holds,
                            absl::Duration timeout = absl::Minutes(2)) {
    bool all = true;
    for (const auto& hold : holds) all = hold->WaitHeld(timeout) && all;
    for (const auto& hold : holds) hold->Go();
    return all;
  }

  std::vector<Span> Spans() const {
    std::vector<Span> spans;
    absl::StatusOr<std::string> text = ReadFile(spans_path_);
    EXPECT_OK(text.status());
    for (absl::string_view line : absl::StrSplit(text.value_or(""), '\n', absl::SkipEmpty())) {
      const std::vector<std::string> words = absl::StrSplit(line, ' ');
      Span span;
      EXPECT_EQ(words.size(), 4u) << line;
      if (words.size() != 4 || !absl::SimpleAtoi(words[1], &span.start_us) ||
          !absl::SimpleAtoi(words[2], &span.end_us)) {
        continue;
      }
      span.uuid = words[0];
      span.kind = words[3];
      spans.push_back(span);
    }
    return spans;
  }

  // Pairs of spans on one GPU that overlap in time: must be none.
  static std::vector<std::string> OverlapsOnOneGpu(std::vector<Span> spans) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return std::tie(a.uuid, a.start_us) < std::tie(b.uuid, b.start_us);
    });
    std::vector<std::string> overlaps;
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].uuid == spans[i - 1].uuid && spans[i].start_us < spans[i - 1].end_us) {
        overlaps.push_back(absl::StrCat(spans[i].uuid, ": ", spans[i - 1].kind, " until ",
                                        spans[i - 1].end_us, ", ", spans[i].kind, " from ",
                                        spans[i].start_us));
      }
    }
    return overlaps;
  }

  std::string spans_path_;
  std::string leases_;
};

TEST_F(TwoGpuTest, BothGpusScreenAtOnceAndEachMeasuresOneTaskAtATime) {
  ScopedEnv gpus("FAKE_WORKER_GPUS", "2");
  // Each GPU's first screen is held until the other's holds too: if one
  // GPU took every problem, the other's never would.
  const std::vector<std::unique_ptr<WorkerHold>> holds = HoldEachGpu("screen");
  ScopedEnv held("FAKE_WORKER_HOLD", Specs(holds));
  ScopedEnv spans("FAKE_WORKER_SPANS", spans_path_);
  ASSERT_OK(RegisterPair(*store_));
  runner_ = Runner(store_.get(), compile_pool_.get(), leases_);

  v1::Job job;
  std::thread run([&] { job = RunOn(*runner_, PairSpec()); });
  const bool both_held = AllHeldThenGo(holds);
  run.join();
  EXPECT_TRUE(both_held) << "the two GPUs never screened at once";
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_THAT(job.results(), SizeIs(4));

  const std::vector<Span> all = Spans();
  std::set<std::string> gpus_used;
  std::map<std::string, int> kinds;
  for (const Span& span : all) {
    gpus_used.insert(span.uuid);
    ++kinds[span.kind];
  }
  EXPECT_EQ(gpus_used, (std::set<std::string>{"GPU-fake-0", "GPU-fake-1"}));
  EXPECT_GE(kinds["screen"], 4) << "every problem screened";
  EXPECT_EQ(kinds["serial"], 8) << "two serial tasks per problem, in two worker processes";
  EXPECT_THAT(OverlapsOnOneGpu(all), ::testing::IsEmpty());
  bool parallel = false;
  for (const Span& a : all) {
    for (const Span& b : all) {
      parallel = parallel || (a.kind == "screen" && b.kind == "screen" && a.uuid < b.uuid &&
                              a.start_us < b.end_us && b.start_us < a.end_us);
    }
  }
  EXPECT_TRUE(parallel) << "no two screens ran at once on the two GPUs";
}

// Two daemons on one host, each with both GPUs, sharing the host's leases.
TEST_F(TwoGpuTest, TwoRunnersSharingTheLeasesNeverMeasureOnOneGpuAtOnce) {
  ScopedEnv gpus("FAKE_WORKER_GPUS", "2");
  // The first screen on each GPU, whichever runner's, is held (and its
  // lease with it) until a task of a runner has found a GPU's lease taken:
  // both GPUs are used, and the leases are put to the test.
  const std::vector<std::unique_ptr<WorkerHold>> holds = HoldEachGpu("screen");
  ScopedEnv held("FAKE_WORKER_HOLD", Specs(holds));
  ScopedEnv spans("FAKE_WORKER_SPANS", spans_path_);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<cache::Store> other,
                       cache::Store::Open({.path = dir_.path() + "/other.db"}));
  ASSERT_OK(RegisterPair(*store_));
  ASSERT_OK(RegisterPair(*other));
  runner_ = Runner(store_.get(), compile_pool_.get(), leases_);
  std::unique_ptr<JobRunner> second = Runner(other.get(), compile_pool_.get(), leases_);

  std::atomic<bool> lease_waited{false};
  const auto on_progress = [&](const v1::JobProgress& progress) {
    if (absl::StrContains(progress.message(), "waiting for the lease")) lease_waited = true;
  };
  v1::Job first_job;
  v1::Job second_job;
  std::thread first([&] { first_job = RunOn(*runner_, PairSpec(), on_progress); });
  std::thread other_run([&] { second_job = RunOn(*second, PairSpec(), on_progress); });
  bool both_held = true;
  for (const auto& hold : holds) both_held = hold->WaitHeld() && both_held;
  // With both GPUs held, the next task of either runner finds a lease taken.
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (!lease_waited && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  for (const auto& hold : holds) hold->Go();
  first.join();
  other_run.join();
  EXPECT_TRUE(both_held) << "the two GPUs were never both measuring";
  EXPECT_TRUE(lease_waited) << "no task waited for a GPU's lease while both were held";
  EXPECT_EQ(first_job.state(), v1::SUCCEEDED) << first_job.error();
  EXPECT_EQ(second_job.state(), v1::SUCCEEDED) << second_job.error();

  const std::vector<Span> all = Spans();
  std::set<std::string> gpus_used;
  int serial = 0;
  for (const Span& span : all) {
    gpus_used.insert(span.uuid);
    serial += span.kind == "serial" ? 1 : 0;
  }
  EXPECT_EQ(gpus_used.size(), 2u);
  EXPECT_EQ(serial, 16) << "two serial tasks (worker processes) per problem of each job";
  EXPECT_THAT(OverlapsOnOneGpu(all), ::testing::IsEmpty());
}

// A foreign load on GPU 1 only: GPU 0 keeps validating cleanly; what GPU 1
// validates under JobOptions.force is marked CONTENDED.
TEST_F(TwoGpuTest, AForeignLoadOnOneGpuMarksOnlyWhatThatGpuMeasured) {
  ScopedEnv gpus("FAKE_WORKER_GPUS", "2");
  // Each GPU's first serial task is held until the other's holds too, so
  // both GPUs validate something.
  const std::vector<std::unique_ptr<WorkerHold>> holds = HoldEachGpu("serial");
  ScopedEnv held("FAKE_WORKER_HOLD", Specs(holds));
  ScopedEnv spans("FAKE_WORKER_SPANS", spans_path_);
  ScopedEnv foreign("FAKE_WORKER_FOREIGN", "4121:1073741824");
  ScopedEnv on_gpu_1("FAKE_WORKER_FOREIGN_GPU", "1");
  ASSERT_OK(RegisterPair(*store_));
  runner_ = Runner(store_.get(), compile_pool_.get(), leases_);
  v1::JobSpec spec = PairSpec();
  spec.mutable_options()->set_force(true);

  v1::Job job;
  std::thread run([&] { job = RunOn(*runner_, spec); });
  const bool both_held = AllHeldThenGo(holds);
  run.join();
  EXPECT_TRUE(both_held) << "the two GPUs never validated at once";
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  ASSERT_THAT(job.results(), SizeIs(4));
  int contended = 0;
  for (const v1::Entry& entry : job.results()) {
    if (entry.contended()) {
      ++contended;
      EXPECT_THAT(entry.contention(), HasSubstr("4121"));
    }
  }
  std::map<std::string, int> serial_on;
  for (const Span& span : Spans()) serial_on[span.uuid] += span.kind == "serial" ? 1 : 0;
  // Two serial tasks a problem (two worker processes), on one GPU.
  EXPECT_EQ(2 * contended, serial_on["GPU-fake-1"]) << "CONTENDED exactly where the load was";
  EXPECT_EQ(2 * (4 - contended), serial_on["GPU-fake-0"]);
  EXPECT_GT(serial_on["GPU-fake-0"], 0) << "GPU 0 kept validating";
  EXPECT_GT(serial_on["GPU-fake-1"], 0) << "nothing was validated where the load was";
}

}  // namespace
}  // namespace autotune::service
