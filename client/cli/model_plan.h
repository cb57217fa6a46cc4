// What to tune for a transformer model: the problems of the built-in
// families gemm_bf16, rmsnorm and softmax that one rank of tensor
// parallelism runs, read from the model's Hugging Face config.json and
// written as a warmup manifest (`autotune plan`).
//
//   ASSIGN_OR_RETURN(ModelConfig model, ReadModelConfigFile("llama/config.json"));
//   ASSIGN_OR_RETURN(ModelPlan plan, PlanModel(model, {.tp = 2}));
//   absl::Status checked = CheckPlanProblems(families, plan);
//   for (const std::string& line : DroppedProblemLines(plan)) std::cerr << line << "\n";
//   RETURN_IF_ERROR(checked);
//   RETURN_IF_ERROR(WriteFileAtomically("llama.manifest", ManifestText(plan)));
//
// The config is a user's file and may be hostile: it is read only up to
// kMaxModelConfigBytes, nothing it names is opened, and what it says reaches
// the manifest only as checked integers (and, in a comment, a model name of
// [A-Za-z0-9._/-] characters).
//
// Keys, read from "text_config" when the file has that object (multimodal
// models nest their language model there), else, or when it lacks one, from
// the top level; a key whose value is null counts as absent:
//   hidden_size, num_attention_heads, vocab_size    required
//   num_key_value_heads   default num_attention_heads, which it must divide
//   head_dim              default hidden_size / num_attention_heads
//   intermediate_size     the MLP's; required but for MoE with moe_intermediate_size
//   num_local_experts, num_experts, n_routed_experts
//                         the first present makes the model MoE; then
//                         num_experts_per_tok is required, and the experts'
//                         MLP is moe_intermediate_size (default
//                         intermediate_size) wide
// Each is a JSON number holding an integer in 1..2^31-1. The name in the
// manifest's header is architectures[0], else model_type. Other keys are
// ignored. gla_decode is not planned: no key of these configs says that a
// model has gated linear attention.
//
// Problems, for M (rows) in PlanOptions::m_buckets, all bf16, with heads,
// kv heads, intermediate and vocab divided by tp:
//   gemm_bf16 (M, N, K; C[M, N] = A[M, K] B[N, K]^T, the nn.Linear layout)
//     qkv_proj      N = (heads + 2 * kv_heads) * head_dim, K = hidden_size;
//                   where tp is a multiple of num_key_value_heads, each rank
//                   holds one kv head (replicated, as vLLM does)
//     o_proj        N = hidden_size, K = heads * head_dim
//     gate_up_proj  N = 2 * intermediate, K = hidden_size
//     down_proj     N = hidden_size, K = intermediate
//     (MoE: the experts' gate_up_proj and down_proj instead, per expert, M
//     being the tokens one expert receives; no dense MLP is planned)
//     lm_head       N = vocab, K = hidden_size
//   Projections with equal (N, K) are one item, where the first is listed.
//   rmsnorm (rows, hidden): rows = M, hidden = hidden_size
//   softmax (rows, hidden): rows = M, hidden = vocab (per rank)
//
// Errors are INVALID_ARGUMENT "<file>: <key>: <what is wrong>" for the
// config ("config.json: num_attention_heads: 32 is not divisible by --tp
// 3") and "--<flag>: ..." for options, unless said otherwise.
//
// Thread-safety: all functions are safe to call concurrently.
#ifndef AUTOTUNE_CLIENT_CLI_MODEL_PLAN_H_
#define AUTOTUNE_CLIENT_CLI_MODEL_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

// A model config may hold at most this many bytes (real ones hold a few
// thousand).
inline constexpr int64_t kMaxModelConfigBytes = int64_t{1} << 20;

// One size of the model and the key it was read from ("text_config.hidden_size").
struct ConfigValue {
  int64_t value = 0;
  std::string key;
};

struct ModelConfig {
  std::string origin;  // the file, for messages and the manifest's header
  std::string name;    // "LlamaForCausalLM"; empty when absent or not plain
  ConfigValue hidden_size;
  ConfigValue num_attention_heads;
  ConfigValue num_key_value_heads;
  ConfigValue head_dim;
  ConfigValue vocab_size;
  // The MLP's intermediate size: for MoE each expert's.
  ConfigValue intermediate_size;
  // MoE: the expert count and how many each token goes to; 0 for a dense model.
  ConfigValue experts;
  ConfigValue experts_per_token;

