// End to end: kernel families registered through the CLI and compile-only
// warmup jobs run by the real daemon and its autotune-worker processes,
// with the real NVRTC.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/subprocess.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"
#include "tests/support/daemon_test.h"
#include "tests/support/host_files.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class WarmupEndToEndTest : public DaemonTest {
 protected:
  void SetUp() override {
    cli_timeout_ = absl::Minutes(5);
    ASSERT_OK(StartDaemon({"--kernels", "none", "--compile-workers", "2"}));
    // A copy of the small test family, so tests can change its source.
    const std::string testdata = AUTOTUNE_KERNELS_TESTDATA;
    WriteText(Path("axpy.textproto"), ReadText(testdata + "/good/axpy.textproto"));
    WriteText(Path("axpy.cu"), ReadText(testdata + "/good/axpy.cu"));
    WriteText(Path("axpy.manifest"),
              "arch: \"sm_90\"\n"
              "items { family: \"axpy\" dims { name: \"n\" values: [1024, 4096] } "
              "dtypes: [FLOAT32, FLOAT16] }\n");
  }
  void TearDown() override { StopDaemon(); }

  // Runs a compile-only warmup and returns the finished job (from --json).
  v1::Job Warmup(std::vector<std::string> extra = {}, int expected_exit = 0) {
    std::vector<std::string> args = {"warmup", Path("axpy.manifest"), "--compile-only", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult result = Cli(args);
    EXPECT_EQ(result.exit_code, expected_exit) << result.err << result.out << daemon_->Stderr();
    v1::Job job;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &job).ok())
        << result.out << result.err;
    last_err_ = result.err;
    return job;
  }

  std::string last_err_;
};

