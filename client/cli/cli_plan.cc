// `autotune plan MODEL_CONFIG.json`: the warmup manifest of a transformer
// model, written here with no daemon. model_plan.h derives the problems
// from the config and checks them against the built-in families; this file
// finds the families, reports what was dropped and writes the manifest.
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "client/cli/cli_commands.h"
#include "client/cli/model_plan.h"
#include "kernels/builtin/builtin_dir.h"
#include "kernels/family_loader.h"
#include "kernels/manifest.h"

namespace autotune::client {
namespace {

absl::StatusOr<absl::flat_hash_map<std::string, v1::KernelFamily>> LoadFamilies(
    const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<v1::KernelFamily> loaded, kernels::LoadFamilyDirectory(dir));
  absl::flat_hash_map<std::string, v1::KernelFamily> families;
  for (v1::KernelFamily& family : loaded) {
    std::string name = family.name();
    families.emplace(std::move(name), std::move(family));
  }
  return families;
}

}  // namespace

Command PlanCommand(CLI::App& root, Streams io) {
  struct State {
    std::string config;
    PlanOptions options;
    std::string m_buckets;  // "1,2,4"; empty = the default
    std::string out;
    std::string kernels_dir;
  };
  auto s = std::make_shared<State>();
  Command command;
  command.app = root.add_subcommand(
      "plan",
      "Write the warmup manifest of a transformer from its Hugging Face config.json, with no "
      "daemon: the gemm_bf16, rmsnorm and softmax problems one tensor-parallel rank runs");
  command.app->footer(
      "The gemm_bf16 items are the projections (qkv, o, gate_up and down or the experts', "
      "lm_head). Each problem is checked against its family for --arch; one without a valid "
      "config is dropped, with a line on stderr. gla_decode is not planned: no key of these "
      "configs says that a model has gated linear attention. A whole model is more variants "
      "than one job of autotuned's default --max-job-variants allows: tune it in shards "
      "(autotune tune FILE --shard 0/2, then 1/2).");
  command.app
      ->add_option(
          "config", s->config,
          absl::StrCat("The model's config.json (at most ", kMaxModelConfigBytes >> 20, " MiB)"))
      ->required();
  command.app
      ->add_option("--tp", s->options.tp,
                   "Tensor-parallel ranks: heads, kv heads, intermediate and vocab are divided "
                   "by it")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command.app
      ->add_option("--arch", s->options.arch,
                   "Architecture the manifest compiles for (gemm_bf16's wgmma paths need sm_90a)")
      ->capture_default_str();
  command.app->add_option("--m-buckets", s->m_buckets,
                          absl::StrCat("Token counts (gemm_bf16's M, rmsnorm's and softmax's "
                                       "rows), comma-separated (default: ",
                                       absl::StrJoin(s->options.m_buckets, ","), ")"));
  command.app->add_option("-o,--out", s->out,
                          "Write the manifest to this file (default, or -: stdout)");
  command.app->add_option(
      "--kernels", s->kernels_dir,
      "Check against the families in this folder instead of the built-in ones (it must define "
      "gemm_bf16, rmsnorm and softmax)");
  command.prepare = [s]() -> absl::Status {
    if (!s->m_buckets.empty()) {
      s->options.m_buckets.clear();
      for (absl::string_view text : absl::StrSplit(s->m_buckets, ',')) {
        int64_t m = 0;
        if (!absl::SimpleAtoi(text, &m)) {
          return absl::InvalidArgumentError(
              absl::StrCat("--m-buckets: '", absl::CHexEscape(text), "' is not an integer"));
        }
        s->options.m_buckets.push_back(m);
      }
    }
    return ValidatePlanOptions(s->options);
  };
  command.run_offline = [s, io]() -> absl::Status {
    ASSIGN_OR_RETURN(const ModelConfig model, ReadModelConfigFile(s->config));
    ASSIGN_OR_RETURN(ModelPlan plan, PlanModel(model, s->options));
    std::string dir = s->kernels_dir;
    if (dir.empty()) {
      ASSIGN_OR_RETURN(kernels::BuiltinFamiliesDir builtin,
                       kernels::FindBuiltinFamilies("pass --kernels DIR"));
      dir = builtin.path;
    }
    ASSIGN_OR_RETURN(const auto families, LoadFamilies(dir));
    const absl::Status checked = CheckPlanProblems(families, plan);
    for (const std::string& line : DroppedProblemLines(plan)) {
      io.err << "autotune: plan: dropped " << line << "\n";
    }
    if (checked.code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat(dir, ": ", checked.message()));
    }
    RETURN_IF_ERROR(checked);
    // What a warmup of it expands to, checked as the daemon checks it.
    const v1::Manifest manifest = PlanManifest(plan);
    ASSIGN_OR_RETURN(const std::vector<kernels::ManifestProblem> problems,
                     kernels::ExpandManifest(manifest, families));
    const std::string text = ManifestText(plan);
    if (s->out.empty() || s->out == "-") {
      io.out << text;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(WriteFileAtomically(s->out, text, "manifest"));
    io.out << s->out << ": " << manifest.items_size() << " items, " << problems.size()
           << " problems for " << manifest.arch() << "\n";
    return absl::OkStatus();
  };
  return command;
}

}  // namespace autotune::client
