#include "service/jobs/job_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/compile_request.h"
#include "kernels/expression.h"
#include "kernels/family_check.h"
#include "kernels/manifest.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/jobs/job_options.h"

namespace autotune::service {
namespace {

bool SearchGiven(const v1::SearchOptions& search) {
  return search.strategy() != v1::SEARCH_STRATEGY_UNSPECIFIED || search.max_variants() != 0 ||
         search.max_fraction() != 0 || search.seed() != 0 || search.max_seconds() != 0;
}

std::vector<kernels::SourceHeader> HeadersOf(const v1::KernelFamily& family) {
  std::vector<kernels::SourceHeader> headers;
  for (const v1::SourceHeader& header : family.headers()) {
    headers.push_back({header.name(), header.text()});
  }
  return headers;
}

// The most variants a job's problems can have, by arithmetic from their
// families' descriptors. A problem of a family in a dtype can have at most
// the configs that pass the constraints reading only params and
// dtype_bytes: the other constraints (the dims', the arch's) and the
// launch limits only remove configs. Those constraints are evaluated once
// per family and dtype, over the family's configs (at most
// kernels::kMaxConfigsPerFamily), and only when the plain product of the
// params' value counts would go over the limit.
class VariantBound {
 public:
  explicit VariantBound(const PlanTarget& target) : target_(target) {}

  void Add(const v1::KernelFamily& family, v1::DType dtype, int64_t problems) {
    Group& group = groups_[std::make_pair(family.name(), dtype)];
    group.family = &family;
    group.problems = kernels::SaturatingAdd(group.problems, problems);
  }

  // Over everything added. INVALID_ARGUMENT when a constraint does not parse
  // (a stored family passed ValidateFamily, so only a family changed since).
  absl::StatusOr<int64_t> Total() {
    int64_t total = 0;
    for (const auto& [key, group] : groups_) {
      total = kernels::SaturatingAdd(
          total, kernels::SaturatingMultiply(group.problems, AllConfigs(*group.family)));
    }
    if (target_.max_job_variants <= 0 || total <= target_.max_job_variants) return total;
    total = 0;
    for (auto& [key, group] : groups_) {
      if (!group.configs.has_value()) {
        ASSIGN_OR_RETURN(group.configs, ConfigsPassing(*group.family, key.second));
      }
      total = kernels::SaturatingAdd(total,
                                     kernels::SaturatingMultiply(group.problems, *group.configs));
    }
    return total;
  }

 private:
  struct Group {
    const v1::KernelFamily* family = nullptr;
    int64_t problems = 0;
    std::optional<int64_t> configs;  // ConfigsPassing, once computed
  };

  static int64_t AllConfigs(const v1::KernelFamily& family) {
    int64_t configs = 1;
    for (const v1::TunableParameter& param : family.params()) {
      configs = kernels::SaturatingMultiply(configs, std::max(1, param.values_size()));
    }
    return configs;
  }

  static absl::StatusOr<int64_t> ConfigsPassing(const v1::KernelFamily& family, v1::DType dtype) {
    std::vector<std::string> params;
    for (const v1::TunableParameter& param : family.params()) params.push_back(param.name());
    std::vector<std::string> names = params;
    names.emplace_back(kernels::kDTypeBytesVariable);
    for (const v1::ProblemDimension& dim : family.dims()) names.push_back(dim.name());
    for (absl::string_view name : kernels::kTargetVariables) names.emplace_back(name);
    std::vector<kernels::Expression> constraints;
    for (int i = 0; i < family.constraints_size(); ++i) {
      absl::StatusOr<kernels::Expression> parsed =
          kernels::Expression::Parse(family.constraints(i), names);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("family '", family.name(), "': constraints[",
                                                       i, "]: ", parsed.status().message()));
      }
      const bool params_only = std::all_of(
          parsed->variables().begin(), parsed->variables().end(), [&](const std::string& name) {
            return name == kernels::kDTypeBytesVariable ||
                   std::find(params.begin(), params.end(), name) != params.end();
          });
      if (!params_only) continue;
      // Evaluated by position below: `values` follows `names`.
      if (absl::Status bound = parsed->BindPositions(names); !bound.ok()) return bound;
      constraints.push_back(*std::move(parsed));
    }
    const int64_t all = AllConfigs(family);
    if (constraints.empty() || all > kernels::kMaxConfigsPerFamily) return all;
    std::vector<double> values(names.size(), 0.0);
    values[params.size()] = static_cast<double>(DTypeBytes(dtype));
    // Every config, as the search space orders them: the last param fastest.
    std::vector<int> digits(params.size(), 0);
    int64_t passing = 0;
    while (true) {
      for (size_t p = 0; p < params.size(); ++p) {
        const v1::TunableParameter& param = family.params(static_cast<int>(p));
        values[p] = param.values_size() == 0 ? 0 : static_cast<double>(param.values(digits[p]));
      }
      bool holds = true;
      for (kernels::Expression& constraint : constraints) {
        const absl::StatusOr<bool> held = constraint.EvaluateConditionAt(values);
        if (!held.ok() || !*held) {
          holds = false;
          break;
        }
      }
      passing += holds ? 1 : 0;
      int p = static_cast<int>(params.size()) - 1;
      for (; p >= 0; --p) {
        if (++digits[p] < family.params(p).values_size()) break;
        digits[p] = 0;
      }
      if (p < 0) break;
    }
    return passing;
  }