TEST_F(WarmupEndToEndTest, CompilesEveryVariantOnceThenHitsTheCache) {
  CommandResult registered = Cli({"register", Path("axpy.textproto")});
  ASSERT_EQ(registered.exit_code, 0) << registered.err;
  EXPECT_THAT(registered.out, HasSubstr("axpy registered"));

  v1::Job first = Warmup();
  EXPECT_EQ(first.state(), v1::SUCCEEDED) << first.error();
  // axpy has 19 valid configs per problem; 2 n values x 2 dtypes.
  EXPECT_EQ(first.counts().problems(), 4);
  EXPECT_EQ(first.counts().variants(), 4 * 19);
  // The n value is a run-time argument: one compile per config and dtype,
  // plus the reference per dtype.
  EXPECT_EQ(first.counts().compiles(), 2 * 19 + 2);
  EXPECT_EQ(first.counts().compiled(), first.counts().compiles());
  EXPECT_EQ(first.counts().compile_errors(), 0);

  EXPECT_EQ(first.arch(), "sm_90");

  // Without --json the report says what a compile-only job did and did not.
  CommandResult again_text = Cli({"warmup", Path("axpy.manifest"), "--compile-only"});
  EXPECT_EQ(again_text.exit_code, 0) << again_text.err;
  EXPECT_THAT(again_text.out, HasSubstr("compile-only for sm_90: 0 variants compiled, 40 found "
                                        "compiled before, 0 failed; nothing was measured"));
  EXPECT_THAT(again_text.out, Not(HasSubstr("MEDIAN_US")));

  v1::Job again = Warmup();
  EXPECT_EQ(again.state(), v1::SUCCEEDED);
  EXPECT_EQ(again.counts().compiled(), 0);
  EXPECT_EQ(again.counts().compile_cache_hits(), first.counts().compiles());

  // The job is kept and listed.
  CommandResult jobs = Cli({"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr(first.id()));
}

// Shards of one manifest, each its own job: together every problem once.
TEST_F(WarmupEndToEndTest, ShardsCoverTheManifestOnceBetweenThem) {
  ASSERT_EQ(Cli({"register", Path("axpy.textproto")}).exit_code, 0);
  const v1::Job whole = Warmup();
  ASSERT_EQ(whole.reports_size(), 4);
  std::set<std::string> expected;
  for (const v1::ProblemReport& report : whole.reports()) {
    expected.insert(ProblemContext(report.family(), report.problem()));
  }
  ASSERT_EQ(expected.size(), 4u);
  std::multiset<std::string> covered;
  for (int i = 0; i < 3; ++i) {
    const v1::Job shard = Warmup({"--shard", absl::StrCat(i, "/3")});
    EXPECT_EQ(shard.state(), v1::SUCCEEDED) << shard.error();
    EXPECT_EQ(shard.counts().problems(), shard.reports_size());
    for (const v1::ProblemReport& report : shard.reports()) {
      covered.insert(ProblemContext(report.family(), report.problem()));
    }
  }
  EXPECT_EQ(std::set<std::string>(covered.begin(), covered.end()), expected);
  EXPECT_EQ(covered.size(), expected.size());  // no problem in two shards
}

TEST_F(WarmupEndToEndTest, ANewSourceGetsNewBinariesAndTheOldOnesStay) {
  ASSERT_EQ(Cli({"register", Path("axpy.textproto")}).exit_code, 0);
  v1::Job first = Warmup();
  ASSERT_EQ(first.counts().compile_errors(), 0);
  // The hash as `kernels` prints it (12 digits) selects the version, and
  // --dtype selects without --dims.
  CommandResult kernels = Cli({"kernels"});
  std::string printed;
  for (absl::string_view line : absl::StrSplit(kernels.out, '\n')) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() > 1 && words[0] == "axpy") printed = words[1];
  }
  ASSERT_EQ(printed.size(), 12u) << kernels.out;
  CommandResult by_prefix = Cli({"ls", "--family", "axpy", "--hash", printed, "--json"});
  EXPECT_EQ(by_prefix.exit_code, 0) << by_prefix.err;  // a compile-only job: no entries
  CommandResult unknown = Cli({"ls", "--family", "axpy", "--hash", "0123456789ab"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("family 'axpy' has no version 0123456789ab"));
  CommandResult by_dtype = Cli({"ls", "--family", "axpy", "--dtype", "fp32"});
  EXPECT_EQ(by_dtype.exit_code, 0) << by_dtype.err;
  CommandResult wrong_dtype = Cli({"ls", "--family", "axpy", "--dtype", "bf16"});
  EXPECT_EQ(wrong_dtype.exit_code, 1);
  EXPECT_THAT(wrong_dtype.err,
              HasSubstr("filter.problem.dtype: bf16 is not supported by family 'axpy'"));
  CommandResult stats_before = Cli({"stats", "--json"});
  v1::StatsResponse before;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(stats_before.out, &before).ok());

  // A new global changes every cubin (a comment alone would change the
  // family's hash but not the bytes, and binaries are stored by content).
  WriteText(Path("axpy.cu"), ReadText(Path("axpy.cu")) + "\n__device__ int axpy_revision = 2;\n");
  CommandResult refused = Cli({"register", Path("axpy.textproto")});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("ALREADY_EXISTS"));
  EXPECT_THAT(refused.err, HasSubstr("(autotune register --replace) to make this version current"));
  CommandResult replaced = Cli({"register", Path("axpy.textproto"), "--replace"});
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;

  v1::Job second = Warmup();
  EXPECT_EQ(second.counts().compiled(), second.counts().compiles());
  EXPECT_EQ(second.counts().compile_cache_hits(), 0);
  CommandResult stats_after = Cli({"stats", "--json"});
  v1::StatsResponse after;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(stats_after.out, &after).ok());
  // Old binaries are still there (and nothing is collectable: the compile
  // cache refers to them).
  EXPECT_EQ(after.binaries(), before.binaries() * 2);
  CommandResult gc = Cli({"gc", "--dry-run", "--json"});
  v1::GarbageCollectResponse collectable;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(gc.out, &collectable).ok()) << gc.out;
  EXPECT_EQ(collectable.binaries_removed(), 0);
}

