#include "client/cli/model_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/parallel_for.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/search_space.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// Sizes reach int32 kernel arguments (gemm_bf16's m_size, n_size, k_size).
constexpr int64_t kMaxConfigInteger = std::numeric_limits<int32_t>::max();
// A model name in the manifest's header comment holds at most this many of
// [A-Za-z0-9._/-]; anything else in it leaves it out.
constexpr size_t kMaxModelNameBytes = 100;
// Model configs nest three or four levels (rope_scaling, quantization_config).
constexpr int kMaxJsonDepth = 16;

// A JSON value as an error message shows it: strings escaped and cut short.
std::string Shown(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNumberValue:
      return absl::StrCat(value.number_value());
    case Value::kStringValue:
      return absl::StrCat("\"", absl::CHexEscape(value.string_value().substr(0, 40)),
                          value.string_value().size() > 40 ? "..." : "", "\" (a string)");
    case Value::kBoolValue:
      return value.bool_value() ? "true" : "false";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue:
      return "a list";
    default:
      return "null";
  }
}

// The model's keys: in "text_config" when the file has one, then at the top.
class ConfigKeys {
 public:
  ConfigKeys(const Struct& top, const Struct* text, absl::string_view origin)
      : top_(top), text_(text), origin_(origin) {}

  absl::Status Error(absl::string_view key, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": ", key, ": ", message));
  }

  // The value of `key` and where it is; nullopt when absent or null.
  std::optional<std::pair<const Value*, std::string>> Find(const std::string& key) const {
    if (text_ != nullptr) {
      const auto it = text_->fields().find(key);
      if (it != text_->fields().end() && !it->second.has_null_value()) {
        return std::make_pair(&it->second, absl::StrCat("text_config.", key));
      }
    }
    const auto it = top_.fields().find(key);
    if (it != top_.fields().end() && !it->second.has_null_value()) {
      return std::make_pair(&it->second, key);
    }
    return std::nullopt;
  }

  absl::StatusOr<std::optional<ConfigValue>> Optional(const std::string& key) const {
    const auto found = Find(key);
    if (!found) return std::nullopt;
    const auto& [value, path] = *found;
    if (!value->has_number_value()) {
      return Error(path, absl::StrCat(Shown(*value), " is not an integer"));
    }
    const double number = value->number_value();
    if (!std::isfinite(number) || number != std::trunc(number)) {
      return Error(path, absl::StrCat(number, " is not an integer"));
    }
    if (number < 1) return Error(path, absl::StrCat(number, " is not positive"));
    if (number > static_cast<double>(kMaxConfigInteger)) {
      return Error(path, absl::StrCat(number, " is above ", kMaxConfigInteger));
    }
    return ConfigValue{static_cast<int64_t>(number), path};
  }

  absl::StatusOr<ConfigValue> Required(const std::string& key) const {
    ASSIGN_OR_RETURN(std::optional<ConfigValue> value, Optional(key));
    if (!value) {
      return Error(key,
                   text_ != nullptr ? "missing (in text_config and at the top level)" : "missing");
    }
    return *std::move(value);
  }

 private:
  const Struct& top_;
  const Struct* text_;
  absl::string_view origin_;
};

bool IsPlainName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxModelNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' ||
           c == '-';
  });
}

// architectures[0], else model_type, of text_config or the top level.
std::string ModelName(const Struct& top, const Struct* text) {
  for (const Struct* where : {text, &top}) {
    if (where == nullptr) continue;
    const auto architectures = where->fields().find("architectures");
    if (architectures != where->fields().end() && architectures->second.has_list_value() &&
        architectures->second.list_value().values_size() > 0 &&
        IsPlainName(architectures->second.list_value().values(0).string_value())) {
      return architectures->second.list_value().values(0).string_value();
    }
    const auto model_type = where->fields().find("model_type");
    if (model_type != where->fields().end() && IsPlainName(model_type->second.string_value())) {
      return model_type->second.string_value();
    }
  }
  return "";
}

