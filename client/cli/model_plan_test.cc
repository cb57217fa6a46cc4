#include "client/cli/model_plan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "client/cli/model_testdata.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/manifest.h"
#include "kernels/search_space.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

const absl::flat_hash_map<std::string, v1::KernelFamily>& BuiltinFamilies() {
  static const auto* families = [] {
    auto* map = new absl::flat_hash_map<std::string, v1::KernelFamily>();
    absl::StatusOr<std::vector<v1::KernelFamily>> loaded =
        kernels::LoadFamilyDirectory(AUTOTUNE_KERNELS_DIR);
    EXPECT_OK(loaded.status());
    if (loaded.ok()) {
      for (v1::KernelFamily& family : *loaded) map->emplace(family.name(), std::move(family));
    }
    return map;
  }();
  return *families;
}

// "gemm_bf16 N=6144 K=4096": an item by its family and fixed dims.
std::string ItemText(const PlanItem& item) {
  std::string text = item.family;
  for (const auto& [name, value] : item.dims) absl::StrAppend(&text, " ", name, "=", value);
  return text;
}

absl::StatusOr<ModelPlan> CheckedPlan(const std::string& file, int64_t tp) {
  ASSIGN_OR_RETURN(ModelConfig model, ReadModelConfigFile(ModelFile(file)));
  PlanOptions options;
  options.tp = tp;
  ASSIGN_OR_RETURN(ModelPlan plan, PlanModel(model, options));
  RETURN_IF_ERROR(CheckPlanProblems(BuiltinFamilies(), plan));
  return plan;
}

struct PlanCase {
  std::string file;
  int64_t tp;
  // The items kept, each over every default M bucket, in order.
  std::vector<std::string> items;
  // The items none of whose buckets has a valid config for sm_90a.
  std::vector<std::string> dropped;
};

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.file << " at tp " << c.tp; }

class PlanCaseTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanCaseTest, PlansExactlyTheProblemsOfOneRank) {
  const PlanCase& c = GetParam();
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, CheckedPlan(c.file, c.tp));
  const std::vector<int64_t> buckets = PlanOptions().m_buckets;
  ASSERT_THAT(buckets, SizeIs(18));
  std::vector<std::string> kept;
  std::vector<std::string> dropped;
  for (const PlanItem& item : plan.items) {
    EXPECT_EQ(item.dtype, v1::BFLOAT16);
    if (!item.buckets.empty()) {
      kept.push_back(ItemText(item));
      EXPECT_EQ(item.buckets, buckets) << ItemText(item);
      EXPECT_THAT(item.dropped, IsEmpty()) << ItemText(item);
    } else {
      dropped.push_back(ItemText(item));
      EXPECT_THAT(item.dropped, SizeIs(buckets.size())) << ItemText(item);
    }
  }
  EXPECT_THAT(kept, ElementsAreArray(c.items));
  EXPECT_THAT(dropped, ElementsAreArray(c.dropped));
  EXPECT_THAT(DroppedProblemLines(plan), SizeIs(18 * c.dropped.size()));
}

