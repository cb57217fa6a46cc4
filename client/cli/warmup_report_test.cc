#include "client/cli/warmup_report.h"

#include <stdlib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Problem MakeProblem(std::initializer_list<std::pair<const char*, int64_t>> dims,
                        v1::DType dtype) {
  v1::Problem problem;
  for (const auto& [name, value] : dims) (*problem.mutable_dims())[name] = value;
  problem.set_dtype(dtype);
  return problem;
}

// Four problems, one of each kind a report has to show: a clear winner that
// is slower than the entry it replaces, a tie measured on a contended GPU, a
// problem left without a config, and one skipped because it was cached.
v1::Job SampleJob() {
  v1::Job job;
  job.set_id("job-42");
  job.set_state(v1::SUCCEEDED);
  v1::JobCounts& counts = *job.mutable_counts();
  counts.set_problems(4);
  counts.set_cached_problems(1);
  counts.set_variants(162);
  counts.set_compiled(162);
  counts.set_measured(162);
  counts.set_ok(136);
  counts.set_wrong_result(12);
  counts.set_timeout(4);
  counts.set_unsupported(8);
  v1::JobTiming& timing = *job.mutable_timing();
  timing.set_phase("done");
  timing.set_compile_s(12.4);
  timing.set_screen_s(41.2);
  timing.set_serial_s(30.25);
  timing.set_waited_s(5);
  timing.set_elapsed_s(88.9);

  v1::ProblemReport& winner = *job.add_reports();
  winner.set_family("gla_decode");
  *winner.mutable_problem() = MakeProblem({{"heads", 32}, {"batch", 1}}, v1::BFLOAT16);
  v1::Entry& entry = *winner.mutable_entry();
  (*entry.mutable_config()->mutable_params())["THREADS"] = 256;
  (*entry.mutable_config()->mutable_params())["BLOCK_V"] = 64;
  entry.mutable_timing()->set_median_us(12.345);
  entry.mutable_timing()->set_achieved_gbps(812.34);
  entry.mutable_limits()->set_copy_gbps(934.5);
  entry.set_rounds(24);
  entry.set_noise(0.0031);
  entry.set_candidates(8);
  entry.set_margin(0.021);
  entry.set_choice("the fastest");
  entry.set_worker_processes(2);
  winner.set_speedup(1.337);
  winner.mutable_previous()->mutable_timing()->set_median_us(11.9);
  winner.set_previous_ratio(0.964);
  winner.set_previous_differs("NVRTC 12.8 -> 13.0");
  winner.set_regression(true);
  winner.set_screen_contention("pid 4121 (2.0 GiB); utilization 97%");
  (*winner.mutable_status_counts())["OK"] = 96;
  (*winner.mutable_status_counts())["WRONG_RESULT"] = 2;
  winner.set_screened(98);

  v1::ProblemReport& tie = *job.add_reports();
  tie.set_family("rmsnorm");
  *tie.mutable_problem() = MakeProblem({{"rows", 8}, {"hidden", 4096}}, v1::FLOAT16);
  v1::Entry& tied = *tie.mutable_entry();
  (*tied.mutable_config()->mutable_params())["BLOCK"] = 128;
  tied.mutable_timing()->set_median_us(4.5);
  tied.mutable_timing()->set_achieved_gbps(1500);
  tied.mutable_timing()->set_achieved_tflops(0.514);
  tied.set_tie(true);
  tied.set_tied(3);
  tied.set_contended(true);
  tied.set_contention("pid 4121 (2.0 GiB), utilization 97%");
  tied.set_rounds(40);
  tied.set_noise(0.0049);
  tied.set_candidates(5);
  tied.set_choice("3 candidates within 0.50% of the fastest");
  tied.set_bound(0.0031);
  tied.set_worker_processes(2);
  tied.set_throttled(true);
  (*tie.mutable_status_counts())["OK"] = 40;
  (*tie.mutable_status_counts())["UNSUPPORTED"] = 8;
  tie.set_screened(48);

  v1::ProblemReport& failed = *job.add_reports();
  failed.set_family("softmax");
  *failed.mutable_problem() = MakeProblem({{"rows", 4096}, {"cols", 32000}}, v1::FLOAT32);
  failed.set_error(
      "all 16 variants rejected: 12 WRONG_RESULT, 4 TIMEOUT; first: \"max error 0.5 > atol\"");
  (*failed.mutable_status_counts())["WRONG_RESULT"] = 10;
  (*failed.mutable_status_counts())["TIMEOUT"] = 4;
  failed.set_screened(14);

  v1::ProblemReport& cached = *job.add_reports();
  cached.set_family("rmsnorm");
  *cached.mutable_problem() = MakeProblem({{"rows", 8}, {"hidden", 8192}}, v1::BFLOAT16);
  cached.set_cached(true);
  v1::Entry& kept = *cached.mutable_entry();
  (*kept.mutable_config()->mutable_params())["BLOCK"] = 256;
  kept.mutable_timing()->set_median_us(20.5);
  kept.mutable_timing()->set_achieved_gbps(3270.5);
  kept.mutable_limits()->set_copy_gbps(4100);
  cached.set_speedup(1.05);
  return job;
}