  const PlanTarget& target_;
  std::map<std::pair<std::string, v1::DType>, Group> groups_;
};

// RESOURCE_EXHAUSTED when `variants`, VariantBound's of `problems`, is over
// the target's limit.
absl::Status CheckVariantBound(const PlanTarget& target, int64_t problems, int64_t variants) {
  if (target.max_job_variants <= 0 || variants <= target.max_job_variants) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the job may have ", kernels::CountText(variants), " variants (its ", problems,
      " problems times the configs their families' params and constraints allow), more than the ",
      target.max_job_variants, " the daemon's limit ", target.max_job_variants_setting,
      " allows; split it into shards (the job's shard_index and shard_count) or narrow the "
      "manifest"));
}

}  // namespace

SearchOptions ResolveSearch(const v1::SearchOptions& given, int64_t variants) {
  SearchOptions search;
  search.budget = SearchBudgetOf(given);
  search.seed = given.seed();
  switch (given.strategy()) {
    case v1::EXHAUSTIVE:
      search.kind = SearchKind::kExhaustive;
      break;
    case v1::RANDOM:
      search.kind = SearchKind::kRandom;
      break;
    case v1::MODEL:
      search.kind = SearchKind::kModel;
      break;
    default:
      search.kind = variants > kExhaustiveSearchUpTo ? SearchKind::kModel : SearchKind::kExhaustive;
      break;
  }
  return search;
}

std::string DescribeSearch(const SearchOptions& search, const v1::SearchReport& report) {
  const int64_t hints = report.hints();
  const int64_t measured = report.measured();
  const int64_t variants = report.space();
  std::string text = SearchKindName(search.kind);
  if (search.kind != SearchKind::kExhaustive) absl::StrAppend(&text, ", seed ", search.seed);
  if (hints > 0) {
    absl::StrAppend(&text, ", seeded with ", hints, " winning config", hints == 1 ? "" : "s",
                    " of tuned problems");
  }
  absl::StrAppend(&text, ": ", measured, " of ", variants, " variants measured");
  if (measured < variants && variants > 0) {
    absl::StrAppend(&text, absl::StrFormat(" (%.1f%%)", 100.0 * static_cast<double>(measured) /
                                                            static_cast<double>(variants)));
  }
  if (report.out_of_time()) {
    absl::StrAppend(&text,
                    absl::StrFormat("; stopped at its time budget of %g s", search.budget.seconds));
  }
  return text;
}