// softmax's rows are whole warps of at most 64 elements a thread, at most
// 1024 threads: no vocab of these models fits.
INSTANTIATE_TEST_SUITE_P(
    Models, PlanCaseTest,
    ::testing::Values(
        PlanCase{"llama2_7b_dense.json",
                 1,
                 {"gemm_bf16 N=12288 K=4096", "gemm_bf16 N=4096 K=4096", "gemm_bf16 N=22016 K=4096",
                  "gemm_bf16 N=4096 K=11008", "gemm_bf16 N=32000 K=4096", "rmsnorm hidden=4096"},
                 {"softmax hidden=32000"}},
        PlanCase{"llama2_7b_dense.json",
                 2,
                 {"gemm_bf16 N=6144 K=4096", "gemm_bf16 N=4096 K=2048", "gemm_bf16 N=11008 K=4096",
                  "gemm_bf16 N=4096 K=5504", "gemm_bf16 N=16000 K=4096", "rmsnorm hidden=4096"},
                 {"softmax hidden=16000"}},
        PlanCase{"llama3_8b_gqa.json",
                 1,
                 {"gemm_bf16 N=6144 K=4096", "gemm_bf16 N=4096 K=4096", "gemm_bf16 N=28672 K=4096",
                  "gemm_bf16 N=4096 K=14336", "gemm_bf16 N=128256 K=4096", "rmsnorm hidden=4096"},
                 {"softmax hidden=128256"}},
        PlanCase{"llama3_8b_gqa.json",
                 2,
                 {"gemm_bf16 N=3072 K=4096", "gemm_bf16 N=4096 K=2048", "gemm_bf16 N=14336 K=4096",
                  "gemm_bf16 N=4096 K=7168", "gemm_bf16 N=64128 K=4096", "rmsnorm hidden=4096"},
                 {"softmax hidden=64128"}},
        PlanCase{"mixtral_8x7b_moe.json",
                 1,
                 {"gemm_bf16 N=6144 K=4096", "gemm_bf16 N=4096 K=4096", "gemm_bf16 N=28672 K=4096",
                  "gemm_bf16 N=4096 K=14336", "gemm_bf16 N=32000 K=4096", "rmsnorm hidden=4096"},
                 {"softmax hidden=32000"}},
        PlanCase{"mixtral_8x7b_moe.json",
                 2,
                 {"gemm_bf16 N=3072 K=4096", "gemm_bf16 N=4096 K=2048", "gemm_bf16 N=14336 K=4096",
                  "gemm_bf16 N=4096 K=7168", "gemm_bf16 N=16000 K=4096", "rmsnorm hidden=4096"},
                 {"softmax hidden=16000"}}),
    [](const ::testing::TestParamInfo<PlanCase>& info) {
      std::string name = info.param.file.substr(0, info.param.file.find('.'));
      return absl::StrCat(name, "_tp", info.param.tp);
    });

TEST(ModelPlanTest, EveryWrittenManifestLoadsAndExpandsToItsProblems) {
  ::autotune::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  for (const std::string file :
       {"llama2_7b_dense.json", "llama3_8b_gqa.json", "mixtral_8x7b_moe.json"}) {
    for (const int64_t tp : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(file, " tp ", tp));
      ASSERT_OK_AND_ASSIGN(ModelPlan plan, CheckedPlan(file, tp));
      const std::string path = dir.File(absl::StrCat(file, ".", tp, ".manifest"));
      ASSERT_OK(WriteFileAtomically(path, ManifestText(plan)));
      ASSERT_OK_AND_ASSIGN(v1::Manifest loaded, kernels::LoadManifestFile(path));
      const v1::Manifest planned = PlanManifest(plan);
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(loaded, planned))
          << loaded.DebugString() << "\nplanned:\n"
          << planned.DebugString();
      EXPECT_EQ(loaded.arch(), "sm_90a");
      ASSERT_OK_AND_ASSIGN(std::vector<kernels::ManifestProblem> problems,
                           kernels::ExpandManifest(loaded, BuiltinFamilies()));
      EXPECT_THAT(problems, SizeIs(6 * 18));  // five projections and rmsnorm
      // What a warmup expands, for the first problem of each family, of one
      // model at tp 1 (gemm_bf16's whole space costs a third of a second a
      // problem, ten seconds under ASan).
      if (tp != 1 || file != "llama3_8b_gqa.json") continue;
      kernels::DeviceLimits limits;
      limits.arch = loaded.arch();
      std::set<std::string> expanded;
      for (int item = 0; item < loaded.items_size(); ++item) {
        if (!expanded.insert(loaded.items(item).family()).second) continue;
        const auto first =
            std::find_if(problems.begin(), problems.end(),
                         [item](const kernels::ManifestProblem& p) { return p.item == item; });
        ASSERT_NE(first, problems.end());
        ASSERT_OK_AND_ASSIGN(kernels::SearchSpace space,
                             kernels::ExpandSearchSpace(BuiltinFamilies().at(first->family),
                                                        first->problem, limits));
        EXPECT_THAT(space.variants, Not(IsEmpty())) << first->family;
      }
    }
  }
}

