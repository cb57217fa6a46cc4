// The admin side of the daemon: inspect, export, import, invalidate and
// collect the cache. Checks every request before touching the store and
// answers INVALID_ARGUMENT naming the field, NOT_FOUND for unknown families.
// Safe to call while lookups and tuning go on (the store serialises writes).
#ifndef AUTOTUNE_SERVICE_CACHE_ADMIN_H_
#define AUTOTUNE_SERVICE_CACHE_ADMIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"

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

class CacheAdmin {
 public:
  explicit CacheAdmin(cache::Store* store, FamilyCompileCheck compile_check = nullptr)
      : store_(store), compile_check_(std::move(compile_check)) {}

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
  // Every family of the bundle passes RegisterKernel's checks
  // (kernels::ValidateFamily, "families[2].family: ..."; a version not
  // stored yet, the compile check), then Store::Import; `families_refused` as there (not empty: the
  // bundle may not add a family version or make one current).
  absl::StatusOr<v1::ImportResponse> Import(const v1::CacheBundle& bundle,
                                            cache::Store::Merge merge,
                                            absl::string_view families_refused = "");
  // The bundle's entries and measurements against their family version
  // (the bundle's, else the store's): the problem fits it (ValidateProblem:
  // dims, dtype), an entry's config is one of its space (ResolveConfig:
  // values, constraints, launch), timings are finite and >= 0 (an entry's
  // median > 0), margin, noise and max_error finite, text fields bounded.
  // INVALID_ARGUMENT naming the item: "entries[3].timing.median_us is nan;
  // ...". Found on e01f360: imported NaN timings, INT64_MIN dims, 20 MB
  // device names were stored and served.
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

  cache::Store* store_;
  FamilyCompileCheck compile_check_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_CACHE_ADMIN_H_