// OK when no list or object of `json` lies more than kMaxJsonDepth deep:
// protobuf's parser takes time quadratic in the depth of lists, and
// refuses a Struct deeper than about 40 anyway.
absl::Status CheckJsonDepth(absl::string_view json, absl::string_view origin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": not a model config: lists and objects nest more than ",
                         kMaxJsonDepth, " deep"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

// `text` for a comment line: no character that would end the comment.
std::string CommentSafe(absl::string_view text) {
  std::string safe(text);
  for (char& c : safe) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return safe;
}

// "every config fails a constraint ..." for a problem without variants.
std::string WhyNoVariant(const v1::KernelFamily& family, const kernels::SearchSpace& space) {
  if (space.after_constraints == 0) {
    const auto most =
        std::max_element(space.rejected_by_constraint.begin(), space.rejected_by_constraint.end());
    if (most == space.rejected_by_constraint.end()) return "the family has no config";
    const int index = static_cast<int>(most - space.rejected_by_constraint.begin());
    return absl::StrCat("each of its ", space.total_configs,
                        " configs fails a constraint, most of them (", *most, ") constraints[",
                        index, "] '", family.constraints(index), "'");
  }
  const auto most =
      std::max_element(space.dropped.begin(), space.dropped.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  if (most == space.dropped.end()) return "no config is valid";
  return absl::StrCat("each of the ", space.after_constraints,
                      " configs that pass its constraints is dropped, most of them (", most->second,
                      ") for ", most->first);
}

// An item of `family` over `buckets` of its dim `bucket_dim`, in bf16.
PlanItem MakeItem(std::string family, std::string bucket_dim, const std::vector<int64_t>& buckets,
                  std::vector<std::pair<std::string, int64_t>> dims, std::string what) {
  PlanItem item;
  item.family = std::move(family);
  item.bucket_dim = std::move(bucket_dim);
  item.buckets = buckets;
  item.dims = std::move(dims);
  item.dtype = v1::BFLOAT16;
  item.what.push_back(std::move(what));
  return item;
}

// Adds a gemm_bf16 item, or `what` to the one of the same N and K.
void AddGemm(std::vector<PlanItem>& items, const std::vector<int64_t>& m_buckets, int64_t n,
             int64_t k, std::string what) {
  const std::vector<std::pair<std::string, int64_t>> dims = {{"N", n}, {"K", k}};
  for (PlanItem& item : items) {
    if (item.dims == dims) {
      item.what.push_back(std::move(what));
      return;
    }
  }
  items.push_back(MakeItem("gemm_bf16", "M", m_buckets, dims, std::move(what)));
}

v1::Problem ProblemOf(const PlanItem& item, int64_t bucket) {
  v1::Problem problem;
  (*problem.mutable_dims())[item.bucket_dim] = bucket;
  for (const auto& [name, value] : item.dims) (*problem.mutable_dims())[name] = value;
  problem.set_dtype(item.dtype);
  return problem;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json, absl::string_view origin) {
  RETURN_IF_ERROR(CheckJsonDepth(json, origin));
  Struct top;
  const auto parsed = google::protobuf::util::JsonStringToMessage(std::string(json), &top);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not a JSON object: ", CommentSafe(parsed.message().ToString())));
  }
  const Struct* text = nullptr;
  if (const auto it = top.fields().find("text_config");
      it != top.fields().end() && !it->second.has_null_value()) {
    if (!it->second.has_struct_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": text_config: ", Shown(it->second), " is not an object"));
    }
    text = &it->second.struct_value();
  }
  const ConfigKeys keys(top, text, origin);
  ModelConfig model;
  model.origin = std::string(origin);
  model.name = ModelName(top, text);
  ASSIGN_OR_RETURN(model.hidden_size, keys.Required("hidden_size"));
  ASSIGN_OR_RETURN(model.num_attention_heads, keys.Required("num_attention_heads"));
  const int64_t heads = model.num_attention_heads.value;

  ASSIGN_OR_RETURN(std::optional<ConfigValue> kv_heads, keys.Optional("num_key_value_heads"));
  model.num_key_value_heads = kv_heads.value_or(model.num_attention_heads);
  if (heads % model.num_key_value_heads.value != 0) {
    return keys.Error(model.num_key_value_heads.key,
                      absl::StrCat(model.num_key_value_heads.value, " does not divide ",
                                   model.num_attention_heads.key, " ", heads));
  }

  ASSIGN_OR_RETURN(std::optional<ConfigValue> head_dim, keys.Optional("head_dim"));
  if (head_dim) {
    model.head_dim = *std::move(head_dim);
  } else if (model.hidden_size.value % heads != 0) {
    return keys.Error("head_dim", absl::StrCat("missing, and ", model.hidden_size.key, " ",
                                               model.hidden_size.value, " is not a multiple of ",
                                               model.num_attention_heads.key, " ", heads));
  } else {
    model.head_dim = {model.hidden_size.value / heads,
                      absl::StrCat(model.hidden_size.key, " / ", model.num_attention_heads.key)};
  }
  ASSIGN_OR_RETURN(model.vocab_size, keys.Required("vocab_size"));

  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
    ASSIGN_OR_RETURN(std::optional<ConfigValue> experts, keys.Optional(key));
    if (experts) {
      model.experts = *std::move(experts);
      break;
    }
  }
  if (model.moe()) {
    ASSIGN_OR_RETURN(model.experts_per_token, keys.Required("num_experts_per_tok"));
    if (model.experts_per_token.value > model.experts.value) {
      return keys.Error(model.experts_per_token.key,
                        absl::StrCat(model.experts_per_token.value, " is more than ",
                                     model.experts.key, " ", model.experts.value));
    }
    ASSIGN_OR_RETURN(std::optional<ConfigValue> moe_size, keys.Optional("moe_intermediate_size"));
    if (moe_size) {
      model.intermediate_size = *std::move(moe_size);
      return model;
    }
  }
  ASSIGN_OR_RETURN(model.intermediate_size, keys.Required("intermediate_size"));
  return model;
}