absl::Status CheckJobSpec(const v1::JobSpec& spec) {
  const v1::JobOptions& options = spec.options();
  if (spec.manifest().items_size() == 0) {
    return absl::InvalidArgumentError("manifest.items is empty");
  }
  for (int i = 0; i < spec.manifest().items_size(); ++i) {
    // Nothing allocated per item on the way: a manifest may list a million.
    const v1::ManifestItem& item = spec.manifest().items(i);
    if (item.family().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("manifest.items[", i, "].family is empty"));
    }
    if (!item.has_search()) continue;
    const std::string field = absl::StrCat("manifest.items[", i, "].search");
    RETURN_IF_ERROR(CheckSearchOptions(item.search(), field));
    if (options.compile_only()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a compile_only job measures nothing to search; leave it out"));
    }
  }
  RETURN_IF_ERROR(CheckJobOptions(options));
  if (options.compile_only() && SearchGiven(options.search())) {
    return absl::InvalidArgumentError(
        "options.search: a compile_only job measures nothing to search; leave it out");
  }
  if (options.compile_only()) {
    // The options that say how to measure would be ignored: refuse them.
    std::vector<std::string> measuring;
    if (options.variant_timeout_s() != 0) measuring.push_back("options.variant_timeout_s");
    if (options.serial_candidates() != 0) measuring.push_back("options.serial_candidates");
    if (options.force()) measuring.push_back("options.force");
    if (options.quiet_wait_s() != 0) measuring.push_back("options.quiet_wait_s");
    if (options.candidate_band() != 0) measuring.push_back("options.candidate_band");
    if (options.serial_max_s() != 0) measuring.push_back("options.serial_max_s");
    if (options.serial_noise() != 0) measuring.push_back("options.serial_noise");
    if (!measuring.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::StrJoin(measuring, ", "), ": a compile_only job measures nothing; leave ",
          measuring.size() == 1 ? "it" : "them", " out"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveArch(const v1::Manifest& manifest,
                                        const worker::v1::DeviceInfo* gpu,
                                        const std::string& default_arch) {
  std::string arch = manifest.arch();
  if (arch.empty()) {
    arch = gpu != nullptr ? absl::StrCat("sm_", gpu->compute_capability()) : default_arch;
  }
  if (!IsGpuArch(arch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest.arch: '", arch, "' is not a GPU architecture like sm_90"));
  }
  if (gpu != nullptr && !ArchRunsOn(arch, gpu->compute_capability())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest.arch: '", arch, "' cannot run on ", gpu->name(), " (sm_",
        gpu->compute_capability(), "); leave it empty to compile for the GPU present"));
  }
  return arch;
}

kernels::DeviceLimits LimitsOf(const worker::v1::DeviceInfo* gpu) {
  kernels::DeviceLimits limits;
  if (gpu == nullptr) return limits;
  if (gpu->max_threads_per_block() > 0) limits.max_threads_per_block = gpu->max_threads_per_block();
  limits.sm_count = gpu->sm_count();
  if (gpu->max_shared_bytes_per_block() > 0) {
    limits.max_dynamic_shared_bytes = gpu->max_shared_bytes_per_block();
  }
  return limits;
}

const std::string& SourceOf(const CompileUnit& unit) {
  const v1::KernelFamily& family = unit.record->family;
  return unit.reference && !family.reference().source().empty() ? family.reference().source()
                                                                : family.source();
}

worker::v1::CompileTask CompileTaskOf(const CompileUnit& unit) {
  worker::v1::CompileTask task;
  task.set_task_id(unit.key);
  task.set_source(SourceOf(unit));
  task.set_program_name(kernels::ProgramName(unit.record->family));
  task.set_name_expression(unit.name_expression);
  for (const std::string& option : unit.options) task.add_options(option);
  task.set_arch(unit.arch);
  for (const v1::SourceHeader& header : unit.record->family.headers()) {
    *task.add_headers() = header;
  }
  return task;
}

FamilyKeyers KeyersOf(const v1::KernelFamily& family, const std::string& arch,
                      const std::string& nvrtc_version) {
  const std::string& reference_source = family.reference().source();
  return FamilyKeyers{
      .variants = kernels::CompileKeyer(family.source(), arch, nvrtc_version, HeadersOf(family)),
      .reference =
          kernels::CompileKeyer(reference_source.empty() ? family.source() : reference_source, arch,
                                nvrtc_version, HeadersOf(family))};
}

absl::StatusOr<CompileUnit> ConfigCompileUnit(std::shared_ptr<const cache::FamilyRecord> record,
                                              const v1::Problem& problem, const v1::Config& config,
                                              const std::string& arch,
                                              const std::string& nvrtc_version) {
  ASSIGN_OR_RETURN(kernels::CompileInputs inputs,
                   kernels::CompileInputsFor(record->family, config, problem.dtype()));
  const kernels::CompileKeyer keyer(record->family.source(), arch, nvrtc_version,
                                    HeadersOf(record->family));
  CompileUnit unit;
  unit.key = keyer.Key(inputs.name_expression, inputs.options);
  unit.record = std::move(record);
  unit.name_expression = std::move(inputs.name_expression);
  unit.options = std::move(inputs.options);
  unit.arch = arch;
  unit.problem = problem;
  unit.config = config;
  return unit;
}

worker::v1::CompileTask CompileTaskOf(const kernels::CompileRequest& request,
                                      const std::string& task_id) {
  worker::v1::CompileTask task;
  task.set_task_id(task_id);
  task.set_source(request.source);
  task.set_program_name(request.program_name);
  task.set_name_expression(request.name_expression);
  for (const std::string& option : request.options) task.add_options(option);
  task.set_arch(request.arch);
  for (const kernels::SourceHeader& header : request.headers) {
    v1::SourceHeader* added = task.add_headers();
    added->set_name(header.name);
    added->set_text(header.text);
  }
  return task;
}

namespace {

// The manifest's problems (this shard's), refused before they are built
// when the job would hold too many problems or variants.
absl::StatusOr<std::vector<kernels::ManifestProblem>> ProblemsOf(
    const v1::JobSpec& spec, const absl::flat_hash_map<std::string, v1::KernelFamily>& by_name,
    const PlanTarget& target) {
  const v1::JobOptions& options = spec.options();
  // Counted before anything is built: a refusal costs reading the manifest.
  ASSIGN_OR_RETURN(const kernels::ManifestCount count,
                   kernels::CountManifest(spec.manifest(), by_name));
  RETURN_IF_ERROR(kernels::CheckManifestCount(count));
  if (target.max_problems > 0 && count.problems > target.max_problems) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "manifest.items: ", kernels::CountText(count.problems), " problems, more than the ",
        target.max_problems,
        " one job may hold (a job's shards each read the whole manifest); split the manifest "
        "into jobs or narrow it"));
  }
  VariantBound bound(target);
  if (options.shard_count() == 0) {
    for (const kernels::ManifestCount::Item& item : count.items) {
      for (v1::DType dtype : item.dtypes) bound.Add(*item.family, dtype, item.problems_per_dtype);
    }
    ASSIGN_OR_RETURN(const int64_t variants, bound.Total());
    RETURN_IF_ERROR(CheckVariantBound(target, count.problems, variants));
  }
  ASSIGN_OR_RETURN(std::vector<kernels::ManifestProblem> problems,
                   kernels::ExpandManifest(spec.manifest(), by_name));
  if (options.shard_count() > 0) {
    ASSIGN_OR_RETURN(
        problems, kernels::ShardProblems(problems, options.shard_index(), options.shard_count()));
    for (const kernels::ManifestProblem& problem : problems) {
      bound.Add(by_name.at(problem.family), problem.problem.dtype(), 1);
    }
    ASSIGN_OR_RETURN(const int64_t variants, bound.Total());
    RETURN_IF_ERROR(CheckVariantBound(target, static_cast<int64_t>(problems.size()), variants));
  }
  return problems;
}