TEST(ModelPlanTest, TheManifestSaysWhichModelTpAndWhatEachItemIs) {
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, CheckedPlan("mixtral_8x7b_moe.json", 2));
  const std::string text = ManifestText(plan);
  EXPECT_THAT(text, HasSubstr("/models/mixtral_8x7b_moe.json (MixtralForCausalLM)"));
  EXPECT_THAT(text, HasSubstr("one rank of tensor parallelism 2 runs, for sm_90a"));
  EXPECT_THAT(text, HasSubstr("8 experts, 2 per token"));
  EXPECT_THAT(text, HasSubstr("per-expert products at the per-expert token count"));
  EXPECT_THAT(text, HasSubstr("# qkv_proj (q, k and v fused): N = (16 + 2 * 4 heads) * 128, "
                              "K = 4096\nitems {"));
  EXPECT_THAT(text, HasSubstr("# experts' gate_up_proj (gate and up fused, per expert): N = 2 * "
                              "7168, K = 4096\nitems {"));
  EXPECT_THAT(text, HasSubstr("# experts' down_proj (per expert): N = 4096, K = 7168\nitems {"));
  EXPECT_THAT(text, HasSubstr("# Left out, no valid config of softmax for sm_90a: rows 1, 2, 4"));
  EXPECT_EQ(DroppedProblemLines(plan)[0],
            "softmax hidden=16000,rows=1 bf16 (softmax over lm_head's logits: rows = M, hidden = "
            "16000): no valid config for sm_90a: each of its 168 configs fails a constraint, "
            "most of them (90) constraints[2] '(hidden / (VEC * ITEMS)) % 32 == 0'");
}

TEST(ModelPlanTest, ProjectionsOfOneShapeAreOneItem) {
  // 2 * intermediate = (heads + 2 * kv_heads) * head_dim: gate_up and qkv share N x K.
  ASSERT_OK_AND_ASSIGN(ModelConfig model,
                       ParseModelConfig(R"({"hidden_size": 1024, "num_attention_heads": 8,
                                            "intermediate_size": 1536, "vocab_size": 4096})",
                                        "small.json"));
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, {}));
  ASSERT_THAT(plan.items, SizeIs(6));
  EXPECT_EQ(ItemText(plan.items[0]), "gemm_bf16 N=3072 K=1024");
  EXPECT_THAT(plan.items[0].what,
              ElementsAre("qkv_proj (q, k and v fused): N = (8 + 2 * 8 heads) * 128, K = 1024",
                          "gate_up_proj (gate and up fused): N = 2 * 1536, K = 1024"));
  EXPECT_EQ(ItemText(plan.items[1]), "gemm_bf16 N=1024 K=1024");
  EXPECT_EQ(ItemText(plan.items[2]), "gemm_bf16 N=1024 K=1536");
  EXPECT_EQ(ItemText(plan.items[3]), "gemm_bf16 N=4096 K=1024");
  ASSERT_OK(CheckPlanProblems(BuiltinFamilies(), plan));
  // softmax fits a row of 4096.
  EXPECT_THAT(DroppedProblemLines(plan), IsEmpty());
  EXPECT_THAT(ManifestText(plan),
              HasSubstr("# qkv_proj (q, k and v fused): N = (8 + 2 * 8 heads) * 128, K = 1024\n"
                        "# gate_up_proj (gate and up fused): N = 2 * 1536, K = 1024\n"
                        "items {\n  family: \"gemm_bf16\"\n"));
}

TEST(ModelPlanTest, KvHeadsFewerThanRanksAreReplicatedOnePerRank) {
  ASSERT_OK_AND_ASSIGN(ModelConfig model, ReadModelConfigFile(ModelFile("llama3_8b_gqa.json")));
  PlanOptions options;
  options.tp = 16;
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, options));
  EXPECT_EQ(ItemText(plan.items[0]), "gemm_bf16 N=512 K=4096");  // (2 + 2 * 1) * 128
}

TEST(ModelPlanTest, MBucketsReplaceTheDefault) {
  ASSERT_OK_AND_ASSIGN(ModelConfig model, ReadModelConfigFile(ModelFile("llama3_8b_gqa.json")));
  PlanOptions options;
  options.m_buckets = {8, 1, 300};
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, options));
  for (const PlanItem& item : plan.items) EXPECT_THAT(item.buckets, ElementsAre(8, 1, 300));
  EXPECT_THAT(ManifestText(plan), HasSubstr("dims { name: \"M\" values: [8, 1, 300] }"));
}

TEST(ModelPlanTest, DefaultsAndTheKeysTheyCameFrom) {
  ASSERT_OK_AND_ASSIGN(ModelConfig model, ReadModelConfigFile(ModelFile("llama2_7b_dense.json")));
  EXPECT_EQ(model.name, "LlamaForCausalLM");
  EXPECT_EQ(model.num_key_value_heads.value, 32);
  EXPECT_EQ(model.num_key_value_heads.key, "num_attention_heads");
  EXPECT_EQ(model.head_dim.value, 128);
  EXPECT_EQ(model.head_dim.key, "hidden_size / num_attention_heads");
  EXPECT_FALSE(model.moe());

  ASSERT_OK_AND_ASSIGN(ModelConfig mixtral,
                       ReadModelConfigFile(ModelFile("mixtral_8x7b_moe.json")));
  EXPECT_TRUE(mixtral.moe());
  EXPECT_EQ(mixtral.experts.key, "num_local_experts");
  EXPECT_EQ(mixtral.experts.value, 8);
  EXPECT_EQ(mixtral.experts_per_token.value, 2);
  EXPECT_EQ(mixtral.intermediate_size.value, 14336);
}

