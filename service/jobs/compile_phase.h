// The compile phase of a job: every distinct compile of its plan once, in
// the compile pool, with the outcome kept in the store's compile cache.
//
//   CompileResults compiled = RunCompilePhase(plan.units, store, pool, options, cancel,
//                                             [&](const CompileUnit& unit, const CompileEnd& end) {
//                                               ...count and report...
//                                             });
//
// A key already in the compile cache costs one SELECT. A compile past its
// deadline is COMPILE_TIMEOUT and a crashed worker a COMPILE_ERROR; neither
// is cached, so a rerun tries again. A store that fails to answer or to
// keep a result is a store error on that unit, never a cache miss or a
// compile error: the problems that need the unit fail with it.
#ifndef AUTOTUNE_SERVICE_JOBS_COMPILE_PHASE_H_
#define AUTOTUNE_SERVICE_JOBS_COMPILE_PHASE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "service/defaults.h"
#include "service/jobs/job_plan.h"
#include "service/pools/compile_pool.h"

namespace autotune::service {

// How one compile ended, with what the screen phase needs of it.
struct CompileEnd {
  // OK, COMPILE_ERROR or COMPILE_TIMEOUT; unspecified when not run
  // (cancelled) or when `store_error` is set.
  v1::VariantStatus status = v1::VARIANT_STATUS_UNSPECIFIED;
  std::string log;
  bool cache_hit = false;
  std::string binary_sha256;  // OK
  std::string lowered_name;   // OK
  // OK and compiled by this job with keep_cubins: the image itself, so it is
  // not read back. Empty otherwise: read it by binary_sha256.
  std::string cubin;
  absl::Status store_error;
};

using CompileResults = std::map<std::string, CompileEnd>;  // by compile key

struct CompilePhaseOptions {
  int parallelism = 1;  // compiles in flight
  absl::Duration timeout = absl::Seconds(kDefaultCompileTimeoutS);
  bool keep_cubins = false;  // for a job that screens next
};

// One config to compile outside a job (Import's check of an imported
// binary, cache_admin.h): `config` of `record` for `problem` on `arch`.
struct ConfigCompile {
  std::shared_ptr<const cache::FamilyRecord> record;
  v1::Problem problem;
  v1::Config config;
  std::string arch;  // "sm_90"
};

// What the daemon's own compiles of ConfigCompiles gave: one end per config,
// in order, and the NVRTC that compiled them ("13.0").
struct CompiledConfigs {
  std::string nvrtc_version;
  std::vector<CompileEnd> ends;
};

// One unit: the compile cache's answer when it has one, else a compile in
// `pool` whose outcome the cache keeps (OK and COMPILE_ERROR; not a
// timeout or a crash). What RunCompilePhase and CompileQueue run per unit.
CompileEnd CompileOne(const CompileUnit& unit, cache::Store& store, CompilePool& pool,
                      const CompilePhaseOptions& options);

// Runs `units` (blocking). `on_end` is called once per unit that ran, from
// one of the phase's threads, as it ends. Units not started when `cancel`
// turns true are left out of the result.
CompileResults RunCompilePhase(
    const std::vector<CompileUnit>& units, cache::Store& store, CompilePool& pool,
    const CompilePhaseOptions& options, const std::atomic<bool>& cancel,
    const std::function<void(const CompileUnit&, const CompileEnd&)>& on_end);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_COMPILE_PHASE_H_