// Adds problems to a plan, each distinct compile once.
class PlanBuilder {
 public:
  PlanBuilder(const v1::JobSpec& spec, const PlanTarget& target, JobPlan* plan)
      : spec_(spec), target_(target), plan_(*plan), limits_(target.limits) {
    plan_.arch = target.arch;
    // The constraints see the arch the plan compiles for (search_space.h).
    if (!target.arch.empty()) limits_.arch = target.arch;
  }

  absl::Status Add(const std::shared_ptr<const cache::FamilyRecord>& record,
                   kernels::ManifestProblem& item) {
    absl::StatusOr<kernels::SearchSpace> space =
        kernels::ExpandSearchSpace(record->family, item.problem, limits_);
    if (!space.ok()) {
      return absl::Status(
          space.status().code(),
          absl::StrCat(ProblemContext(item.family, item.problem), ": ", space.status().message()));
    }
    plan_.variants += static_cast<int64_t>(space->variants.size());
    PlannedProblem planned;
    planned.record = record;
    planned.problem = std::move(item.problem);
    const FamilyKeyers keyers = KeyersOf(record->family, target_.arch, target_.nvrtc_version);
    planned.reference_key = Unit(record, keyers.reference, planned.problem, space->reference_name,
                                 space->reference_compile_options, nullptr);
    planned.variant_keys.reserve(space->variants.size());
    for (const kernels::Variant& variant : space->variants) {
      planned.variant_keys.push_back(Unit(record, keyers.variants, planned.problem,
                                          variant.name_expression, variant.compile_options,
                                          &variant.config));
    }
    const v1::ManifestItem& from = spec_.manifest().items(item.item);
    const int64_t size = static_cast<int64_t>(space->variants.size());
    planned.search =
        ResolveSearch(from.has_search() ? from.search() : spec_.options().search(), size);
    planned.budget = size == 0 ? 0 : planned.search.budget.Variants(size);
    plan_.to_measure += planned.budget;
    planned.space = *std::move(space);
    plan_.problems.push_back(std::move(planned));
    return absl::OkStatus();
  }