TEST(ModelPlanTest, MoeIntermediateSizeIsTheExperts) {
  ASSERT_OK_AND_ASSIGN(
      ModelConfig model,
      ParseModelConfig(R"({"hidden_size": 2048, "num_attention_heads": 16, "head_dim": 128,
                           "num_key_value_heads": 4, "vocab_size": 151936,
                           "intermediate_size": 6144, "moe_intermediate_size": 768,
                           "num_experts": 128, "num_experts_per_tok": 8})",
                       "qwen.json"));
  EXPECT_EQ(model.intermediate_size.value, 768);
  EXPECT_EQ(model.intermediate_size.key, "moe_intermediate_size");
  EXPECT_EQ(model.experts.key, "num_experts");
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, {}));
  EXPECT_EQ(ItemText(plan.items[0]), "gemm_bf16 N=3072 K=2048");
  EXPECT_EQ(ItemText(plan.items[1]), "gemm_bf16 N=2048 K=2048");
  EXPECT_EQ(ItemText(plan.items[2]), "gemm_bf16 N=1536 K=2048");
  EXPECT_EQ(ItemText(plan.items[3]), "gemm_bf16 N=2048 K=768");
}

TEST(ModelPlanTest, TextConfigIsReadFirstThenTheTopLevel) {
  ASSERT_OK_AND_ASSIGN(ModelConfig model,
                       ParseModelConfig(R"({"architectures": ["LlavaForConditionalGeneration"],
                           "vocab_size": 32064, "hidden_size": 1024,
                           "text_config": {"hidden_size": 4096, "num_attention_heads": 32,
                                           "intermediate_size": 11008}})",
                                        "llava.json"));
  EXPECT_EQ(model.name, "LlavaForConditionalGeneration");
  EXPECT_EQ(model.hidden_size.value, 4096);
  EXPECT_EQ(model.hidden_size.key, "text_config.hidden_size");
  EXPECT_EQ(model.vocab_size.value, 32064);
  EXPECT_EQ(model.vocab_size.key, "vocab_size");
}

TEST(ModelPlanTest, ANameThatIsNotPlainStaysOutOfTheManifest) {
  ASSERT_OK_AND_ASSIGN(ModelConfig model,
                       ParseModelConfig(R"({"architectures": ["X\nitems { family: \"evil\" }"],
                           "hidden_size": 1024, "num_attention_heads": 8,
                           "intermediate_size": 1536, "vocab_size": 4096})",
                                        "dir\nitems { family: \"evil\" }/config.json"));
  EXPECT_EQ(model.name, "");
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, {}));
  ::autotune::testing::TempDir dir;
  ASSERT_OK(WriteFileAtomically(dir.File("m.manifest"), ManifestText(plan)));
  ASSERT_OK_AND_ASSIGN(v1::Manifest loaded, kernels::LoadManifestFile(dir.File("m.manifest")));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(loaded, PlanManifest(plan)));
  EXPECT_THAT(ManifestText(plan), Not(HasSubstr("evil\" }\n")));
}

struct ErrorCase {
  std::string name;
  std::string json;
  int64_t tp;
  ::testing::Matcher<std::string> message;  // for the file "m.json"
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class ConfigErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrorTest, NamesTheFileAndTheKey) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<ModelConfig> model = ParseModelConfig(c.json, "m.json");
  absl::Status status = model.status();
  if (model.ok()) {
    PlanOptions options;
    options.tp = c.tp;
    status = PlanModel(*model, options).status();
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, c.message));
}

constexpr char kLlama[] =
    R"("hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 11008)";