// Compares with client/testdata/<name>; AUTOTUNE_UPDATE_GOLDENS=1 writes the
// file instead (then check the diff before committing it).
void ExpectGolden(const std::string& actual, const std::string& name) {
  const std::string path = absl::StrCat(AUTOTUNE_CLIENT_TESTDATA, "/", name);
  if (getenv("AUTOTUNE_UPDATE_GOLDENS") != nullptr) {
    ASSERT_OK(WriteFileAtomically(path, actual, "golden file"));
    return;
  }
  ASSERT_OK_AND_ASSIGN(const std::string expected, ReadFile(path, "golden file"));
  EXPECT_EQ(actual, expected) << "AUTOTUNE_UPDATE_GOLDENS=1 rewrites " << path;
}

TEST(WarmupReportTest, TextMatchesTheGoldenFile) {
  ExpectGolden(RenderReportText(SampleJob()), "warmup_report.txt");
}

TEST(WarmupReportTest, MarkdownMatchesTheGoldenFile) {
  ExpectGolden(RenderReportMarkdown(SampleJob()), "warmup_report.md");
}

TEST(WarmupReportTest, CsvMatchesTheGoldenFile) {
  ExpectGolden(RenderReportCsv(SampleJob()), "warmup_report.csv");
}

// The goldens pin every rendering; a value the daemon changes must show.
TEST(WarmupReportTest, EveryRenderingFollowsTheValues) {
  const v1::Job job = SampleJob();
  v1::Job changed = job;
  changed.mutable_reports(0)->mutable_entry()->mutable_timing()->set_median_us(13.5);
  EXPECT_NE(RenderReportText(changed), RenderReportText(job));
  EXPECT_NE(RenderReportMarkdown(changed), RenderReportMarkdown(job));
  EXPECT_NE(RenderReportCsv(changed), RenderReportCsv(job));
  EXPECT_THAT(RenderReportText(changed), HasSubstr("BLOCK_V=64 THREADS=256      13.50"));
  EXPECT_THAT(RenderReportCsv(changed), HasSubstr(",BLOCK_V=64 THREADS=256,13.5,812.34,"));
}

TEST(WarmupReportTest, PercentOfLimitNeedsBothRates) {
  v1::Job job = SampleJob();
  job.mutable_reports()->DeleteSubrange(1, 3);
  EXPECT_THAT(RenderReportText(job), HasSubstr("  12.35  812.3     87%"));
  job.mutable_reports(0)->mutable_entry()->mutable_limits()->set_copy_gbps(0);
  EXPECT_THAT(RenderReportText(job), Not(HasSubstr("%  ")));
  EXPECT_THAT(RenderReportCsv(job), HasSubstr(",12.345,812.34,,,1.337,"));
}

TEST(WarmupReportTest, FlagsSayTieBoundContentionThrottlingCacheAndRegression) {
  const std::string text = RenderReportText(SampleJob());
  EXPECT_THAT(text, HasSubstr("1.34x  bound(0.00%) REGRESSION screen-contended\n"));
  EXPECT_THAT(text, HasSubstr("tie(3) bound(0.31%) CONTENDED THROTTLED\n"));
  EXPECT_THAT(text, HasSubstr("1.05x  cached\n"));
  EXPECT_THAT(text, HasSubstr("error: all 16 variants rejected: 12 WRONG_RESULT, 4 TIMEOUT"));
}

TEST(WarmupReportTest, ChangesAgainstTheCacheOnlyWithAPreviousEntry) {
  v1::Job job = SampleJob();
  EXPECT_THAT(RenderReportText(job), HasSubstr("Changes against the cache\n"));
  EXPECT_THAT(RenderReportText(job), HasSubstr("11.90   12.35   0.964x  NVRTC 12.8 -> 13.0"));
  job.mutable_reports(0)->clear_previous();
  EXPECT_THAT(RenderReportText(job), Not(HasSubstr("Changes against the cache")));
  EXPECT_THAT(RenderReportMarkdown(job), Not(HasSubstr("Changes against the cache")));
}

