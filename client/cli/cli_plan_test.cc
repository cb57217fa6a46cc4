// `autotune plan` as a user runs it: the exit status, what goes to stdout
// and stderr, and the file it writes. What it plans is model_plan_test.cc's.
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "client/cli/cli.h"
#include "client/cli/cli_flags.h"
#include "client/cli/model_testdata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/manifest.h"

namespace autotune::client {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

struct PlanRun {
  int exit_code;
  std::string out;
  std::string err;
};

// `autotune plan args...`: no daemon is involved.
PlanRun RunPlan(const std::vector<std::string>& args) {
  std::vector<std::string> words = {"autotune", "plan"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const std::string& word : words) argv.push_back(word.c_str());
  std::ostringstream out;
  std::ostringstream err;
  const int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(CliPlanTest, PrintsTheManifestAndSaysWhatWasDroppedOnStderr) {
  // The built-in families as a binary of the build tree finds them.
  const PlanRun run = RunPlan({ModelFile("llama3_8b_gqa.json")});
  ASSERT_EQ(run.exit_code, kExitOk) << run.err;
  ASSERT_OK_AND_ASSIGN(v1::Manifest manifest, ParseManifestText(run.out, "stdout"));
  EXPECT_EQ(manifest.arch(), "sm_90a");
  EXPECT_THAT(manifest.items(), SizeIs(6));
  EXPECT_THAT(run.out, StartsWith("# proto-file: proto/autotune.proto\n"));
  // softmax over a vocab of 128256: one line per M bucket.
  const std::vector<std::string> dropped = Lines(run.err);
  EXPECT_THAT(dropped, SizeIs(18));
  EXPECT_THAT(dropped, Each(StartsWith("autotune: plan: dropped softmax hidden=128256,rows=")));
  EXPECT_THAT(dropped[0],
              HasSubstr("rows=1 bf16 (softmax over lm_head's logits: rows = M, hidden = 128256): "
                        "no valid config for sm_90a: each of its 168 configs fails a constraint"));
}

TEST(CliPlanTest, WritesTheFileThatTuneReads) {
  ::autotune::testing::TempDir dir;
  const std::string out = dir.File("mixtral.manifest");
  const PlanRun run = RunPlan({ModelFile("mixtral_8x7b_moe.json"), "--tp", "2", "--m-buckets",
                               "1,16,256", "-o", out, "--kernels", AUTOTUNE_KERNELS_DIR});
  ASSERT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_EQ(run.out, absl::StrCat(out, ": 6 items, 18 problems for sm_90a\n"));
  EXPECT_THAT(Lines(run.err), SizeIs(3));
  ASSERT_OK_AND_ASSIGN(v1::Manifest manifest, kernels::LoadManifestFile(out));
  ASSERT_THAT(manifest.items(), SizeIs(6));
  EXPECT_EQ(manifest.items(0).family(), "gemm_bf16");
  EXPECT_EQ(manifest.items(0).dims(0).name(), "M");
  EXPECT_THAT(manifest.items(0).dims(0).values(), ::testing::ElementsAre(1, 16, 256));
  EXPECT_EQ(manifest.items(0).dims(1).values(0), 3072);
}

TEST(CliPlanTest, BucketsMayFollowTheFileAndArchIsWritten) {
  const PlanRun run = RunPlan({"--m-buckets", "4,64", ModelFile("llama2_7b_dense.json"), "--arch",
                               "sm_90", "--kernels", AUTOTUNE_KERNELS_DIR});
  ASSERT_EQ(run.exit_code, kExitOk) << run.err;
  ASSERT_OK_AND_ASSIGN(v1::Manifest manifest, ParseManifestText(run.out, "stdout"));
  EXPECT_EQ(manifest.arch(), "sm_90");
  EXPECT_THAT(manifest.items(0).dims(0).values(), ::testing::ElementsAre(4, 64));
}

TEST(CliPlanTest, BadFlagsAreUsageErrors) {
  const std::string file = ModelFile("llama3_8b_gqa.json");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{file, "--tp", "0"},
                                             {file, "--arch", "sm90"},
                                             {file, "--m-buckets", "1,1"},
                                             {file, "--m-buckets", "1,x"},
                                             {}}) {
    const PlanRun run = RunPlan(args);
    EXPECT_EQ(run.exit_code, kExitUsage) << run.err;
    EXPECT_THAT(run.err, StartsWith("autotune: plan: "));
    EXPECT_THAT(run.out, IsEmpty());
  }
  EXPECT_EQ(RunPlan({file, "--m-buckets", "1,1"}).err,
            "autotune: plan: --m-buckets: 1 is listed twice\n");
  EXPECT_EQ(RunPlan({file, "--m-buckets", "1,x"}).err,
            "autotune: plan: --m-buckets: 'x' is not an integer\n");
}

TEST(CliPlanTest, ABadConfigFailsNamingTheFileAndKey) {
  const std::string file = ModelFile("llama3_8b_gqa.json");
  const PlanRun run = RunPlan({file, "--tp", "3"});
  EXPECT_EQ(run.exit_code, kExitError);
  EXPECT_EQ(run.err, absl::StrCat("autotune: plan: INVALID_ARGUMENT: ", file,
                                  ": num_attention_heads: 32 is not divisible by --tp 3\n"));
  EXPECT_THAT(run.out, IsEmpty());

  ::autotune::testing::TempDir dir;
  ASSERT_OK(WriteFileAtomically(dir.File("config.json"), "not json"));
  const PlanRun not_json = RunPlan({dir.File("config.json")});
  EXPECT_EQ(not_json.exit_code, kExitError);
  EXPECT_THAT(not_json.err,
              StartsWith(absl::StrCat("autotune: plan: INVALID_ARGUMENT: ", dir.File("config.json"),
                                      ": not a JSON object: ")));
  EXPECT_THAT(Lines(not_json.err), SizeIs(1));
}

TEST(CliPlanTest, AFolderWithoutTheFamiliesIsNotFoundAndNothingIsWritten) {
  ::autotune::testing::TempDir dir;
  const PlanRun run = RunPlan(
      {ModelFile("llama3_8b_gqa.json"), "--kernels", dir.path(), "-o", dir.File("out.manifest")});
  EXPECT_EQ(run.exit_code, kExitError);
  EXPECT_THAT(run.err, AllOf(StartsWith("autotune: plan: NOT_FOUND: "), HasSubstr("gemm_bf16")));
  EXPECT_FALSE(ReadFile(dir.File("out.manifest")).ok());
}

}  // namespace
}  // namespace autotune::client
