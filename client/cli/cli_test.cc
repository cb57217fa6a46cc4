#include "client/cli/cli.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "client/bundle.h"
#include "client/cli/warmup_report.h"
#include "client/testing/fake_autotune_server.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::client::testing::FakeAutotuneServer;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(server_.Start());
    ASSERT_FALSE(dir_.path().empty());
  }

  // Runs `autotune --server <fake> args...`.
  CliResult Run(std::initializer_list<std::string> args) {
    std::vector<std::string> words = {"autotune", "--server", server_.address()};
    words.insert(words.end(), args.begin(), args.end());
    return RunWords(words);
  }

  static CliResult RunWords(const std::vector<std::string>& words) {
    std::vector<const char*> argv;
    for (const std::string& word : words) argv.push_back(word.c_str());
    std::ostringstream out;
    std::ostringstream err;
    const int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
  }

  std::string File(const std::string& name) { return dir_.File(name); }

  FakeAutotuneServer server_;
  ::autotune::testing::TempDir dir_;
};

v1::Entry SampleEntry() {
  v1::Entry entry;
  entry.set_family("flash_attn");
  (*entry.mutable_problem()->mutable_dims())["batch"] = 16;
  entry.mutable_problem()->set_dtype(v1::BFLOAT16);
  entry.mutable_device()->set_name("NVIDIA H200");
  (*entry.mutable_config()->mutable_params())["BLOCK_M"] = 128;
  entry.mutable_timing()->set_median_us(41.5);
  entry.set_binary_sha256("c0ffee");
  return entry;
}

TEST_F(CliTest, LookupExactPrintsTheConfigAndSendsTheProblem) {
  server_.answers().lookup.set_match(v1::EXACT);
  *server_.answers().lookup.mutable_entry() = SampleEntry();

  const CliResult result = Run({"lookup", "flash_attn", "--dims", "batch=16,heads=32", "--dtype",
                                "bf16", "--device", "NVIDIA H200", "--exact"});
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("EXACT  flash_attn  batch=16,heads=32  bf16\n"));
  EXPECT_THAT(result.out, HasSubstr("BLOCK_M=128"));
  EXPECT_THAT(result.err, IsEmpty());

  const v1::LookupRequest& sent = server_.calls().lookup;
  EXPECT_EQ(sent.family(), "flash_attn");
  EXPECT_EQ(sent.problem().dims().at("batch"), 16);
  EXPECT_EQ(sent.problem().dims().at("heads"), 32);
  EXPECT_EQ(sent.problem().dtype(), v1::BFLOAT16);
  EXPECT_EQ(sent.device().name(), "NVIDIA H200");
  EXPECT_TRUE(sent.exact_only());
  EXPECT_FALSE(sent.include_cubin());
}