INSTANTIATE_TEST_SUITE_P(
    Errors, ConfigErrorTest,
    ::testing::Values(
        ErrorCase{"Unterminated", "{\"hidden_size\": 4096", 1,
                  ::testing::StartsWith("m.json: not a JSON object: ")},
        ErrorCase{"TopLevelList", "[1, 2]", 1,
                  ::testing::StartsWith("m.json: not a JSON object: ")},
        ErrorCase{"Empty", "", 1, ::testing::StartsWith("m.json: not a JSON object: ")},
        ErrorCase{"MissingKey", R"({"num_attention_heads": 32, "vocab_size": 32000})", 1,
                  "m.json: hidden_size: missing"},
        ErrorCase{"String", R"({"hidden_size": "4096"})", 1,
                  R"(m.json: hidden_size: "4096" (a string) is not an integer)"},
        ErrorCase{"Fraction", R"({"hidden_size": 4096.5})", 1,
                  "m.json: hidden_size: 4096.5 is not an integer"},
        ErrorCase{"Bool", R"({"hidden_size": true})", 1,
                  "m.json: hidden_size: true is not an integer"},
        ErrorCase{"List", R"({"hidden_size": [4096]})", 1,
                  "m.json: hidden_size: a list is not an integer"},
        ErrorCase{"Zero", R"({"hidden_size": 0})", 1, "m.json: hidden_size: 0 is not positive"},
        ErrorCase{"Negative", R"({"hidden_size": -4096})", 1,
                  "m.json: hidden_size: -4096 is not positive"},
        ErrorCase{"TooLarge", R"({"hidden_size": 1e12})", 1,
                  "m.json: hidden_size: 1e+12 is above 2147483647"},
        ErrorCase{"Null", R"({"hidden_size": null, "num_attention_heads": 32})", 1,
                  "m.json: hidden_size: missing"},
        ErrorCase{"MissingVocab", absl::StrCat("{", kLlama, "}"), 1, "m.json: vocab_size: missing"},
        ErrorCase{"KvHeadsNotDividingHeads",
                  absl::StrCat("{", kLlama, R"(, "vocab_size": 32000, "num_key_value_heads": 6})"),
                  1, "m.json: num_key_value_heads: 6 does not divide num_attention_heads 32"},
        ErrorCase{"HeadDimUnderived", R"({"hidden_size": 4100, "num_attention_heads": 32})", 1,
                  "m.json: head_dim: missing, and hidden_size 4100 is not a multiple of "
                  "num_attention_heads 32"},
        ErrorCase{"HeadsNotDivisibleByTp", absl::StrCat("{", kLlama, R"(, "vocab_size": 32000})"),
                  3, "m.json: num_attention_heads: 32 is not divisible by --tp 3"},
        ErrorCase{"VocabNotDivisibleByTp", absl::StrCat("{", kLlama, R"(, "vocab_size": 32001})"),
                  2, "m.json: vocab_size: 32001 is not divisible by --tp 2"},
        ErrorCase{"IntermediateNotDivisibleByTp",
                  R"({"hidden_size": 6144, "num_attention_heads": 48, "intermediate_size": 11008,
                     "vocab_size": 32001})",
                  3, "m.json: intermediate_size: 11008 is not divisible by --tp 3"},
        ErrorCase{"KvHeadsAndTpNeitherDivides",
                  R"({"hidden_size": 6144, "num_attention_heads": 48, "num_key_value_heads": 12,
                     "intermediate_size": 16384, "vocab_size": 32000})",
                  8, "m.json: num_key_value_heads: 12 is not divisible by --tp 8, nor --tp by it"},
        ErrorCase{"MoeWithoutExpertsPerToken",
                  absl::StrCat("{", kLlama, R"(, "vocab_size": 32000, "num_local_experts": 8})"), 1,
                  "m.json: num_experts_per_tok: missing"},
        ErrorCase{"MoeMorePerTokenThanExperts",
                  absl::StrCat("{", kLlama,
                               R"(, "vocab_size": 32000, "n_routed_experts": 8,
                                  "num_experts_per_tok": 9})"),
                  1, "m.json: num_experts_per_tok: 9 is more than n_routed_experts 8"},
        ErrorCase{"TextConfigNotAnObject", R"({"text_config": 7})", 1,
                  "m.json: text_config: 7 is not an object"},
        ErrorCase{"MissingInTextConfigAndTop", R"({"text_config": {"hidden_size": 4096}})", 1,
                  "m.json: num_attention_heads: missing (in text_config and at the top level)"},
        ErrorCase{"WrongInTextConfig", R"({"text_config": {"hidden_size": "big"}})", 1,
                  R"(m.json: text_config.hidden_size: "big" (a string) is not an integer)"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(ModelPlanTest, OptionsAreCheckedNamingTheFlag) {
  PlanOptions options;
  options.tp = 0;
  EXPECT_THAT(ValidatePlanOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tp: 0 is not positive"));
  options = {};
  options.arch = "sm90";
  EXPECT_THAT(ValidatePlanOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--arch: 'sm90' is not a GPU architecture like sm_90a"));
  options = {};
  options.m_buckets = {};
  EXPECT_THAT(ValidatePlanOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "--m-buckets: empty"));
  options.m_buckets = {1, 0};
  EXPECT_THAT(ValidatePlanOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "--m-buckets: 0 is not positive"));
  options.m_buckets = {1, 8, 8};
  EXPECT_THAT(ValidatePlanOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "--m-buckets: 8 is listed twice"));
  EXPECT_OK(ValidatePlanOptions(PlanOptions()));
}