absl::StatusOr<ModelConfig> ReadModelConfigFile(const std::string& path) {
  const std::string context = absl::StrCat("cannot read model config ", path);
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return PosixError(context, errno);
  const absl::Cleanup closer = [fd] { close(fd); };
  struct stat info;
  if (fstat(fd, &info) != 0) return PosixError(context, errno);
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("model config ", path, ": not a regular file"));
  }
  const auto too_large = [&path](int64_t bytes) {
    return absl::InvalidArgumentError(absl::StrCat("model config ", path, ": ", bytes,
                                                   " bytes or more, above the limit of ",
                                                   kMaxModelConfigBytes));
  };
  if (info.st_size > kMaxModelConfigBytes) return too_large(info.st_size);
  // One byte more than the limit tells a file that grew meanwhile.
  std::string json(kMaxModelConfigBytes + 1, '\0');
  size_t got = 0;
  while (got < json.size()) {
    const ssize_t n = read(fd, json.data() + got, json.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError(context, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > static_cast<size_t>(kMaxModelConfigBytes)) return too_large(got);
  json.resize(got);
  return ParseModelConfig(json, path);
}

absl::Status ValidatePlanOptions(const PlanOptions& options) {
  if (options.tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tp: ", options.tp, " is not positive"));
  }
  if (!IsGpuArch(options.arch)) {
    return absl::InvalidArgumentError(absl::StrCat("--arch: '", absl::CHexEscape(options.arch),
                                                   "' is not a GPU architecture like sm_90a"));
  }
  if (options.m_buckets.empty()) return absl::InvalidArgumentError("--m-buckets: empty");
  absl::flat_hash_set<int64_t> seen;
  for (const int64_t m : options.m_buckets) {
    if (m < 1)
      return absl::InvalidArgumentError(absl::StrCat("--m-buckets: ", m, " is not positive"));
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(absl::StrCat("--m-buckets: ", m, " is listed twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelPlan> PlanModel(const ModelConfig& model, const PlanOptions& options) {
  RETURN_IF_ERROR(ValidatePlanOptions(options));
  const int64_t tp = options.tp;
  const auto per_rank = [&](const ConfigValue& size) -> absl::StatusOr<int64_t> {
    if (size.value % tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat(model.origin, ": ", size.key, ": ", size.value,
                                                     " is not divisible by --tp ", tp));
    }
    return size.value / tp;
  };
  ASSIGN_OR_RETURN(const int64_t heads, per_rank(model.num_attention_heads));
  const ConfigValue& all_kv = model.num_key_value_heads;
  int64_t kv_heads = 1;  // one replicated kv head per rank
  if (all_kv.value % tp == 0) {
    kv_heads = all_kv.value / tp;
  } else if (tp % all_kv.value != 0) {
    return absl::InvalidArgumentError(absl::StrCat(model.origin, ": ", all_kv.key, ": ",
                                                   all_kv.value, " is not divisible by --tp ", tp,
                                                   ", nor --tp by it"));
  }
  ASSIGN_OR_RETURN(const int64_t intermediate, per_rank(model.intermediate_size));
  ASSIGN_OR_RETURN(const int64_t vocab, per_rank(model.vocab_size));
  const int64_t hidden = model.hidden_size.value;
  const int64_t head_dim = model.head_dim.value;

  ModelPlan plan{.model = model, .options = options, .items = {}};
  const std::vector<int64_t>& m = options.m_buckets;
  std::vector<PlanItem>& items = plan.items;
  AddGemm(items, m, (heads + 2 * kv_heads) * head_dim, hidden,
          absl::StrCat("qkv_proj (q, k and v fused): N = (", heads, " + 2 * ", kv_heads,
                       " heads) * ", head_dim, ", K = ", hidden));
  AddGemm(items, m, hidden, heads * head_dim,
          absl::StrCat("o_proj: N = ", hidden, ", K = ", heads, " heads * ", head_dim));
  const std::string mlp = model.moe() ? "experts' " : "";
  const std::string per_expert = model.moe() ? ", per expert" : "";
  AddGemm(items, m, 2 * intermediate, hidden,
          absl::StrCat(mlp, "gate_up_proj (gate and up fused", per_expert, "): N = 2 * ",
                       intermediate, ", K = ", hidden));
  AddGemm(items, m, hidden, intermediate,
          absl::StrCat(mlp, "down_proj", model.moe() ? " (per expert)" : "", ": N = ", hidden,
                       ", K = ", intermediate));
  AddGemm(items, m, vocab, hidden, absl::StrCat("lm_head: N = ", vocab, ", K = ", hidden));
  items.push_back(MakeItem(
      "rmsnorm", "rows", m, {{"hidden", hidden}},
      absl::StrCat("rmsnorm (the layers' norms and the final one): rows = M, hidden = ", hidden)));
  items.push_back(
      MakeItem("softmax", "rows", m, {{"hidden", vocab}},
               absl::StrCat("softmax over lm_head's logits: rows = M, hidden = ", vocab)));
  return plan;
}

absl::Status CheckPlanProblems(const absl::flat_hash_map<std::string, v1::KernelFamily>& families,
                               ModelPlan& plan) {
  struct Check {
    const v1::KernelFamily* family;
    size_t item;
    int64_t bucket;
    std::string why_not;  // empty: it has a valid config
  };
  std::vector<Check> checks;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const auto family = families.find(plan.items[i].family);
    if (family == families.end()) {
      return absl::NotFoundError(
          absl::StrCat("no kernel family '", plan.items[i].family, "' among those given"));
    }
    for (const int64_t bucket : plan.items[i].buckets) {
      checks.push_back({&family->second, i, bucket, ""});
    }
  }
  kernels::DeviceLimits limits;
  limits.arch = plan.options.arch;
  ParallelFor(checks.size(), [&](size_t c) {
    Check& check = checks[c];
    const v1::KernelFamily& family = *check.family;
    const v1::Problem problem = ProblemOf(plan.items[check.item], check.bucket);
    // The default config settles most problems at the cost of one config
    // (gemm_bf16's whole space costs a third of a second a problem).
    if (family.has_default_config() &&
        kernels::ResolveConfig(family, problem, family.default_config(), limits).ok()) {
      return;
    }
    absl::StatusOr<kernels::SearchSpace> space =
        kernels::ExpandSearchSpace(family, problem, limits);
    if (!space.ok()) {
      check.why_not = std::string(space.status().message());
    } else if (space->variants.empty()) {
      check.why_not = WhyNoVariant(family, *space);
    }
  });
  bool any_left = false;
  for (PlanItem& item : plan.items) item.buckets.clear();
  for (Check& check : checks) {
    PlanItem& item = plan.items[check.item];
    if (check.why_not.empty()) {
      item.buckets.push_back(check.bucket);
      any_left = true;
    } else {
      item.dropped.emplace_back(check.bucket, std::move(check.why_not));
    }
  }
  if (!any_left) {
    return absl::FailedPreconditionError(absl::StrCat(
        plan.model.origin, ": no problem of the model has a valid config for ", plan.options.arch));
  }
  return absl::OkStatus();
}

std::vector<std::string> DroppedProblemLines(const ModelPlan& plan) {
  std::vector<std::string> lines;
  for (const PlanItem& item : plan.items) {
    for (const auto& [bucket, why_not] : item.dropped) {
      lines.push_back(absl::StrCat(ProblemContext(item.family, ProblemOf(item, bucket)), " (",
                                   absl::StrJoin(item.what, "; "), "): no valid config for ",
                                   plan.options.arch, ": ", why_not));
    }
  }
  return lines;
}

v1::Manifest PlanManifest(const ModelPlan& plan) {
  v1::Manifest manifest;
  manifest.set_arch(plan.options.arch);
  for (const PlanItem& item : plan.items) {
    if (item.buckets.empty()) continue;
    v1::ManifestItem& out = *manifest.add_items();
    out.set_family(item.family);
    v1::ManifestItem::DimValues& bucket = *out.add_dims();
    bucket.set_name(item.bucket_dim);
    for (const int64_t value : item.buckets) bucket.add_values(value);
    for (const auto& [name, value] : item.dims) {
      v1::ManifestItem::DimValues& dim = *out.add_dims();
      dim.set_name(name);
      dim.add_values(value);
    }
    out.add_dtypes(item.dtype);
  }
  return manifest;
}

std::string ManifestText(const ModelPlan& plan) {
  const ModelConfig& model = plan.model;
  const PlanOptions& options = plan.options;
  const int64_t tp = options.tp;
  std::string text = "# proto-file: proto/autotune.proto\n# proto-message: autotune.v1.Manifest\n";
  absl::StrAppend(&text, "# Written by `autotune plan` from ", CommentSafe(model.origin),
                  model.name.empty() ? "" : absl::StrCat(" (", model.name, ")"), ":\n",
                  "# the problems one rank of tensor parallelism ", tp, " runs, for ", options.arch,
                  ", in bf16.\n");
  absl::StrAppend(&text, "# Model: hidden ", model.hidden_size.value, ", ",
                  model.num_attention_heads.value, " heads (", model.num_key_value_heads.value,
                  " kv) of ", model.head_dim.value, ", intermediate ",
                  model.intermediate_size.value, ", vocab ", model.vocab_size.value);
  if (model.moe()) {
    absl::StrAppend(&text, ", ", model.experts.value, " experts, ", model.experts_per_token.value,
                    " per token");
  }
  absl::StrAppend(&text, ".\n");
  if (tp > 1) {
    absl::StrAppend(&text, "# Per rank, divided by tp ", tp, ": heads, kv heads",
                    model.num_key_value_heads.value % tp != 0 ? " (one, replicated)" : "",
                    ", intermediate and vocab.\n");
  }
  absl::StrAppend(&text,
                  "# gemm_bf16 is C[M, N] = A[M, K] B[N, K]^T (nn.Linear: N x K the weight);\n"
                  "# projections of one N x K are one item. M, and rows, is the number of\n"
                  "# tokens, in the buckets ",
                  absl::StrJoin(options.m_buckets, ", "), ".\n");
  if (model.moe()) {
    absl::StrAppend(&text,
                    "# The experts' items are per-expert products at the per-expert token "
                    "count:\n# their M is the tokens one expert receives (about ",
                    model.experts_per_token.value, " / ", model.experts.value, " of a batch's).\n");
  }
  absl::StrAppend(&text, "arch: \"", options.arch, "\"\n");
  for (const PlanItem& item : plan.items) {
    text += "\n";
    for (const std::string& what : item.what) absl::StrAppend(&text, "# ", what, "\n");
    if (!item.dropped.empty()) {
      std::vector<int64_t> dropped;
      for (const auto& [bucket, why_not] : item.dropped) dropped.push_back(bucket);
      absl::StrAppend(&text, "# Left out, no valid config of ", item.family, " for ", options.arch,
                      ": ", item.bucket_dim, " ", absl::StrJoin(dropped, ", "), ".\n");
    }
    if (item.buckets.empty()) continue;
    absl::StrAppend(&text, "items {\n  family: \"", item.family, "\"\n  dims { name: \"",
                    item.bucket_dim, "\" values: [", absl::StrJoin(item.buckets, ", "), "] }\n");
    for (const auto& [name, value] : item.dims) {
      absl::StrAppend(&text, "  dims { name: \"", name, "\" values: [", value, "] }\n");
    }
    absl::StrAppend(&text, "  dtypes: [", v1::DType_Name(item.dtype), "]\n}\n");
  }
  return text;
}

}  // namespace autotune::client