TEST(WarmupReportTest, StatusCountsAreSummedInStatusOrder) {
  v1::Job job = SampleJob();
  (*job.mutable_reports(3)->mutable_status_counts())["OK"] = 2764;
  (*job.mutable_reports(3)->mutable_status_counts())["SOMETHING_NEW"] = 1;
  EXPECT_THAT(RenderReportText(job),
              HasSubstr("variants: OK 2,900 \u00b7 WRONG_RESULT 12 \u00b7 TIMEOUT 4 \u00b7 "
                        "UNSUPPORTED 8 \u00b7 SOMETHING_NEW 1 (160 screened)\n"));
  job.mutable_reports(0)->set_screens_carried(90);
  EXPECT_THAT(RenderReportText(job),
              HasSubstr("(160 screened; 90 screens carried from an older family version)\n"));
}

TEST(WarmupReportTest, TheScreensTimeIsSaidPerVariantByStage) {
  v1::Job job = SampleJob();
  EXPECT_THAT(RenderReportText(job), Not(HasSubstr("screen: ")));
  // Two problems, 100 variants, 2 s of wall time: 20 ms a variant.
  for (int i : {0, 1}) {
    v1::ScreenTime* t = job.mutable_reports(i)->mutable_screen_time();
    t->set_variants(50);
    t->set_wall_s(1.0);
    t->set_cubins_s(0.01);
    t->set_worker_s(0.9);
    t->set_setup_s(0.02);
    t->set_load_s(0.05);
    t->set_validate_s(0.15);
    t->set_graph_s(0.25);
    t->set_warmup_s(0.1);
    t->set_samples_s(0.2);
    t->set_gpu_s(0.3);
    t->set_store_s(0.04);
  }
  EXPECT_THAT(RenderReportText(job),
              HasSubstr("screen: 20.0 ms a variant over 100 (their GPU time 6.0 ms): load 1.0 "
                        "\u00b7 validate 3.0 \u00b7 graph 5.0 \u00b7 warm-up 2.0 \u00b7 "
                        "samples 4.0 \u00b7 task set-up 0.4 \u00b7 cubins 0.2 \u00b7 other 4.4 "
                        "(storing 0.8 alongside)\n"));
}

TEST(WarmupReportTest, CsvQuotesWhatRfc4180Quotes) {
  const std::string csv = RenderReportCsv(SampleJob());
  EXPECT_THAT(csv, HasSubstr("\nsoftmax,\"cols=32000,rows=4096\",fp32,,"));
  EXPECT_THAT(csv, HasSubstr(",\"all 16 variants rejected: 12 WRONG_RESULT, 4 TIMEOUT; first: "
                             "\"\"max error 0.5 > atol\"\"\"\n"));
  v1::Job job = SampleJob();
  job.mutable_reports(2)->set_error("line one\nline two");
  EXPECT_THAT(RenderReportCsv(job), HasSubstr(",\"line one\nline two\"\n"));
}

TEST(WarmupReportTest, MarkdownEscapesWhatItWouldActOn) {
  v1::Job job = SampleJob();
  job.mutable_reports(2)->set_error("bad | cell <b>*x*</b> __init__ BLOCK_V");
  EXPECT_THAT(RenderReportMarkdown(job),
              HasSubstr("error: bad \\| cell \\<b>\\*x\\*\\</b> \\_\\_init\\_\\_ BLOCK_V |"));
}

TEST(WarmupReportTest, AJobWithoutReportsStillSaysItsStateAndTime) {
  v1::Job job = SampleJob();
  job.clear_reports();
  job.set_state(v1::FAILED);
  job.set_error("no GPU found");
  EXPECT_EQ(RenderReportText(job),
            "time: compile 12 s \u00b7 screen 41 s \u00b7 serial 30 s \u00b7 waited 5.0 s "
            "\u00b7 total 1 min 29 s\n");
  const std::string markdown = RenderReportMarkdown(job);
  EXPECT_THAT(markdown, HasSubstr("## Warmup job job-42: FAILED\n"));
  EXPECT_THAT(markdown, HasSubstr("**Error:**\n\n```\nno GPU found\n```\n"));
  // A compile error's lines are kept, verbatim, in a fence no backtick run
  // inside can close.
  job.set_error("2 variants failed to compile:\n  axpy.cu(3): error: `x` undefined\n  ```");
  EXPECT_THAT(RenderReportMarkdown(job),
              HasSubstr("**Error:**\n\n````\n2 variants failed to compile:\n  axpy.cu(3): "
                        "error: `x` undefined\n  ```\n````\n"));
  EXPECT_THAT(markdown, HasSubstr("No per-problem reports.\n"));
  EXPECT_EQ(RenderReportCsv(job),
            "family,dims,dtype,config,median_us,gbps,limit_pct,tflops,speedup,tie,tied,contended,"
            "cached,previous_median_us,ratio,regression,rounds,noise,candidates,bound,"
            "worker_processes,throttled,error\n");
}

}  // namespace
}  // namespace autotune::client