TEST_F(CliTest, LookupMissIsAnAnswerAndExitsZero) {
  server_.answers().lookup.set_match(v1::MISS);
  server_.answers().lookup.set_miss_reason("never tuned for batch=3");
  const CliResult result = Run({"lookup", "flash_attn", "--dims", "batch=3", "--dtype", "fp16"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, StartsWith("MISS  flash_attn  batch=3  fp16\n"));
  EXPECT_THAT(result.out, HasSubstr("never tuned for batch=3"));
}

TEST_F(CliTest, LookupJsonIsTheResponseMessage) {
  server_.answers().lookup.set_match(v1::NEAREST);
  *server_.answers().lookup.mutable_entry() = SampleEntry();
  const CliResult result =
      Run({"lookup", "flash_attn", "--dims", "batch=12", "--dtype", "bf16", "--json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  v1::LookupResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &parsed).ok()) << result.out;
  EXPECT_EQ(parsed.match(), v1::NEAREST);
  EXPECT_EQ(parsed.entry().config().params().at("BLOCK_M"), 128);
}

TEST_F(CliTest, LookupCubinOutWritesTheBinary) {
  server_.answers().lookup.set_match(v1::EXACT);
  *server_.answers().lookup.mutable_entry() = SampleEntry();
  server_.answers().lookup.set_cubin(
      std::string("\x7f"
                  "ELF\0\x01",
                  6));
  const std::string path = File("kernel.cubin");
  const CliResult result =
      Run({"lookup", "flash_attn", "--dims", "batch=16", "--dtype", "bf16", "--cubin-out", path});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_TRUE(server_.calls().lookup.include_cubin());
  std::ifstream file(path, std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(file)), {});
  EXPECT_EQ(written, std::string("\x7f"
                                 "ELF\0\x01",
                                 6));
  EXPECT_THAT(result.out, HasSubstr(absl::StrCat("6 bytes written to ", path)));
}

TEST_F(CliTest, LookupCubinOutWithoutACubinFromTheServerFails) {
  server_.answers().lookup.set_match(v1::EXACT);
  *server_.answers().lookup.mutable_entry() = SampleEntry();
  const std::string path = File("kernel.cubin");
  const CliResult result =
      Run({"lookup", "flash_attn", "--dims", "batch=16", "--dtype", "bf16", "--cubin-out", path});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_THAT(result.err, HasSubstr("no cubin for binary c0ffee"));
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST_F(CliTest, BadDimsIsAUsageErrorNamingFlagAndValue) {
  const CliResult result = Run({"lookup", "flash_attn", "--dims", "batch=x", "--dtype", "bf16"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_EQ(result.err,
            "autotune: lookup: invalid --dims 'batch=x': dims: 'batch=x' is not an integer\n");
  EXPECT_THAT(result.out, IsEmpty());
  EXPECT_THAT(server_.calls().methods, IsEmpty()) << "nothing is sent on a usage error";
}

TEST_F(CliTest, BadDtypeIsAUsageError) {
  const CliResult result = Run({"lookup", "flash_attn", "--dims", "batch=8", "--dtype", "bf17"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, StartsWith("autotune: lookup: invalid --dtype 'bf17': expected one of"));
}

TEST_F(CliTest, FlagErrorsAreUsageErrorsOnOneLine) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"lookup", "flash_attn", "--dims", "batch=8"},       // --dtype missing
           {"lookup", "--dims", "batch=8", "--dtype", "bf16"},  // family missing
           {"ls", "--bogus"},
           {"ls", "--limit", "-3"},
           {"frobnicate"},
           {},
           {"--timeout", "0", "stats"},
           {"--token-file", "/dev/null", "stats"},  // not offered: no server checks tokens
       }) {
    std::vector<std::string> words = {"autotune", "--server", server_.address()};
    words.insert(words.end(), args.begin(), args.end());
    const CliResult result = RunWords(words);
    EXPECT_EQ(result.exit_code, kExitUsage) << absl::StrJoin(args, " ");
    EXPECT_THAT(result.err, StartsWith("autotune: ")) << absl::StrJoin(args, " ");
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
  EXPECT_THAT(server_.calls().methods, IsEmpty());
}

TEST_F(CliTest, HelpExitsZero) {
  const CliResult result = RunWords({"autotune", "--help"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_THAT(result.out, HasSubstr("lookup"));
  EXPECT_THAT(result.out, HasSubstr("warmup"));
  const CliResult lookup_help = RunWords({"autotune", "lookup", "--help"});
  EXPECT_EQ(lookup_help.exit_code, kExitOk);
  EXPECT_THAT(lookup_help.out, HasSubstr("--cubin-out"));
}

TEST_F(CliTest, ServerErrorExitsOneWithCodeAndMessage) {
  server_.answers().status = grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown family 'foo'");
  const CliResult result = Run({"lookup", "foo", "--dims", "batch=8", "--dtype", "bf16"});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_EQ(result.err, "autotune: lookup: NOT_FOUND: unknown family 'foo'\n");
}

// A message of several problems (a family's checks) keeps a line for each,
// indented: no text of the server starts a line of its own.
TEST_F(CliTest, AMultiLineServerMessageKeepsItsLinesIndented) {
  server_.answers().status = grpc::Status(grpc::StatusCode::INTERNAL,
                                          "compile failed:\r\nline 3: error\n\n\tautotune: x\n");
  const CliResult result = Run({"stats"});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_EQ(result.err,
            "autotune: stats: INTERNAL: compile failed:\n  line 3: error\n   autotune: x\n");
}

TEST_F(CliTest, UnreachableServerExitsThree) {
  const CliResult result =
      RunWords({"autotune", "--server", "unix:///nonexistent-autotune/autotune.sock", "stats"});
  EXPECT_EQ(result.exit_code, kExitUnreachable);
  EXPECT_THAT(result.err, StartsWith("autotune: stats: UNAVAILABLE: cannot reach autotuned at "
                                     "unix:///nonexistent-autotune/autotune.sock: "));
  EXPECT_THAT(result.err, EndsWith("; is the daemon running?\n"));
}

TEST_F(CliTest, GlobalFlagsMayFollowTheSubcommand) {
  server_.answers().stats.set_entries(3);
  const CliResult result =
      RunWords({"autotune", "stats", "--server", server_.address(), "--timeout", "5"});
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("entries        3\n"));
}

TEST_F(CliTest, LsPrintsATableAndSendsTheFilter) {
  *server_.answers().entries.add_entries() = SampleEntry();
  server_.answers().entries.set_total(1);
  const CliResult result = Run({"ls", "--family", "flash_attn", "--device", "NVIDIA H200",
                                "--nvrtc-older-than", "13.0", "--limit", "20"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("FAMILY      DIMS      DTYPE  DEVICE       CONFIG"));
  EXPECT_THAT(result.out, HasSubstr("flash_attn  batch=16  bf16   NVIDIA H200  BLOCK_M=128"));
  const v1::ListEntriesRequest& sent = server_.calls().list_entries;
  EXPECT_EQ(sent.filter().family(), "flash_attn");
  EXPECT_EQ(sent.filter().device(), "NVIDIA H200");
  EXPECT_EQ(sent.filter().nvrtc_older_than(), "13.0");
  EXPECT_EQ(sent.limit(), 20);
}

TEST_F(CliTest, LsSaysWhenMoreEntriesExist) {
  *server_.answers().entries.add_entries() = SampleEntry();
  server_.answers().entries.set_total(5);
  const CliResult result = Run({"ls", "--limit", "1"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("entries 1-1 of 5"));
}

TEST_F(CliTest, ShowPrintsEntryAndMeasurements) {
  *server_.answers().entry.mutable_entry() = SampleEntry();
  v1::Measurement* m = server_.answers().entry.add_measurements();
  m->set_status(v1::TIMEOUT);
  m->set_detail("killed after 2 s");
  const CliResult result = Run({"show", "flash_attn", "--dims", "batch=16", "--dtype", "bf16"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("flash_attn  batch=16  bf16\n"));
  EXPECT_THAT(result.out, HasSubstr("TIMEOUT"));
  EXPECT_THAT(result.out, HasSubstr("killed after 2 s"));
  EXPECT_EQ(server_.calls().get_entry.problem().dims().at("batch"), 16);
}

TEST_F(CliTest, InvalidateWithoutSelectorRefuses) {
  const CliResult result = Run({"invalidate"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--all"));
  EXPECT_THAT(server_.calls().methods, IsEmpty());
}

TEST_F(CliTest, InvalidateDryRunSaysWhatWouldGo) {
  server_.answers().invalidate.set_entries_removed(1);
  server_.answers().invalidate.set_measurements_removed(12);
  *server_.answers().invalidate.add_removed() = SampleEntry();
  const CliResult result = Run({"invalidate", "--family", "flash_attn", "--dry-run"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, StartsWith("would remove 1 entries and 12 measurements (dry run"));
  EXPECT_THAT(result.out, HasSubstr("flash_attn  batch=16"));
  EXPECT_TRUE(server_.calls().invalidate.dry_run());
  EXPECT_FALSE(server_.calls().invalidate.all());
  EXPECT_EQ(server_.calls().invalidate.filter().family(), "flash_attn");
}

TEST_F(CliTest, InvalidateAllSendsAll) {
  const CliResult result = Run({"invalidate", "--all"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_TRUE(server_.calls().invalidate.all());
  EXPECT_THAT(result.out, StartsWith("removed 0 entries"));
}

TEST_F(CliTest, AdminReadCommandsPrintTablesAndJson) {
  v1::KernelSummary* kernel = server_.answers().kernels.add_kernels();
  kernel->set_name("transpose");
  kernel->set_content_hash("0123456789abcdef0123");
  kernel->set_builtin(true);
  v1::Job* job = server_.answers().jobs.add_jobs();
  job->set_id("job-9");
  job->set_state(v1::SUCCEEDED);
  server_.answers().gc.set_binaries_removed(2);
  server_.answers().gc.set_bytes_freed(4096);

  CliResult result = Run({"kernels"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("transpose  0123456789ab"));
  EXPECT_THAT(result.out, HasSubstr("builtin"));

  result = Run({"jobs", "--limit", "5"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("job-9  SUCCEEDED"));
  EXPECT_EQ(server_.calls().list_jobs.limit(), 5);

  result = Run({"gc", "--dry-run"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "would remove 2 binaries, freeing 4.0 KiB (dry run, nothing changed)\n");
  EXPECT_TRUE(server_.calls().gc.dry_run());

  result = Run({"kernels", "--json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  v1::ListKernelsResponse kernels;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &kernels).ok());
  EXPECT_EQ(kernels.kernels(0).name(), "transpose");
}

TEST_F(CliTest, ExportThenImportRoundTripsTheBundle) {
  v1::ExportResponse part;
  part.mutable_part()->set_format_version(1);
  *part.mutable_part()->add_entries() = SampleEntry();
  part.mutable_part()->add_binaries()->set_cubin(std::string("\0\1\2", 3));
  server_.answers().export_parts = {part};
  const std::string path = File("bundle.json");

  CliResult result = Run({"export", "--out", path, "--family", "flash_attn", "--measurements"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("exported 0 families, 1 binaries (3 B), 1 entries"));
  EXPECT_EQ(server_.calls().export_request.filter().family(), "flash_attn");
  EXPECT_TRUE(server_.calls().export_request.include_measurements());

  server_.answers().import.set_entries(1);
  server_.answers().import.set_entries_skipped(2);
  result = Run({"import", path, "--replace"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("imported 0 families, 0 binaries, 1 entries"));
  EXPECT_THAT(result.out, HasSubstr("kept 2 existing entries"));
  const std::vector<v1::ImportRequest> parts = server_.calls().import_parts;
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_TRUE(parts[0].replace());
  EXPECT_EQ(parts[0].part().entries(0).family(), "flash_attn");
  EXPECT_EQ(parts[0].part().binaries(0).cubin(), std::string("\0\1\2", 3));
}

TEST_F(CliTest, ExportWritesStdoutByDefault) {
  v1::ExportResponse part;
  *part.mutable_part()->add_entries() = SampleEntry();
  server_.answers().export_parts = {part};
  const CliResult result = Run({"export"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  std::istringstream in(result.out);
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, ReadBundle(in, "<stdout>"));
  EXPECT_EQ(bundle.entries_size(), 1);
}

TEST_F(CliTest, ImportOfAMissingFileNamesItAndSendsNothing) {
  const std::string path = File("absent.json");
  const CliResult result = Run({"import", path});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_THAT(result.err, HasSubstr(absl::StrCat("cannot read bundle file ", path)));
  EXPECT_THAT(server_.calls().methods, IsEmpty());
}

class WarmupTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    manifest_ = File("warmup.textproto");
    std::ofstream(manifest_) << R"pb(
      items {
        family: "transpose"
        dims {
          name: "n"
          values: [ 1024, 8192 ]
        }
        dtypes: FLOAT32
      }
    )pb";
  }
  void AddProgress(v1::JobState state, const std::string& message = "") {
    v1::JobProgress progress;
    progress.mutable_job()->set_id("job-7");
    progress.mutable_job()->set_state(state);
    progress.mutable_job()->mutable_counts()->set_problems(2);
    progress.set_message(message);
    server_.answers().progress.push_back(progress);
  }
  std::string manifest_;
};

TEST_F(WarmupTest, SubmitsTheManifestAndPrintsProgressAndResults) {
  AddProgress(v1::QUEUED);
  AddProgress(v1::COMPILING, "compiling 40 variants on 16 workers");
  v1::JobProgress failure;
  failure.mutable_job()->set_id("job-7");
  failure.mutable_job()->set_state(v1::COMPILING);
  failure.mutable_last()->set_status(v1::COMPILE_ERROR);
  failure.mutable_last()->set_family("transpose");
  failure.mutable_last()->set_detail("error: too many resources requested\nmore log");
  server_.answers().progress.push_back(failure);
  AddProgress(v1::SUCCEEDED);
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();

  const CliResult result = Run({"warmup", manifest_, "--shard", "1/4", "--compile-only"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("job job-7 submitted\n"));
  EXPECT_THAT(result.out, HasSubstr("job job-7: COMPILING"));
  EXPECT_THAT(result.out, HasSubstr("compiling 40 variants on 16 workers"));
  EXPECT_THAT(result.out, HasSubstr("COMPILE_ERROR  transpose"));
  EXPECT_THAT(result.out, HasSubstr("error: too many resources requested\n"));
  EXPECT_THAT(result.out, HasSubstr("job job-7 SUCCEEDED: 2 problems"));
  EXPECT_THAT(result.out, HasSubstr("flash_attn  batch=16  bf16"));

  const v1::SubmitJobRequest& sent = server_.calls().submit_job;
  EXPECT_EQ(sent.spec().manifest().items(0).family(), "transpose");
  EXPECT_EQ(sent.spec().options().shard_index(), 1);
  EXPECT_EQ(sent.spec().options().shard_count(), 4);
  EXPECT_TRUE(sent.spec().options().compile_only());
}

TEST_F(WarmupTest, CompileOnlyRefusesTheFlagsThatSayHowToMeasure) {
  CliResult result = Run({"warmup", manifest_, "--compile-only", "--force"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err,
              HasSubstr("--force says how to measure; --compile-only measures nothing"));
  result = Run({"warmup", manifest_, "--compile-only", "--serial-max", "2", "--candidates", "3",
                "--quiet-wait", "5"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--quiet-wait, --candidates, --serial-max say how to measure; "
                                    "--compile-only measures nothing"));
  EXPECT_FALSE(server_.calls().submit_job.has_spec()) << "nothing was submitted";
}

v1::ProblemReport SampleReport() {
  v1::ProblemReport report;
  report.set_family("flash_attn");
  (*report.mutable_problem()->mutable_dims())["batch"] = 16;
  report.mutable_problem()->set_dtype(v1::BFLOAT16);
  *report.mutable_entry() = SampleEntry();
  report.mutable_entry()->set_tie(true);
  report.mutable_entry()->set_tied(2);
  report.set_speedup(1.5);
  (*report.mutable_status_counts())["OK"] = 1204;
  return report;
}

TEST_F(WarmupTest, PrintsTheReportAndWritesItAsMarkdownAndCsv) {
  AddProgress(v1::SUCCEEDED);
  v1::Job& job = *server_.answers().progress.back().mutable_job();
  *job.add_results() = SampleEntry();
  *job.add_results() = SampleEntry();
  *job.add_reports() = SampleReport();
  job.mutable_timing()->set_elapsed_s(75);
  const std::string markdown = File("report.md");
  const std::string csv = File("report.csv");

  const CliResult result = Run({"warmup", manifest_, "--report-md", markdown, "--report-csv", csv});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr(RenderReportText(job)));
  EXPECT_THAT(result.out, HasSubstr("flash_attn  batch=16  bf16   BLOCK_M=128"));
  EXPECT_THAT(result.out, HasSubstr("tie(2)"));
  EXPECT_THAT(result.out, HasSubstr("variants: OK 1,204\n"));
  EXPECT_THAT(result.out, Not(HasSubstr("DEVICE"))) << "the report replaces the entry table";
  ASSERT_OK_AND_ASSIGN(const std::string written_markdown, ReadFile(markdown));
  EXPECT_EQ(written_markdown, RenderReportMarkdown(job));
  EXPECT_THAT(written_markdown, StartsWith("## Warmup job job-7: SUCCEEDED\n"));
  ASSERT_OK_AND_ASSIGN(const std::string written_csv, ReadFile(csv));
  EXPECT_EQ(written_csv, RenderReportCsv(job));
  EXPECT_THAT(written_csv, HasSubstr("\nflash_attn,batch=16,bf16,BLOCK_M=128,41.5,"));
}

TEST_F(WarmupTest, WritesTheHtmlReportWithEveryProblemsMeasurements) {
  AddProgress(v1::SUCCEEDED);
  v1::Job& job = *server_.answers().progress.back().mutable_job();
  *job.add_results() = SampleEntry();
  *job.add_results() = SampleEntry();
  *job.add_reports() = SampleReport();
  v1::Measurement& screened = *server_.answers().entry.add_measurements();
  screened.set_status(v1::OK);
  screened.set_phase(v1::SCREEN);
  screened.mutable_timing()->set_median_us(43.75);
  const std::string html = File("report.html");

  const CliResult result = Run({"warmup", manifest_, "--report-html", html});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  ASSERT_OK_AND_ASSIGN(const std::string page, ReadFile(html));
  EXPECT_THAT(page, StartsWith("<!DOCTYPE html>"));
  EXPECT_THAT(page, HasSubstr("\"median_us\":43.75"));
  EXPECT_THAT(page, HasSubstr("\"id\":\"job-7\""));
  EXPECT_EQ(server_.calls().get_entry.family(), "flash_attn");
}

TEST_F(CliTest, ReportOfAFinishedJobPrintsItAndWritesItsFiles) {
  v1::Job& job = server_.answers().job;
  job.set_id("job-3");
  job.set_state(v1::SUCCEEDED);
  *job.add_reports() = SampleReport();
  const std::string csv = File("report.csv");
  const std::string html = File("report.html");

  const CliResult result = Run({"report", "job-3", "--report-csv", csv, "--report-html", html});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(server_.calls().get_job.id(), "job-3");
  EXPECT_THAT(result.out, HasSubstr("job job-3 SUCCEEDED"));
  EXPECT_THAT(result.out, HasSubstr(RenderReportText(job)));
  ASSERT_OK_AND_ASSIGN(const std::string written_csv, ReadFile(csv));
  EXPECT_EQ(written_csv, RenderReportCsv(job));
  ASSERT_OK_AND_ASSIGN(const std::string page, ReadFile(html));
  EXPECT_THAT(page, HasSubstr("\"id\":\"job-3\""));
}

TEST_F(CliTest, ReportOfAJobStillRunningIsRefusedAndWritesNothing) {
  server_.answers().job.set_id("job-4");
  server_.answers().job.set_state(v1::SCREENING);
  const std::string html = File("report.html");
  const CliResult result = Run({"report", "job-4", "--report-html", html});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_THAT(result.err, HasSubstr("FAILED_PRECONDITION: job job-4 is still SCREENING"));
  EXPECT_FALSE(ReadFile(html).ok());
}

TEST_F(CliTest, ReportFileFlagsNeedAName) {
  const CliResult result = Run({"report", "job-4", "--report-html", ""});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("--report-html needs a file name"));
}

TEST_F(WarmupTest, WithoutReportsTheEntryTableIsPrinted) {
  AddProgress(v1::SUCCEEDED);
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  const CliResult result = Run({"warmup", manifest_});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("FAMILY      DIMS      DTYPE  DEVICE"));
}

TEST_F(WarmupTest, AReportThatCannotBeWrittenNamesTheFile) {
  AddProgress(v1::SUCCEEDED);
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  *server_.answers().progress.back().mutable_job()->add_reports() = SampleReport();
  const std::string csv = File("missing-dir/report.csv");
  const CliResult result = Run({"warmup", manifest_, "--report-csv", csv});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_THAT(result.err, HasSubstr(absl::StrCat("cannot write CSV report ", csv,
                                                 ": No such file or directory")));
  EXPECT_THAT(result.out, HasSubstr("flash_attn  batch=16")) << "the report was printed first";
}

// Every flag of a warmup, as the table shared with the Python client's test
// says: what reaches the wire, or which flag is refused with nothing sent.
TEST_F(WarmupTest, EveryFlagReachesTheWireAsTheSharedTableSays) {
  absl::StatusOr<std::string> text =
      ReadFile(AUTOTUNE_CLIENT_SHARED_TESTDATA "/warmup_options.json");
  ASSERT_OK(text);
  google::protobuf::Struct table;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*text, &table).ok());
  const google::protobuf::ListValue& cases = table.fields().at("cases").list_value();
  ASSERT_GT(cases.values_size(), 40);
  AddProgress(v1::SUCCEEDED);  // every job submitted ends at once
  for (const google::protobuf::Value& value : cases.values()) {
    const google::protobuf::Struct& c = value.struct_value();
    std::vector<std::string> words = {"autotune", "--server", server_.address(), "warmup",
                                      manifest_};
    for (const google::protobuf::Value& word : c.fields().at("cli").list_value().values()) {
      words.push_back(word.string_value());
    }
    const std::string flags = absl::StrJoin(words.begin() + 5, words.end(), " ");
    const size_t calls_before = server_.calls().methods.size();
    if (c.fields().contains("error")) {
      const CliResult result = RunWords(words);
      EXPECT_EQ(result.exit_code, kExitUsage) << flags << ": " << result.err;
      EXPECT_THAT(
          result.err,
          HasSubstr(c.fields().at("error").struct_value().fields().at("cli").string_value()))
          << flags;
      EXPECT_EQ(server_.calls().methods.size(), calls_before) << flags;
      continue;
    }
    const CliResult result = RunWords(words);
    ASSERT_EQ(result.exit_code, kExitOk) << flags << ": " << result.err;
    std::string wire_json;
    ASSERT_TRUE(
        google::protobuf::util::MessageToJsonString(c.fields().at("wire"), &wire_json).ok());
    v1::JobOptions wire;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(wire_json, &wire).ok()) << wire_json;
    const auto calls = server_.calls();  // a copy: keep it while reading into it
    EXPECT_EQ(calls.submit_job.spec().options().DebugString(), wire.DebugString()) << flags;
  }
}

TEST_F(WarmupTest, ProgressSaysThePhaseHowFarAndHowLong) {
  auto add = [this](const std::string& phase, int64_t done, int64_t total, double elapsed_s,
                    double eta_s, const std::string& message = "", bool partial = false) {
    AddProgress(v1::SCREENING, message);
    v1::JobTiming& timing = *server_.answers().progress.back().mutable_timing();
    timing.set_phase(phase);
    timing.set_done(done);
    timing.set_total(total);
    timing.set_elapsed_s(elapsed_s);
    timing.set_eta_s(eta_s);
    timing.set_eta_partial(partial);
  };
  add("compile", 0, 40, 0.2, 12, "", /*partial=*/true);
  add("compile", 40, 40, 3, 0);
  add("screen", 0, 2940, 3.5, 0);
  add("screen", 100, 2940, 6, 90);  // same tenth: no line
  add("screen", 1204, 2940, 41, 38);
  add("serial", 0, 30, 80, 60, "waiting for a quiet GPU: pid 4121 (2.0 GiB)");
  add("serial", 0, 30, 85, 60, "waiting for a quiet GPU: pid 4121 (2.0 GiB)");
  add("serial", 30, 30, 140, 0);
  add("done", 30, 30, 141, 0);
  AddProgress(v1::SUCCEEDED);
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();

  const CliResult result = Run({"warmup", manifest_});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const std::string dot = "\u00b7";
  const std::string expected =
      absl::StrCat("  compile 0/40 compiles ", dot, " 0.2 s ", dot, " ETA > 12 s\n",     //
                   "  compile 40/40 compiles ", dot, " 3.0 s\n",                         //
                   "  screen 0/2,940 variants ", dot, " 3.5 s\n",                        //
                   "  screen 1,204/2,940 variants ", dot, " 41 s ", dot, " ETA 38 s\n",  //
                   "job job-7: waiting for a quiet GPU: pid 4121 (2.0 GiB)\n",           //
                   "  serial 0/30 problems ", dot, " 1 min 20 s ", dot, " ETA 1 min 00 s\n",
                   "  serial 30/30 problems ", dot, " 2 min 20 s\n");
  EXPECT_THAT(result.out, HasSubstr(expected)) << result.out;
  EXPECT_THAT(result.out, Not(HasSubstr("100/2,940")));
}

TEST_F(WarmupTest, FailedJobExitsOne) {
  AddProgress(v1::FAILED);
  server_.answers().progress.back().mutable_job()->set_error("no GPU found");
  const CliResult result = Run({"warmup", manifest_});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_EQ(result.err.substr(result.err.find('\n') + 1), "");
  EXPECT_THAT(result.err, HasSubstr("job job-7 failed: no GPU found"));
}

// The daemon fails a job that left a problem without a valid config; the
// CLI exits with its state and says why.
TEST_F(WarmupTest, MeasuringJobWithRejectedVariantsSucceedsButOneWithoutAConfigFails) {
  AddProgress(v1::SUCCEEDED);
  v1::Job* job = server_.answers().progress.back().mutable_job();
  job->mutable_counts()->set_measured(10);
  job->mutable_counts()->set_ok(6);
  job->mutable_counts()->set_wrong_result(4);
  *job->add_results() = SampleEntry();
  *job->add_results() = SampleEntry();
  CliResult result = Run({"warmup", manifest_});
  EXPECT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_THAT(result.out, HasSubstr("10 measured: 6 ok, 4 wrong result"));

  job->mutable_results()->RemoveLast();
  job->set_state(v1::FAILED);
  job->set_error("1 problems have no valid variant; first: transpose n=8192 fp32: ...");
  result = Run({"warmup", manifest_});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_THAT(result.err, HasSubstr("failed: 1 problems have no valid variant"));
  EXPECT_THAT(result.err, HasSubstr("transpose n=8192 fp32"));
}

TEST_F(WarmupTest, UnimplementedIsReportedAsSuch) {
  server_.answers().status =
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "method SubmitJob not implemented");
  const CliResult result = Run({"warmup", manifest_});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_EQ(result.err, "autotune: warmup: UNIMPLEMENTED: method SubmitJob not implemented\n");
}

TEST_F(WarmupTest, BadShardIsAUsageError) {
  const CliResult result = Run({"warmup", manifest_, "--shard", "4/4"});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_THAT(result.err, HasSubstr("invalid --shard '4/4'"));
  EXPECT_THAT(server_.calls().methods, IsEmpty());
}

TEST_F(WarmupTest, BadManifestNamesFileAndLine) {
  std::ofstream(manifest_) << "items {\n  family: \"transpose\"\n  colour: 3\n}\n";
  const CliResult result = Run({"warmup", manifest_});
  EXPECT_EQ(result.exit_code, kExitError);
  EXPECT_THAT(result.err, HasSubstr(absl::StrCat("manifest ", manifest_, ":3:")));
  EXPECT_THAT(server_.calls().methods, IsEmpty());
}

TEST_F(WarmupTest, JsonPrintsTheJobAndSendsProgressToStderr) {
  AddProgress(v1::QUEUED);
  AddProgress(v1::SUCCEEDED);
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  *server_.answers().progress.back().mutable_job()->add_results() = SampleEntry();
  const CliResult result = Run({"warmup", manifest_, "--json"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &job).ok()) << result.out;
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_THAT(result.err, HasSubstr("job job-7 submitted"));
}

}  // namespace
}  // namespace autotune::client
