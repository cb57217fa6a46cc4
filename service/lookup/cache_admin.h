// The admin side of the daemon: inspect, export, import, invalidate and
// collect the cache. Checks every request before touching the store and
// answers INVALID_ARGUMENT naming the field, NOT_FOUND for unknown families.
// Safe to call while lookups and tuning go on (the store serialises writes).
#ifndef AUTOTUNE_SERVICE_LOOKUP_CACHE_ADMIN_H_
#define AUTOTUNE_SERVICE_LOOKUP_CACHE_ADMIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "service/jobs/compile_phase.h"

namespace autotune::service {

// Largest number of entries one ListEntries answer holds.
inline constexpr int kMaxListLimit = 10000;
// Bound on the bytes one Import may carry in all its parts.
inline constexpr int64_t kMaxImportBytes = int64_t{1} << 30;
// Imports buffered at once at most: with kMaxImportBytes, the memory all
// imports may hold.
inline constexpr int kMaxConcurrentImports = 2;

// The filter as the audit log names it: "family=rmsnorm device=NVIDIA H200",
// "all entries" when empty.
std::string DescribeFilter(const v1::EntryFilter& filter);

// What RegisterKernel runs on a new family version beyond its descriptor's
// checks: the compile check of kernels/family_check.h (the daemon's runs it
// on the compile pool). INVALID_ARGUMENT with its findings refuses the
// family; FAILED_PRECONDITION means it could not run (no compiler here),
// and the family is stored with that said in the answer's warnings.
using FamilyCompileCheck = std::function<absl::Status(const v1::KernelFamily&)>;

// The daemon's own compile of configs (JobRunner::CompileConfigs): what
// Import serves in place of whatever binary an entry came with.
// FAILED_PRECONDITION means this daemon cannot compile.
using ConfigCompiler =
    std::function<absl::StatusOr<CompiledConfigs>(const std::vector<ConfigCompile>&)>;

class CacheAdmin {
 public:
  explicit CacheAdmin(cache::Store* store, FamilyCompileCheck compile_check = nullptr,
                      ConfigCompiler config_compiler = nullptr)
      : store_(store),
        compile_check_(std::move(compile_check)),
        config_compiler_(std::move(config_compiler)) {}

  absl::StatusOr<v1::ListKernelsResponse> ListKernels() const;
  // Checks the descriptor (kernels::ValidateFamily, every problem at once),
  // then, for a version not stored yet, compiles it (FamilyCompileCheck), and
  // stores it. A name that already has another content hash needs `replace`
  // (ALREADY_EXISTS otherwise); entries of the old version stay, reachable
  // by its hash.
  absl::StatusOr<v1::RegisterKernelResponse> RegisterKernel(
      const v1::RegisterKernelRequest& request);
  // Removes every version of a family (Store::RemoveFamily). Refused
  // (FAILED_PRECONDITION) while a job that has not ended names it.
  absl::StatusOr<v1::UnregisterKernelResponse> UnregisterKernel(
      const v1::UnregisterKernelRequest& request);
  absl::StatusOr<v1::ListEntriesResponse> ListEntries(const v1::ListEntriesRequest& request) const;
  // The entry and every measurement of its family version x problem x device.
  absl::StatusOr<v1::GetEntryResponse> GetEntry(const v1::GetEntryRequest& request) const;
  // An empty filter needs all = true.
  absl::StatusOr<v1::InvalidateResponse> Invalidate(const v1::InvalidateRequest& request);
  absl::StatusOr<cache::StoreStats> StoreStats() const;
  absl::StatusOr<v1::CacheBundle> Export(const v1::ExportRequest& request) const;
  // Imports a bundle, all or nothing, as a chain of trust: what reaches a
  // reader is what this daemon compiled (docs/security.md).
  //  1. `families_refused` not empty (the caller may not add families): a
  //     family version the store does not hold is refused with
  //     PERMISSION_DENIED before anything is checked or compiled.
  //  2. Every family passes RegisterKernel's checks (kernels::ValidateFamily,
  //     "families[2].family: ..."; a version not stored yet, the compile
  //     check); the items pass CheckBundleItems.
  //  3. Every entry's config is compiled by this daemon (ConfigCompiler, the
  //     compile cache first) for the entry's arch: the entry is stored with
  //     that binary, its lowered name and this NVRTC's version. An imported
  //     binary with other bytes is not stored (the answer counts and names
  //     each one, binaries_replaced); an imported function_name that differs
  //     is refused (INVALID_ARGUMENT naming the field); a config that does not
  //     compile here is refused. Without a compiler, an entry that names a
  //     binary or function is refused (FAILED_PRECONDITION): nothing checks it.
  //  4. Store::Import; `families_refused` as there (not empty: the bundle may
  //     not make a stored version current either).
  absl::StatusOr<v1::ImportResponse> Import(const v1::CacheBundle& bundle,
                                            cache::Store::Merge merge,
                                            absl::string_view families_refused = "");
  // The bundle's entries and measurements against their family version
  // (the bundle's, else the store's): the problem fits it (ValidateProblem:
  // dims, dtype), an entry's config is one of its space (ResolveConfig:
  // values, constraints, launch) and its launch (grid, block, dynamic shared
  // bytes, tensor maps) is exactly the one the family computes for that
  // problem and config, its arch names an architecture, timings are finite
  // and >= 0 (an entry's median > 0), margin, noise and max_error finite,
  // text fields bounded and free of control characters (names none at all;
  // details may hold newlines and tabs), every binary of the bundle named by
  // one of its entries. INVALID_ARGUMENT naming the item:
  // "entries[3].timing.median_us is nan; ...",
  // "entries[0].launch.grid: (2147483647, 65535, 65535) is not the launch
  // family 'rmsnorm' computes for this problem and config, (64)".
  // Found on e01f360: imported NaN timings, INT64_MIN dims, 20 MB device
  // names were stored and served; on 2bc4d71: planted launches and bytes.
  absl::Status CheckBundleItems(const v1::CacheBundle& bundle) const;
  absl::StatusOr<v1::BackupResponse> Backup(const v1::BackupRequest& request);
  absl::StatusOr<v1::GarbageCollectResponse> GarbageCollect(
      const v1::GarbageCollectRequest& request);
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) const;
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) const;

 private:
  // Field checks shared by every call that takes a filter; `field` prefixes
  // the messages ("filter"). Returns the filter with family_hash, which may
  // be a prefix, replaced by the whole hash of the version it names.
  absl::StatusOr<v1::EntryFilter> ResolveFilter(const v1::EntryFilter& filter,
                                                absl::string_view field) const;

  // Step 1 of Import: the bundle's family versions the store lacks.
  absl::Status RefuseNewFamilies(const v1::CacheBundle& bundle,
                                 absl::string_view families_refused) const;
  // Step 3 of Import: `bundle` with every entry's binary, function name and
  // NVRTC version this daemon's own, its binaries dropped (the compiles
  // stored theirs); what was replaced is added to `response`.
  absl::StatusOr<v1::CacheBundle> WithOwnCompiles(const v1::CacheBundle& bundle,
                                                  v1::ImportResponse& response) const;

  cache::Store* store_;
  FamilyCompileCheck compile_check_;
  ConfigCompiler config_compiler_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_LOOKUP_CACHE_ADMIN_H_