TEST_F(WarmupEndToEndTest, BadDescriptorsAreRefusedNamingTheField) {
  std::string text = ReadText(Path("axpy.textproto"));
  WriteText(Path("bad.textproto"),
            absl::StrReplaceAll(text, {{"grid: \"ceil_div(n, BLOCK * ELEMS)\"",
                                        "grid: \"ceil_div(n, BLOK * ELEMS)\""}}));
  CommandResult result = Cli({"register", Path("bad.textproto")});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(result.err, HasSubstr("launch.grid[0]"));
  EXPECT_THAT(result.err, HasSubstr("BLOK"));
  CommandResult kernels = Cli({"kernels"});
  EXPECT_THAT(kernels.out, Not(HasSubstr("axpy")));
}

// Register compiles a new version's reference and default config first, so
// a source that does not compile, or a kernel that takes other arguments
// than the descriptor says, is refused before anything is stored.
TEST_F(WarmupEndToEndTest, RegisterRefusesASourceThatDoesNotCompileOrTakesOtherArguments) {
  WriteText(Path("axpy.cu"), ReadText(Path("axpy.cu")) + "\nthis is not C++;\n");
  CommandResult broken = Cli({"register", Path("axpy.textproto")});
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_THAT(broken.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(broken.err, HasSubstr("reference (fp32, fp16): does not compile"));
  EXPECT_THAT(broken.err, HasSubstr("axpy.cu("));

  WriteText(Path("axpy.cu"), ReadText(AUTOTUNE_KERNELS_TESTDATA "/good/axpy.cu"));
  WriteText(Path("int32.textproto"),
            absl::StrReplaceAll(ReadText(Path("axpy.textproto")),
                                {{"dtype: INT64 value: \"n\"", "dtype: INT32 value: \"n\""}}));
  CommandResult mismatch = Cli({"register", Path("int32.textproto")});
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_THAT(mismatch.err,
              HasSubstr("scalars[1]: reference (fp32, fp16): the kernel's parameter 4 "
                        "(of 4, counted from 1) is 8 bytes; the service passes "
                        "scalar 'count' (int32) there, 4 bytes: give scalars[1] "
                        "`dtype: FLOAT64` or `dtype: INT64`"));
  EXPECT_THAT(Cli({"kernels"}).out, Not(HasSubstr("axpy")));

  // What register refuses, check finds with no daemon.
  CommandResult checked = RunCommand({AutotuneCliPath(), "--server", "unix:///nonexistent/sock",
                                      "check", Path("int32.textproto")});
  EXPECT_EQ(checked.exit_code, 1);
  EXPECT_THAT(checked.err, HasSubstr("scalar 'count' (int32) there, 4 bytes"));
  CommandResult good = RunCommand({AutotuneCliPath(), "check", Path("axpy.textproto")});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_THAT(good.err, HasSubstr("warning: default_config: not set"));
  EXPECT_THAT(good.out, HasSubstr("compiled for sm_90"));

  CommandResult registered = Cli({"register", Path("axpy.textproto")});
  ASSERT_EQ(registered.exit_code, 0) << registered.err;
  EXPECT_THAT(registered.err, HasSubstr("warning: default_config: not set"));
}

// `check` reports every problem of a descriptor in one run, across the
// parse, the fields, the names and the compiles, each with its line: five
// mistakes, one round.
TEST_F(WarmupEndToEndTest, CheckReportsEveryProblemInOneRun) {
  WriteText(Path("five.textproto"),
            absl::StrReplaceAll(
                ReadText(Path("axpy.textproto")),
                {{"description:", "descripton:"},                                   // a field
                 {"values: [1, 2, 4, 8]", "values: []"},                            // a value
                 {"name: \"y\"\n  shape: \"n\"", "name: \"y\"\n  shape: \"m\""},    // a name
                 {"dtype: FLOAT32 value: \"1.5\"", "dtype: INT32 value: \"1.5\""},  // a dtype
                 {"dtype: INT64 value: \"n\"", "dtype: INT32 value: \"n\""}}));     // a size
  CommandResult checked = RunCommand({AutotuneCliPath(), "check", Path("five.textproto")});
  EXPECT_EQ(checked.exit_code, 1);
  const std::string file = Path("five.textproto");
  EXPECT_THAT(checked.err, HasSubstr("5 problems (compiles for sm_90):"));
  EXPECT_THAT(checked.err,
              HasSubstr(absl::StrCat(file,
                                     ":5:1: KernelFamily has no field 'descripton' (did you mean "
                                     "'description'?)")));
  EXPECT_THAT(checked.err, HasSubstr(absl::StrCat(
                               file, ":9: params[1].values: empty (list at least one value)")));
  EXPECT_THAT(checked.err, HasSubstr(absl::StrCat(file,
                                                  ":21: buffers[1].shape[0]: unknown name 'm' "
                                                  "(did you mean 'n'?)")));
  EXPECT_THAT(checked.err, HasSubstr(absl::StrCat(file,
                                                  ":25: scalars[0].value: '1.5' = 1.5 is not "
                                                  "an integer")));
  EXPECT_THAT(checked.err, HasSubstr(absl::StrCat(file,
                                                  ":26: scalars[1]: reference (fp32, fp16): "
                                                  "the kernel's parameter 4")));
  EXPECT_THAT(checked.err, HasSubstr("not compiled: the tuned kernel, until the problems above"));
  // register refuses the same file with the descriptor's problems.
  CommandResult registered = Cli({"register", Path("five.textproto")});
  EXPECT_EQ(registered.exit_code, 1);
  EXPECT_THAT(registered.err, HasSubstr("no field 'descripton'"));
  EXPECT_THAT(registered.err, HasSubstr("params[1].values: empty"));
}

// `check` passes or fails as `register` does wherever it is run: a header
// that lies beside the source but is not shipped in `headers` is found by
// neither, even when check runs in its folder.
TEST_F(WarmupEndToEndTest, CheckAgreesWithRegisterFromAnyWorkingDirectory) {
  WriteText(Path("axpy_helper.h"), "#define AXPY_HELPER 1\n");
  WriteText(Path("axpy.cu"), "#include \"axpy_helper.h\"\n" + ReadText(Path("axpy.cu")));
  CommandResult here = RunCommand(
      {"/bin/bash", "-c",
       absl::StrCat("cd '", Path(""), "' && '", AutotuneCliPath(), "' check axpy.textproto")},
      absl::Minutes(5));
  EXPECT_EQ(here.exit_code, 1) << here.out;
  const std::string refused = "#include \"axpy_helper.h\" is neither a header of the family's";
  EXPECT_THAT(here.err, HasSubstr(refused));
  CommandResult registered = Cli({"register", Path("axpy.textproto")});
  EXPECT_EQ(registered.exit_code, 1);
  EXPECT_THAT(registered.err, HasSubstr(refused));
}

// A variant that does not compile fails alone; the job says so with the log.
TEST_F(WarmupEndToEndTest, AVariantThatDoesNotCompileFailsTheRunWithTheLog) {
  WriteText(Path("axpy.cu"),
            "#if !defined(AUTOTUNE_REFERENCE) && ELEMS == 8\nthis is not C++;\n"
            "#endif\n" +
                ReadText(Path("axpy.cu")));
  ASSERT_EQ(Cli({"register", Path("axpy.textproto")}).exit_code, 0);
  v1::Job job = Warmup({}, /*expected_exit=*/1);
  // The job says it failed everywhere: its state, its error, the CLI.
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_GT(job.counts().compile_errors(), 0);
  EXPECT_LT(job.counts().compile_errors(), job.counts().compiles());
  // One error shared by every failing variant is said once, with its count.
  EXPECT_THAT(job.error(), HasSubstr(absl::StrCat(job.counts().compile_errors(),
                                                  " variants failed to compile:\n  ",
                                                  job.counts().compile_errors(), " x axpy.cu(2)")));
  EXPECT_THAT(last_err_, HasSubstr("COMPILE_ERROR"));
  EXPECT_THAT(last_err_, HasSubstr("FAILED"));
  CommandResult jobs = Cli({"jobs"});
  EXPECT_THAT(jobs.out, HasSubstr("FAILED"));
}

// Unregister removes every version; it is refused while entries or
// measurements exist, unless told to invalidate them, and for a built-in.
TEST_F(WarmupEndToEndTest, UnregisterRemovesAFamilyAndItsCompiles) {
  ASSERT_EQ(Cli({"register", Path("axpy.textproto")}).exit_code, 0);
  ASSERT_EQ(Warmup().counts().compile_errors(), 0);
  CommandResult removed = Cli({"unregister", "axpy"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_THAT(removed.out, HasSubstr("kernel family axpy unregistered (1 versions, 0 entries"));
  EXPECT_THAT(Cli({"kernels"}).out, Not(HasSubstr("axpy")));
  CommandResult again = Cli({"unregister", "axpy"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("NOT_FOUND: unknown family 'axpy'"));
  // Its compiles went with it: registered again, every variant compiles anew.
  ASSERT_EQ(Cli({"register", Path("axpy.textproto")}).exit_code, 0);
  v1::Job fresh = Warmup();
  EXPECT_EQ(fresh.counts().compile_cache_hits(), 0);
}

TEST_F(WarmupEndToEndTest, ACompilePastItsDeadlineIsATimeoutAndIsNotCached) {
  ASSERT_EQ(Cli({"register", Path("axpy.textproto")}).exit_code, 0);
  v1::Job late = Warmup({"--compile-timeout", "0.000001"}, /*expected_exit=*/1);
  EXPECT_GT(late.counts().compile_timeouts(), 0);
  EXPECT_EQ(late.counts().compile_errors(), late.counts().compiles());
  EXPECT_THAT(last_err_, HasSubstr("COMPILE_TIMEOUT"));
  // The daemon replaced its workers and compiles normally afterwards.
  v1::Job next = Warmup();
  EXPECT_EQ(next.counts().compile_errors(), 0);
  EXPECT_EQ(next.counts().compiled(), next.counts().compiles());
}

TEST(BuiltinFamiliesEndToEndTest, TheDaemonRegistersItsBuiltinFamilies) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_OK(daemon.Start());
  CommandResult kernels = RunCommand({AutotuneCliPath(), "--server", daemon.address(), "kernels"});
  EXPECT_EQ(kernels.exit_code, 0) << kernels.err;
  for (const char* name : {"gla_decode", "rmsnorm", "softmax"}) {
    EXPECT_THAT(kernels.out, HasSubstr(name));
  }
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(ResumeEndToEndTest, AJobCutShortByACrashIsFinishedAfterTheRestart) {
  TempDir dir;
  auto daemon =
      std::make_unique<Daemon>(dir.path(), std::vector<std::string>{"--compile-workers", "2"});
  ASSERT_OK(daemon->Start());
  // One dtype and head size of gla_decode: about 50 distinct compiles, long
  // enough to kill the daemon in the middle.
  const std::string manifest = dir.path() + "/gla_decode_f32.manifest";
  ASSERT_OK(WriteFileAtomically(manifest,
                                "arch: \"sm_90\"\n"
                                "items { family: \"gla_decode\" dims { name: \"batch\" values: "
                                "[1, 8, 64] } dims { name: \"heads\" values: [32] } dims { name: "
                                "\"dim\" values: [64] } dtypes: [FLOAT32] }\n"));
  std::thread warmup([&] {
    RunCommand(
        {AutotuneCliPath(), "--server", daemon->address(), "warmup", manifest, "--compile-only"},
        absl::Minutes(10));
  });
  v1::Job started = WaitForNewestJob(
      daemon->address(),
      [](const v1::Job& job) {
        return job.state() == v1::COMPILING && job.counts().compiled() > 0;
      },
      absl::Minutes(2));
  ASSERT_EQ(started.state(), v1::COMPILING);
  daemon->Kill();
  warmup.join();

  auto restarted =
      std::make_unique<Daemon>(dir.path(), std::vector<std::string>{"--compile-workers", "2"});
  ASSERT_OK(restarted->Start());
  v1::Job finished = WaitForNewestJob(
      restarted->address(), [](const v1::Job& job) { return job.state() == v1::SUCCEEDED; },
      absl::Minutes(8));
  EXPECT_EQ(finished.id(), started.id());
  EXPECT_EQ(finished.state(), v1::SUCCEEDED) << finished.error();
  EXPECT_EQ(finished.counts().compile_errors(), 0);
  // What was compiled before the crash is not compiled again.
  EXPECT_GT(finished.counts().compile_cache_hits(), 0);
  EXPECT_EQ(finished.counts().compiled() + finished.counts().compile_cache_hits(),
            finished.counts().compiles());
  EXPECT_EQ(restarted->Stop(), 0) << restarted->Stderr();
}

// CI for one's own kernels: `tune --local` runs a private daemon that
// registers the families of --kernels beside the built-in ones, tunes, writes
// the bundle and goes; the exit status is the warmup's.
TEST_F(WarmupEndToEndTest, TuneLocalTunesTheFamiliesOfAFolderOnAPrivateDaemon) {
  ASSERT_EQ(mkdir(Path("mine").c_str(), 0700), 0);
  WriteText(Path("mine/axpy.textproto"), ReadText(Path("axpy.textproto")));
  WriteText(Path("mine/axpy.cu"), ReadText(Path("axpy.cu")));
  CommandResult refused = Cli({"warmup", Path("axpy.manifest"), "--kernels", Path("mine")});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("--kernels goes with --local"));

  CommandResult tuned = RunCommand(
      {AutotuneCliPath(), "tune", "--local", Path("axpy.manifest"), "--kernels", Path("mine"),
       "--compile-only", "--compile-workers", "2", "--bundle", Path("out.bundle.json")},
      absl::Minutes(5));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err << tuned.out;
  EXPECT_THAT(tuned.out, HasSubstr("local daemon in "));
  EXPECT_THAT(tuned.out, HasSubstr("compile-only for sm_90: 40 variants compiled"));
  EXPECT_THAT(tuned.out, HasSubstr("bundle " + Path("out.bundle.json") + ": 0 entries"));
  EXPECT_FALSE(ReadText(Path("out.bundle.json")).empty());
  // The private daemon and its folder are gone; the daemon of the test
  // never saw the family.
  const std::string folder =
      tuned.out.substr(tuned.out.find("local daemon in ") + 16, tuned.out.find('\n') - 16);
  EXPECT_FALSE(std::filesystem::exists(folder)) << folder;
  EXPECT_THAT(Cli({"kernels"}).out, Not(HasSubstr("axpy")));

  // Measuring needs a GPU: where there is none (CI), the run fails, says to
  // add --compile-only, and writes no bundle (it would hold nothing asked for).
  CommandResult measured =
      RunCommand({AutotuneCliPath(), "tune", "--local", Path("axpy.manifest"), "--kernels",
                  Path("mine"), "--compile-workers", "2", "--bundle", Path("measured.bundle.json")},
                 absl::Minutes(5));
  if (measured.exit_code != 0) {
    EXPECT_THAT(measured.err, HasSubstr("cannot measure on a GPU"));
    EXPECT_THAT(measured.err, HasSubstr("add --compile-only"));
    EXPECT_THAT(measured.out, HasSubstr("not written, the warmup failed"));
    EXPECT_FALSE(std::filesystem::exists(Path("measured.bundle.json")));
  }

  // A family that does not compile fails the run with the warmup's status.
  WriteText(Path("mine/axpy.cu"),
            "#if !defined(AUTOTUNE_REFERENCE) && ELEMS == 8\nnot C++;\n"
            "#endif\n" +
                ReadText(Path("axpy.cu")));
  CommandResult failed = RunCommand({AutotuneCliPath(), "tune", "--local", Path("axpy.manifest"),
                                     "--kernels", Path("mine"), "--compile-only"},
                                    absl::Minutes(5));
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_THAT(failed.err, HasSubstr("variants failed to compile"));
}

// `autotune tune --local` killed outright (SIGKILL, as an OOM kill or a CI
// timeout would end it) takes its private daemon with it.
TEST_F(WarmupEndToEndTest, ATuneLocalKilledOutrightLeavesNoDaemonRunning) {
  ASSERT_EQ(mkdir(Path("mine").c_str(), 0700), 0);
  WriteText(Path("mine/axpy.textproto"), ReadText(Path("axpy.textproto")));
  WriteText(Path("mine/axpy.cu"), ReadText(Path("axpy.cu")));
  const std::string cli = AutotuneCliPath();
  const std::string manifest = Path("axpy.manifest"), kernels = Path("mine");
  std::vector<char*> args = {
      const_cast<char*>(cli.c_str()),      const_cast<char*>("tune"),
      const_cast<char*>("--local"),        const_cast<char*>(manifest.c_str()),
      const_cast<char*>("--kernels"),      const_cast<char*>(kernels.c_str()),
      const_cast<char*>("--compile-only"), nullptr};
  const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(null, 0);
  // The private daemon's folder, which nobody removes once the command is
  // killed, goes into this test's folder.
  const char* tmpdir = getenv("TMPDIR");
  const std::string old_tmpdir = tmpdir == nullptr ? "" : tmpdir;
  setenv("TMPDIR", dir_.path().c_str(), 1);
  pid_t command = -1;
  const int spawned = SpawnTiedToThisThread(args, {{null, 1}, {null, 2}}, SIGKILL, &command);
  if (tmpdir == nullptr) {
    unsetenv("TMPDIR");
  } else {
    setenv("TMPDIR", old_tmpdir.c_str(), 1);
  }
  close(null);
  ASSERT_EQ(spawned, 0);
  std::vector<pid_t> daemons;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (daemons.empty() && absl::Now() < deadline) {
    daemons = ChildrenNamed(command, "autotuned");
    if (daemons.empty()) absl::SleepFor(absl::Milliseconds(5));
  }
  kill(command, SIGKILL);
  int status = 0;
  waitpid(command, &status, 0);
  ASSERT_EQ(daemons.size(), 1u) << "no private autotuned was seen";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the command ended before it was killed";
  const absl::Time gone_by = absl::Now() + absl::Seconds(30);
  while (!ProcessEnded(daemons[0]) && absl::Now() < gone_by) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(ProcessEnded(daemons[0])) << "autotuned " << daemons[0] << " outlived its command";
  if (!ProcessEnded(daemons[0])) kill(daemons[0], SIGKILL);
}

// A daemon's --kernels folders add to the built-in families.
TEST_F(WarmupEndToEndTest, KernelsFoldersAddToTheBuiltInFamilies) {
  StopDaemon();
  ASSERT_EQ(mkdir(Path("mine").c_str(), 0700), 0);
  WriteText(Path("mine/axpy.textproto"), ReadText(Path("axpy.textproto")));
  WriteText(Path("mine/axpy.cu"), ReadText(Path("axpy.cu")));
  ASSERT_OK(StartDaemon({"--kernels", Path("mine"), "--gpus", "none"}));
  const std::string listed = Cli({"kernels"}).out;
  EXPECT_THAT(listed, HasSubstr("axpy"));
  EXPECT_THAT(listed, HasSubstr("rmsnorm"));
  StopDaemon();
  // The same name twice fails the start, naming both folders.
  ASSERT_EQ(mkdir(Path("again").c_str(), 0700), 0);
  WriteText(Path("again/axpy.textproto"), ReadText(Path("axpy.textproto")));
  WriteText(Path("again/axpy.cu"), ReadText(Path("axpy.cu")));
  daemon_ = std::make_unique<Daemon>(
      dir_.path(), std::vector<std::string>{"--kernels", "none", "--kernels", Path("mine"),
                                            "--kernels", Path("again")});
  EXPECT_FALSE(daemon_->Start().ok());
  EXPECT_THAT(daemon_->Stderr(), HasSubstr("family 'axpy' is defined both in"));
  daemon_.reset();
  ASSERT_OK(StartDaemon({"--kernels", "none", "--compile-workers", "2"}));
}

}  // namespace
}  // namespace autotune::testing