 private:
  // The compile's key; its unit is added the first time.
  std::string Unit(const std::shared_ptr<const cache::FamilyRecord>& record,
                   const kernels::CompileKeyer& keyer, const v1::Problem& problem,
                   const std::string& name_expression,
                   const std::vector<std::string>& compile_options, const v1::Config* config) {
    std::string key = keyer.Key(name_expression, compile_options);
    if (seen_.contains(key)) return key;
    seen_.emplace(key, plan_.units.size());
    CompileUnit unit;
    unit.key = key;
    unit.record = record;
    unit.name_expression = name_expression;
    unit.options = compile_options;
    unit.arch = target_.arch;
    unit.problem = problem;
    if (config != nullptr) unit.config = *config;
    unit.reference = config == nullptr;
    plan_.units.push_back(std::move(unit));
    return key;
  }

  const v1::JobSpec& spec_;
  const PlanTarget& target_;
  JobPlan& plan_;
  kernels::DeviceLimits limits_;
  absl::flat_hash_map<std::string, size_t> seen_;
};

}  // namespace

absl::StatusOr<JobPlan> PlanJob(
    const v1::JobSpec& spec,
    const std::map<std::string, std::shared_ptr<const cache::FamilyRecord>>& families,
    const PlanTarget& target) {
  absl::flat_hash_map<std::string, v1::KernelFamily> by_name;
  for (const auto& [name, record] : families) by_name[name] = record->family;
  ASSIGN_OR_RETURN(std::vector<kernels::ManifestProblem> problems,
                   ProblemsOf(spec, by_name, target));
  JobPlan plan;
  PlanBuilder builder(spec, target, &plan);
  for (kernels::ManifestProblem& item : problems) {
    RETURN_IF_ERROR(builder.Add(families.at(item.family), item));
  }
  return plan;
}

void KeepProblems(const std::set<size_t>& keep, JobPlan* plan) {
  std::vector<PlannedProblem> kept;
  // Compile key -> the first kept problem that needs it, which reports name.
  std::map<std::string, const v1::Problem*> needed;
  for (size_t i = 0; i < plan->problems.size(); ++i) {
    if (!keep.contains(i)) continue;
    kept.push_back(std::move(plan->problems[i]));
  }
  for (const PlannedProblem& problem : kept) {
    needed.emplace(problem.reference_key, &problem.problem);
    for (const std::string& key : problem.variant_keys) needed.emplace(key, &problem.problem);
  }
  std::vector<CompileUnit> units;
  for (CompileUnit& unit : plan->units) {
    auto it = needed.find(unit.key);
    if (it == needed.end()) continue;
    unit.problem = *it->second;
    units.push_back(std::move(unit));
  }
  plan->problems = std::move(kept);
  plan->units = std::move(units);
  plan->to_measure = 0;
  for (const PlannedProblem& problem : plan->problems) plan->to_measure += problem.budget;
}

bool SameButSpace(const v1::KernelFamily& a, const v1::KernelFamily& b) {
  const auto run_part = [](const v1::KernelFamily& family) {
    v1::KernelFamily part = family;
    part.clear_params();
    part.clear_constraints();
    part.clear_default_config();
    part.clear_description();
    part.clear_source_file();  // where the source was read from; `source` holds it
    return part;
  };
  return google::protobuf::util::MessageDifferencer::Equals(run_part(a), run_part(b));
}

}  // namespace autotune::service
