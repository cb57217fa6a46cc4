// autotune-bench-plan: what the daemon's plan of a warmup job costs, in
// time and memory, for spaces up to 100k configs and beyond. The plan is
// what a job does before it compiles anything (service/jobs/job_plan.h):
// expand the manifest, each problem's search space, each variant's compile
// key.
//
//   autotune-bench-plan --family kernels/builtin/gemm_bf16.textproto
//       --manifest bench/gemm_4096.manifest --widen 14
//
// --widen N adds a parameter WIDEN with N values that the kernel never
// reads; each is a distinct compile (its own -D), so a real family's space,
// source and constraints grow N times. It prints the configs planned, the
// distinct compiles, the median wall time of --runs plans and the
// process's peak resident memory.
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "kernels/family_loader.h"
#include "kernels/manifest.h"
#include "proto/problem.h"
#include "service/jobs/job_plan.h"

namespace autotune {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"The cost of a warmup job's plan"};
  std::string family_path;
  std::string manifest_path;
  int widen = 1;
  int runs = 3;
  app.add_option("--family", family_path, "a family descriptor (.textproto)")->required();
  app.add_option("--manifest", manifest_path, "a manifest over that family")->required();
  app.add_option("--widen", widen, "multiply the space by N with an unread parameter")
      ->check(CLI::Range(1, 1000));
  app.add_option("--runs", runs, "plans to time; the median is printed")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<v1::KernelFamily> family = kernels::LoadFamilyFile(family_path);
  if (!family.ok()) {
    std::fprintf(stderr, "%s\n", std::string(family.status().message()).c_str());
    return 1;
  }
  if (widen > 1) {
    v1::TunableParameter* param = family->add_params();
    param->set_name("WIDEN");
    for (int i = 0; i < widen; ++i) param->add_values(i);
  }
  absl::StatusOr<v1::Manifest> manifest = kernels::LoadManifestFile(manifest_path);
  if (!manifest.ok()) {
    std::fprintf(stderr, "%s\n", std::string(manifest.status().message()).c_str());
    return 1;
  }
  auto record = std::make_shared<cache::FamilyRecord>();
  record->content_hash = FamilyContentHash(*family);
  record->family = *family;
  std::map<std::string, std::shared_ptr<const cache::FamilyRecord>> families;
  families[family->name()] = record;
  v1::JobSpec spec;
  *spec.mutable_manifest() = *manifest;
  service::PlanTarget target;
  target.arch = manifest->arch().empty() ? "sm_90" : manifest->arch();
  target.nvrtc_version = "13.0";

  std::vector<double> seconds;
  int64_t variants = 0;
  size_t units = 0;
  size_t problems = 0;
  for (int run = 0; run < runs; ++run) {
    const absl::Time start = absl::Now();
    absl::StatusOr<service::JobPlan> plan = service::PlanJob(spec, families, target);
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    if (!plan.ok()) {
      std::fprintf(stderr, "%s\n", std::string(plan.status().message()).c_str());
      return 1;
    }
    variants = plan->variants;
    units = plan->units.size();
    problems = plan->problems.size();
  }
  std::sort(seconds.begin(), seconds.end());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("problems %zu, configs planned %lld, distinct compiles %zu\n", problems,
              static_cast<long long>(variants), units);
  std::printf("plan: median %.3f s of %d (min %.3f, max %.3f); peak resident %.0f MB\n",
              seconds[seconds.size() / 2], runs, seconds.front(), seconds.back(),
              static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}

}  // namespace
}  // namespace autotune

int main(int argc, char** argv) { return autotune::Main(argc, argv); }