  bool moe() const { return experts.value > 0; }
};

// `json` (the text of the file `origin`) as the keys above say. INVALID_ARGUMENT
// "<origin>: not a JSON object: ..." for text that is not one.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json, absl::string_view origin);

// The file at `path`, read as ParseModelConfig reads it. PosixError's code
// when it cannot be opened or read ("cannot read model config <path>:
// ..."); INVALID_ARGUMENT when it is not a regular file or holds more than
// kMaxModelConfigBytes (nothing of it is read then).
absl::StatusOr<ModelConfig> ReadModelConfigFile(const std::string& path);

struct PlanOptions {
  int64_t tp = 1;  // --tp: tensor-parallel ranks
  // --arch: what the manifest compiles for; gemm_bf16's wgmma paths need
  // sm_90a.
  std::string arch = "sm_90a";
  // --m-buckets: the token counts (M, rows) of every problem; by default
  // the 18 of bench/gemm_sweep.manifest, vLLM's fused-MoE tuner's.
  std::vector<int64_t> m_buckets = {1,  2,   4,   8,   16,   24,   32,   48,   64,
                                    96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096};
};

// INVALID_ARGUMENT "--tp: 0 is not positive", "--arch: 'sm90' is not a GPU
// architecture like sm_90a", "--m-buckets: empty", "--m-buckets: 0 is not
// positive", "--m-buckets: 8 is listed twice".
absl::Status ValidatePlanOptions(const PlanOptions& options);

// One manifest item: a family's problems over the buckets of its bucketed
// dim, each other dim one value.
struct PlanItem {
  std::string family;
  std::string bucket_dim;  // "M", "rows"
  std::vector<int64_t> buckets;
  std::vector<std::pair<std::string, int64_t>> dims;  // the other dims, in the family's order
  v1::DType dtype = v1::BFLOAT16;
  std::vector<std::string> what;  // what it stands for: one line per projection merged into it
  // Buckets CheckPlanProblems took out, with why no config of the family
  // runs them.
  std::vector<std::pair<int64_t, std::string>> dropped;
};

struct ModelPlan {
  ModelConfig model;
  PlanOptions options;
  std::vector<PlanItem> items;  // gemm_bf16's, then rmsnorm, then softmax
};

// The problems of the model at options.tp. INVALID_ARGUMENT from
// ValidatePlanOptions, or naming the file and the key: a count of heads or
// a size (intermediate_size, vocab_size) not divisible by tp;
// num_key_value_heads neither divisible by tp nor dividing it.
absl::StatusOr<ModelPlan> PlanModel(const ModelConfig& model, const PlanOptions& options);

// Moves the problems of the plan that have no valid config for
// options.arch (the other device limits sm_90's), or that the family
// refuses, from buckets to dropped: those for which
// kernels::ExpandSearchSpace gives no variant, as a warmup would find. A
// problem the family's default config resolves for (kernels::ResolveConfig,
// the same checks on that one config) is kept without expanding the rest.
// NOT_FOUND when `families` lacks one the plan uses; FAILED_PRECONDITION
// when no problem is left (the dropped ones are recorded even then).
absl::Status CheckPlanProblems(const absl::flat_hash_map<std::string, v1::KernelFamily>& families,
                               ModelPlan& plan);

// One line per dropped problem: "softmax hidden=128256,rows=1 bf16 (softmax
// over the logits): no valid config for sm_90a: ...".
std::vector<std::string> DroppedProblemLines(const ModelPlan& plan);

// The plan as a manifest: its items with at least one bucket, arch set.
v1::Manifest PlanManifest(const ModelPlan& plan);

// PlanManifest in protobuf text format, with a header comment saying which
// model, which tp and arch and how the sizes were derived, and one above
// each item saying what it is (and which buckets were dropped). Parses with
// kernels::LoadManifestFile to PlanManifest(plan).
std::string ManifestText(const ModelPlan& plan);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_MODEL_PLAN_H_