TEST(ModelPlanTest, AFamilyMissingIsNotFound) {
  ASSERT_OK_AND_ASSIGN(ModelConfig model, ReadModelConfigFile(ModelFile("llama3_8b_gqa.json")));
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, {}));
  absl::flat_hash_map<std::string, v1::KernelFamily> families = BuiltinFamilies();
  families.erase("rmsnorm");
  EXPECT_THAT(CheckPlanProblems(families, plan),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("rmsnorm")));
}

TEST(ModelPlanTest, NothingLeftIsAnError) {
  // A hidden size of 4100 is no whole number of steps of 32 (gemm_bf16's K
  // and, without the wgmma paths of sm_90a, its N; rmsnorm's warps), and
  // softmax has no config for a vocab of 32000.
  ASSERT_OK_AND_ASSIGN(ModelConfig model,
                       ParseModelConfig(R"({"hidden_size": 4100, "num_attention_heads": 32,
                                            "head_dim": 128, "intermediate_size": 11008,
                                            "vocab_size": 32000})",
                                        "odd.json"));
  PlanOptions options;
  options.arch = "sm_90";
  options.m_buckets = {1};  // each drop expands the whole space for its reason
  ASSERT_OK_AND_ASSIGN(ModelPlan plan, PlanModel(model, options));
  EXPECT_THAT(CheckPlanProblems(BuiltinFamilies(), plan),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "odd.json: no problem of the model has a valid config for sm_90"));
  EXPECT_THAT(DroppedProblemLines(plan), SizeIs(7));
  EXPECT_THAT(PlanManifest(plan).items(), IsEmpty());
}

TEST(ModelPlanFileTest, AFileThatCannotBeReadIsNamed) {
  ::autotune::testing::TempDir dir;
  EXPECT_THAT(ReadModelConfigFile(dir.File("absent.json")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir.File("absent.json"))));
  EXPECT_THAT(ReadModelConfigFile(dir.path()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("model config ", dir.path(), ": not a regular file")));
  // A FIFO with no writer is refused at once, not waited on.
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  EXPECT_THAT(ReadModelConfigFile(dir.File("fifo")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
}

TEST(ModelPlanFileTest, AFileOverTheLimitIsRefusedUnread) {
  ::autotune::testing::TempDir dir;
  const std::string padded =
      absl::StrCat(R"({"hidden_size": 4096, "pad": ")",
                   std::string(static_cast<size_t>(kMaxModelConfigBytes), 'x'), "\"}");
  ASSERT_OK(WriteFileAtomically(dir.File("big.json"), padded));
  EXPECT_THAT(ReadModelConfigFile(dir.File("big.json")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(dir.File("big.json")), HasSubstr("above the limit"))));
}

TEST(ModelPlanFileTest, DeepNestingIsRefusedBeforeItIsParsed) {
  // A megabyte of '[' would keep protobuf's parser busy for hours.
  const std::string deep =
      absl::StrCat(R"({"hidden_size": 4096, "x": ")", std::string(20, '['), R"(", "y": )",
                   std::string(500000, '['), std::string(500000, ']'), "}");
  EXPECT_THAT(ParseModelConfig(deep, "deep.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "deep.json: not a model config: lists and objects nest more than 16 "
                       "deep"));
  // Brackets in strings, escaped quotes included, do not count.
  const std::string in_strings =
      R"({"rope_scaling": {"type": "\"[[[[[[[[[[[[[[[[[[[[[[[[[["}, "hidden_size": 4096,
          "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
          "x": [[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]})";
  EXPECT_OK(ParseModelConfig(in_strings, "strings.json").status());
}

}  // namespace
}  // namespace autotune::client
