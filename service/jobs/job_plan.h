// A warmup job's plan: its manifest expanded into problems, each problem's
// variants, and the distinct compiles they need, checked on the way. Pure:
// no store, no processes, no clock. JobRunner reads the inputs (the
// families' current versions, the GPU the job will run on) and acts on the
// plan; tests build plans from hand-made records.
//
//   RETURN_IF_ERROR(CheckJobSpec(spec));                 // before anything starts
//   ASSIGN_OR_RETURN(std::string arch, ResolveArch(spec.manifest(), gpu, "sm_90"));
//   ASSIGN_OR_RETURN(JobPlan plan, PlanJob(spec, families, {.arch = arch, ...}));
//
// A compile is keyed by kernels::CompileKey (source, name expression,
// options, arch, NVRTC version), so variants that compile the same way in
// several problems (the same config at another size) are compiled once.
#ifndef AUTOTUNE_SERVICE_JOBS_JOB_PLAN_H_
#define AUTOTUNE_SERVICE_JOBS_JOB_PLAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/store.h"
#include "kernels/compile_request.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"
#include "service/defaults.h"
#include "service/jobs/search.h"

namespace autotune::service {

// One distinct compile. It holds what is particular to it; the source and
// headers stay in the family's record, shared by every unit of the family
// (a space of 100k variants of a 40 KB source would be 4 GB of copies),
// until CompileTaskOf builds the worker's task for the compile.
struct CompileUnit {
  std::string key;                                    // kernels::CompileKey
  std::shared_ptr<const cache::FamilyRecord> record;  // its family, name and hash
  std::string name_expression;
  std::vector<std::string> options;
  std::string arch;
  v1::Problem problem;  // the first problem that needs it, for reports
  v1::Config config;    // empty for a reference kernel
  // The reference kernel, compiled from reference.source when the family
  // gives one (else from the family's source, as every variant).
  bool reference = false;
};

// The source a unit compiles: its family's, or its reference's own.
const std::string& SourceOf(const CompileUnit& unit);

// The worker's task for `unit`: SourceOf(unit) and the record's headers, its
// name expression, options and arch; task_id = key, program_name
// kernels::ProgramName (the file the family's author wrote).
worker::v1::CompileTask CompileTaskOf(const CompileUnit& unit);
// The worker's task for a compile the daemon asks outside a job (the
// compile check of a family it is asked to register).
worker::v1::CompileTask CompileTaskOf(const kernels::CompileRequest& request,
                                      const std::string& task_id);

// How a job keys the compiles of a family for one arch and NVRTC version:
// its variants' by the family's source, its reference's by the reference's
// own source when it has one. Each source is hashed once here, not once per
// variant. What the compile records in the store are found by.
struct FamilyKeyers {
  kernels::CompileKeyer variants;
  kernels::CompileKeyer reference;
};
FamilyKeyers KeyersOf(const v1::KernelFamily& family, const std::string& arch,
                      const std::string& nvrtc_version);

// The unit that compiles `config` of `record` for `problem` on `arch` with
// NVRTC `nvrtc_version`: the key and task a job's plan gives that variant,
// so the compile cache answers for both. INVALID_ARGUMENT as
// kernels::CompileInputsFor's when the config is not one of the family's.
absl::StatusOr<CompileUnit> ConfigCompileUnit(std::shared_ptr<const cache::FamilyRecord> record,
                                              const v1::Problem& problem, const v1::Config& config,
                                              const std::string& arch,
                                              const std::string& nvrtc_version);

// One problem of the job, with its variants.
struct PlannedProblem {
  std::shared_ptr<const cache::FamilyRecord> record;
  v1::Problem problem;
  kernels::SearchSpace space;
  std::string reference_key;
  std::vector<std::string> variant_keys;  // parallel to space.variants
  // How its variants are searched: its manifest item's search, else the
  // job's, the strategy resolved (ResolveSearch); budget = what it may
  // measure (SearchBudget).
  SearchOptions search;
  int64_t budget = 0;
  // The configs that won the nearest problems of the same family on this
  // GPU model, which the search measures early; set by the job runner.
  std::vector<v1::Config> hints;
  // The problem's entry before this job (a retune), which a tie keeps; set
  // by the job runner, not by PlanJob.
  std::optional<v1::Config> current_config;
  // The best entry the cache held for the problem on this GPU model before
  // the job, of any family version (reports compare against it); set by
  // the job runner.
  std::optional<v1::Entry> previous;
  // An older version of the family that differs from this one only in its
  // search space (SameButSpace): the screens it made of binaries this job
  // also runs, on this GPU model and driver, stand for this job's, so only
  // new variants (new parameter values) are screened. Empty = none; set by
  // the job runner.
  std::string screens_from_hash;
};

struct JobPlan {
  std::string arch;
  int64_t variants = 0;    // over every problem's space, as planned
  int64_t to_measure = 0;  // the budgets of the problems kept, added up
  std::vector<PlannedProblem> problems;
  std::vector<CompileUnit> units;  // each key once, in first-needed order
};

// What the plan is made for.
struct PlanTarget {
  std::string arch;              // from ResolveArch
  std::string nvrtc_version;     // part of every compile key
  kernels::DeviceLimits limits;  // its arch is replaced by `arch` when set
  // Most variants the plan may hold (0 = no limit), and how an error names
  // that limit ("max_job_variants (500000; autotuned --max-job-variants)").
  int64_t max_job_variants = 0;
  std::string max_job_variants_setting = "max_job_variants";
  // Most problems the job's manifest may hold, sharded or not (0 = no limit).
  int64_t max_problems = kDefaultMaxJobProblems;
};

// A problem's search: `given`, its strategy resolved for a space of
// `variants` when unspecified (exhaustive up to kExhaustiveSearchUpTo, the
// model above).
SearchOptions ResolveSearch(const v1::SearchOptions& given, int64_t variants);

// What `report` says of a search that ran with `search`, for the entry:
// "random, seed 7: 690 of 6904 variants measured (10.0%)"; a search that
// started from configs that won tuned problems (report.hints) or stopped
// at its time budget (report.out_of_time) says so: "model, seed 7, seeded
// with 3 winning configs of tuned problems: 448 of 6904 variants measured
// (6.5%); stopped at its time budget of 90 s".
std::string DescribeSearch(const SearchOptions& search, const v1::SearchReport& report);

// The checks that need nothing but the spec: INVALID_ARGUMENT naming the
// field ("manifest.items is empty", "manifest.items[2].family is empty",
// "options.shard_index 3 is not in 0..shard_count-1 (shard_count 2)",
// "manifest.items[1].search.max_fraction is 2, not in 0..1",
// "options.search: a compile_only job measures nothing to search",
// "options.force, options.serial_max_s: a compile_only job measures
// nothing; leave them out",
// "options.compile_timeout_s is negative", "options.serial_candidates: ...").
absl::Status CheckJobSpec(const v1::JobSpec& spec);

// The architecture to compile for: manifest.arch, else the GPU's
// ("sm_<compute capability>"), else `default_arch`. INVALID_ARGUMENT when
// manifest.arch is not an architecture, or names one `gpu` cannot run.
absl::StatusOr<std::string> ResolveArch(const v1::Manifest& manifest,
                                        const worker::v1::DeviceInfo* gpu,
                                        const std::string& default_arch);

// The limits a variant must fit on `gpu`, as its worker reported them; the
// documented sm_90 defaults for what it does not report (or without a GPU).
kernels::DeviceLimits LimitsOf(const worker::v1::DeviceInfo* gpu);

// Expands the manifest (sharded by options.shard_*) over `families` (every
// family the manifest names, current version). INVALID_ARGUMENT from the
// manifest or a search space, the message naming the problem.
//
// The limits are kept by arithmetic before anything is built
// (kernels::CountManifest): first the manifest's problems against
// target.max_problems, then its variants against target.max_job_variants,
// bounded from above by each problem's family: the configs that pass the
// constraints reading only params and dtype_bytes (the dims' constraints
// and the launch limits only remove more). A sharded job's problems are
// listed first (at most max_problems of them) and its shard's are bounded.
// So a refused job costs reading its manifest, never a plan:
// RESOURCE_EXHAUSTED "manifest.items: 1048576 problems, more than the
// 100000 one job may hold ..." or "the job may have 12600000 variants (its
// 75000 problems times the configs their families' params and constraints
// allow), more than the 500000 the daemon's limit max_job_variants (...)
// allows; split it into shards ...".
absl::StatusOr<JobPlan> PlanJob(
    const v1::JobSpec& spec,
    const std::map<std::string, std::shared_ptr<const cache::FamilyRecord>>& families,
    const PlanTarget& target);

// Whether two versions of a family differ only in what chooses among
// variants, not in what a variant computes or how it is run and timed:
// params, constraints, default_config and description may differ; source,
// kernel name, dims, dtypes, buffers, scalars, launch, binding, reference,
// tolerances, byte and flop counts, compile options and cache state may not.
// A variant that compiles to the same binary under both then validates and
// times alike.
bool SameButSpace(const v1::KernelFamily& a, const v1::KernelFamily& b);

// Keeps the problems whose index is in `keep` and the units they need.
void KeepProblems(const std::set<size_t>& keep, JobPlan* plan);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_JOB_PLAN_H_
