#include "service/lookup/cache_admin.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/family_check.h"
#include "kernels/family_loader.h"
#include "kernels/profile_task.h"
#include "kernels/search_space.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/lookup/lookup_resolver.h"

namespace autotune::service {
namespace {

// Text fields of an imported entry or measurement, at most this long.
constexpr size_t kMaxNameBytes = 256;     // device name, versions, arch, job id
constexpr size_t kMaxDetailBytes = 8192;  // detail, contention, stop, function name

absl::Status Bounded(absl::string_view field, absl::string_view text, size_t max) {
  if (text.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", text.size(), " bytes, more than the limit of ", max));
}

// Timings that compare: finite and >= 0; the median of an entry > 0.
absl::Status CheckTiming(absl::string_view field, const v1::TimingStats& timing,
                         bool median_required) {
  const std::pair<const char*, double> values[] = {{"median_us", timing.median_us()},
                                                   {"min_us", timing.min_us()},
                                                   {"p90_us", timing.p90_us()},
                                                   {"q1_us", timing.q1_us()},
                                                   {"q3_us", timing.q3_us()},
                                                   {"cv", timing.cv()},
                                                   {"achieved_gbps", timing.achieved_gbps()},
                                                   {"achieved_tflops", timing.achieved_tflops()}};
  for (const auto& [name, value] : values) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".", name, " is ", value, "; timings are finite and >= 0"));
    }
  }
  if (median_required && !(timing.median_us() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".median_us is ", timing.median_us(), "; an entry's median is > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DescribeFilter(const v1::EntryFilter& filter) {
  std::string text;
  const auto add = [&text](absl::string_view name, const std::string& value) {
    if (!value.empty()) absl::StrAppend(&text, text.empty() ? "" : " ", name, "=", value);
  };
  add("family", filter.family());
  add("family_hash", filter.family_hash());
  add("device", filter.device());
  if (filter.has_problem()) add("problem", FormatDims(filter.problem().dims()));
  add("nvrtc_older_than", filter.nvrtc_older_than());
  return text.empty() ? "all entries" : text;
}

absl::StatusOr<v1::EntryFilter> CacheAdmin::ResolveFilter(const v1::EntryFilter& given,
                                                          absl::string_view field) const {
  v1::EntryFilter filter = given;
  if (!filter.family().empty()) {
    RETURN_IF_ERROR(store_->GetFamily(filter.family()).status());
    if (!filter.family_hash().empty()) {
      ASSIGN_OR_RETURN(cache::FamilyRecord version,
                       store_->GetFamilyVersion(filter.family(), filter.family_hash()));
      filter.set_family_hash(version.content_hash);
    }
  }
  if (!filter.nvrtc_older_than().empty()) {
    absl::StatusOr<int64_t> version = NvrtcVersionNumber(filter.nvrtc_older_than());
    if (!version.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".nvrtc_older_than: ", version.status().message()));
    }
  }
  // Dims and dtype select apart or together: the dims of one family's
  // problems (of every dtype), a dtype (of every family, or of one).
  const v1::Problem& problem = filter.problem();
  const bool has_dims = problem.dims_size() > 0;
  const bool has_dtype = problem.dtype() != v1::DTYPE_UNSPECIFIED;
  if (has_dims && filter.family().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".problem.dims needs ", field, ".family (dims belong to a family)"));
  }
  if ((has_dims || has_dtype) && !filter.family().empty()) {
    ASSIGN_OR_RETURN(cache::FamilyRecord family, store_->GetFamily(filter.family()));
    if (has_dims) {
      v1::Problem checked = problem;
      if (!has_dtype && family.family.dtypes_size() > 0) {
        checked.set_dtype(family.family.dtypes(0));  // the dims as they are under any dtype
      }
      RETURN_IF_ERROR(ValidateProblem(family.family, checked, absl::StrCat(field, ".problem")));
    } else if (!absl::c_linear_search(family.family.dtypes(), problem.dtype())) {
      std::vector<std::string> names;
      for (int dtype : family.family.dtypes()) names.push_back(DTypeName(v1::DType(dtype)));
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".problem.dtype: ", DTypeName(problem.dtype()), " is not supported by family '",
          filter.family(), "' (", absl::StrJoin(names, ", "), ")"));
    }
  }
  return filter;
}

absl::StatusOr<v1::ListKernelsResponse> CacheAdmin::ListKernels() const {
  ASSIGN_OR_RETURN(std::vector<v1::KernelSummary> kernels, store_->ListFamilies());
  v1::ListKernelsResponse response;
  for (v1::KernelSummary& kernel : kernels) *response.add_kernels() = std::move(kernel);
  return response;
}

absl::StatusOr<v1::RegisterKernelResponse> CacheAdmin::RegisterKernel(
    const v1::RegisterKernelRequest& request) {
  RETURN_IF_ERROR(kernels::ValidateFamily(request.family(), "family"));
  const std::string hash = FamilyContentHash(request.family());
  absl::StatusOr<cache::FamilyRecord> existing = store_->GetFamily(request.family().name());
  if (existing.ok() && existing->content_hash != hash && !request.replace()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "family '", request.family().name(), "' is registered with another content hash (",
        existing->content_hash.substr(0, 12),
        "...); register with replace (autotune register --replace) to make this "
        "version current"));
  }
  if (!existing.ok() && !absl::IsNotFound(existing.status())) return existing.status();
  v1::RegisterKernelResponse response;
  for (std::string& warning : kernels::FamilyWarnings(request.family())) {
    response.add_warnings(std::move(warning));
  }
  const bool stored = existing.ok() && existing->content_hash == hash;
  if (!stored && compile_check_) {
    absl::Status compiled = compile_check_(request.family());
    if (absl::IsFailedPrecondition(compiled)) {
      response.add_warnings(absl::StrCat("not compiled before storing it: ", compiled.message()));
    } else if (!compiled.ok()) {
      return compiled;
    }
  }
  bool changed = false;
  ASSIGN_OR_RETURN(cache::FamilyRecord record,
                   store_->PutFamily(request.family(), /*builtin=*/false, &changed));
  ASSIGN_OR_RETURN(std::vector<v1::KernelSummary> kernels, store_->ListFamilies());
  for (v1::KernelSummary& kernel : kernels) {
    if (kernel.name() == record.family.name()) *response.mutable_kernel() = std::move(kernel);
  }
  response.set_changed(changed);
  return response;
}

absl::StatusOr<v1::UnregisterKernelResponse> CacheAdmin::UnregisterKernel(
    const v1::UnregisterKernelRequest& request) {
  if (request.name().empty()) return absl::InvalidArgumentError("name: must be set");
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->ListUnfinishedJobs());
  for (const v1::Job& job : jobs) {
    for (const v1::ManifestItem& item : job.spec().manifest().items()) {
      if (item.family() == request.name()) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", job.id(), " (", v1::JobState_Name(job.state()), ") tunes family '",
                         request.name(), "'; cancel it or let it end first"));
      }
    }
  }
  ASSIGN_OR_RETURN(const cache::Store::RemovedFamily removed,
                   store_->RemoveFamily(request.name(), request.invalidate()));
  v1::UnregisterKernelResponse response;
  response.set_versions_removed(removed.versions);
  response.set_entries_removed(removed.entries);
  response.set_measurements_removed(removed.measurements);
  return response;
}

absl::StatusOr<v1::ListEntriesResponse> CacheAdmin::ListEntries(
    const v1::ListEntriesRequest& request) const {
  ASSIGN_OR_RETURN(const v1::EntryFilter filter, ResolveFilter(request.filter(), "filter"));
  if (request.limit() < 0 || request.limit() > kMaxListLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: ", request.limit(), " is not in 0..", kMaxListLimit));
  }
  if (request.offset() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset: ", request.offset(), " is negative"));
  }
  const int limit = request.limit() == 0 ? kDefaultListEntriesLimit : request.limit();
  int64_t total = 0;
  ASSIGN_OR_RETURN(std::vector<v1::Entry> entries,
                   store_->ListEntries(filter, limit, request.offset(), &total));
  v1::ListEntriesResponse response;
  for (v1::Entry& entry : entries) *response.add_entries() = std::move(entry);
  response.set_total(total);
  return response;
}

absl::StatusOr<v1::GetEntryResponse> CacheAdmin::GetEntry(
    const v1::GetEntryRequest& request) const {
  if (request.family().empty()) return absl::InvalidArgumentError("family is empty");
  cache::FamilyRecord family;
  if (request.family_hash().empty()) {
    ASSIGN_OR_RETURN(family, store_->GetFamily(request.family()));
  } else {
    ASSIGN_OR_RETURN(family, store_->GetFamilyVersion(request.family(), request.family_hash()));
  }
  RETURN_IF_ERROR(ValidateProblem(family.family, request.problem(), "problem"));
  std::string device = request.device().name();
  if (device.empty()) {
    // The only device this problem was tuned on; several must be chosen from.
    v1::EntryFilter filter;
    filter.set_family(request.family());
    filter.set_family_hash(family.content_hash);
    *filter.mutable_problem() = request.problem();
    ASSIGN_OR_RETURN(std::vector<v1::Entry> entries, store_->ListEntries(filter, -1, 0));
    if (entries.size() > 1) {
      std::vector<std::string> names;
      for (const v1::Entry& entry : entries) names.push_back(entry.device().name());
      return absl::InvalidArgumentError(
          absl::StrCat("device.name is empty and the problem was tuned on several devices (",
                       absl::StrJoin(names, ", "), "); name one"));
    }
    if (entries.size() == 1) device = entries.front().device().name();
  }
  const cache::EntryKey key{request.family(), family.content_hash, request.problem(), device};
  ASSIGN_OR_RETURN(std::optional<v1::Entry> entry, store_->FindEntry(key));
  if (!entry.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "no entry for ", ProblemContext(request.family(), request.problem()),
        device.empty() ? std::string(" on any device") : absl::StrCat(" on ", device)));
  }
  ASSIGN_OR_RETURN(std::vector<v1::Measurement> measurements, store_->ListMeasurements(key));
  v1::GetEntryResponse response;
  *response.mutable_entry() = *std::move(entry);
  for (v1::Measurement& measurement : measurements) {
    *response.add_measurements() = std::move(measurement);
  }
  return response;
}

absl::StatusOr<v1::InvalidateResponse> CacheAdmin::Invalidate(
    const v1::InvalidateRequest& request) {
  ASSIGN_OR_RETURN(const v1::EntryFilter filter, ResolveFilter(request.filter(), "filter"));
  const bool empty = filter.family().empty() && filter.family_hash().empty() &&
                     filter.device().empty() && filter.problem().dims_size() == 0 &&
                     filter.nvrtc_older_than().empty();
  if (empty && !request.all()) {
    return absl::InvalidArgumentError(
        "filter is empty: name a family, family_hash, device, problem or nvrtc_older_than, "
        "or set all to drop every entry");
  }
  ASSIGN_OR_RETURN(cache::InvalidateResult result, store_->Invalidate(filter, request.dry_run()));
  v1::InvalidateResponse response;
  response.set_entries_removed(static_cast<int64_t>(result.removed.size()));
  response.set_measurements_removed(result.measurements_removed);
  for (v1::Entry& entry : result.removed) *response.add_removed() = std::move(entry);
  return response;
}

absl::StatusOr<cache::StoreStats> CacheAdmin::StoreStats() const { return store_->Stats(); }

absl::StatusOr<v1::CacheBundle> CacheAdmin::Export(const v1::ExportRequest& request) const {
  ASSIGN_OR_RETURN(const v1::EntryFilter filter, ResolveFilter(request.filter(), "filter"));
  return store_->Export(filter, request.include_measurements());
}

absl::StatusOr<v1::BackupResponse> CacheAdmin::Backup(const v1::BackupRequest& request) {
  return store_->Backup(request.path());
}

absl::StatusOr<v1::ImportResponse> CacheAdmin::Import(const v1::CacheBundle& bundle,
                                                      cache::Store::Merge merge,
                                                      absl::string_view families_refused) {
  // One validation path for families, whichever call carries them.
  for (int i = 0; i < bundle.families_size(); ++i) {
    RETURN_IF_ERROR(kernels::ValidateFamily(bundle.families(i).family(),
                                            absl::StrCat("families[", i, "].family")));
  }
  RETURN_IF_ERROR(CheckBundleItems(bundle));
  // A version this store does not hold yet is compiled as RegisterKernel
  // compiles it, and refused for the same findings.
  for (int i = 0; compile_check_ && i < bundle.families_size(); ++i) {
    const v1::KernelFamily& family = bundle.families(i).family();
    absl::StatusOr<cache::FamilyRecord> stored =
        store_->GetFamilyVersion(family.name(), FamilyContentHash(family));
    if (stored.ok()) continue;
    if (!absl::IsNotFound(stored.status())) return stored.status();
    const absl::Status compiled = compile_check_(family);
    // FAILED_PRECONDITION: no compiler here; imported as RegisterKernel
    // stores such a family.
    if (!compiled.ok() && !absl::IsFailedPrecondition(compiled)) {
      return absl::Status(compiled.code(),
                          absl::StrCat("families[", i, "].family: ", compiled.message()));
    }
  }
  return store_->Import(bundle, merge,
                        std::string_view(families_refused.data(), families_refused.size()));
}

absl::Status CacheAdmin::CheckBundleItems(const v1::CacheBundle& bundle) const {
  // The family versions the items name: the bundle's, else the store's. A
  // version in neither is left to the store, which names it.
  std::map<std::string, v1::KernelFamily> versions;  // "name/hash"
  for (const v1::FamilyRecord& record : bundle.families()) {
    versions[absl::StrCat(record.family().name(), "/", FamilyContentHash(record.family()))] =
        record.family();
  }
  const auto family_of = [&](const std::string& name,
                             const std::string& hash) -> absl::StatusOr<const v1::KernelFamily*> {
    const std::string key = absl::StrCat(name, "/", hash);
    if (auto it = versions.find(key); it != versions.end()) return &it->second;
    absl::StatusOr<cache::FamilyRecord> stored = store_->GetFamilyVersion(name, hash);
    if (absl::IsNotFound(stored.status())) return nullptr;
    if (!stored.ok()) return stored.status();
    return &(versions[key] = std::move(stored->family));
  };
  for (int i = 0; i < bundle.entries_size(); ++i) {
    const v1::Entry& entry = bundle.entries(i);
    const std::string field = absl::StrCat("entries[", i, "]");
    ASSIGN_OR_RETURN(const v1::KernelFamily* family,
                     family_of(entry.family(), entry.family_hash()));
    if (family != nullptr) {
      RETURN_IF_ERROR(ValidateProblem(*family, entry.problem(), field + ".problem"));
      kernels::DeviceLimits target;  // the arch the entry was compiled for
      if (!entry.arch().empty()) target.arch = entry.arch();
      if (absl::StatusOr<kernels::Variant> variant =
              kernels::ResolveConfig(*family, entry.problem(), entry.config(), target);
          !variant.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".config: ", variant.status().message()));
      }
    }
    RETURN_IF_ERROR(CheckTiming(field + ".timing", entry.timing(), /*median_required=*/true));
    for (const auto& [name, value] :
         {std::pair<const char*, double>{"margin", entry.margin()}, {"noise", entry.noise()}}) {
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".", name, " is ", value));
      }
    }
    RETURN_IF_ERROR(Bounded(field + ".device.name", entry.device().name(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".driver_version", entry.driver_version(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".arch", entry.arch(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".job_id", entry.job_id(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".tuned_at", entry.tuned_at(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".stop", entry.stop(), kMaxDetailBytes));
    RETURN_IF_ERROR(Bounded(field + ".contention", entry.contention(), kMaxDetailBytes));
    RETURN_IF_ERROR(Bounded(field + ".function_name", entry.function_name(), kMaxDetailBytes));
  }
  for (int i = 0; i < bundle.measurements_size(); ++i) {
    const v1::Measurement& measurement = bundle.measurements(i);
    const std::string field = absl::StrCat("measurements[", i, "]");
    ASSIGN_OR_RETURN(const v1::KernelFamily* family,
                     family_of(measurement.family(), measurement.family_hash()));
    if (family != nullptr) {
      RETURN_IF_ERROR(ValidateProblem(*family, measurement.problem(), field + ".problem"));
    }
    // A failed variant's max_error may be NaN (outputs never written).
    if (measurement.status() == v1::OK) {
      RETURN_IF_ERROR(
          CheckTiming(field + ".timing", measurement.timing(), /*median_required=*/false));
      if (!std::isfinite(measurement.max_error()) || !std::isfinite(measurement.noise())) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": an OK measurement's max_error and noise are finite"));
      }
    }
    RETURN_IF_ERROR(Bounded(field + ".device.name", measurement.device().name(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".job_id", measurement.job_id(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".measured_at", measurement.measured_at(), kMaxNameBytes));
    RETURN_IF_ERROR(Bounded(field + ".detail", measurement.detail(), kMaxDetailBytes));
    RETURN_IF_ERROR(Bounded(field + ".contention", measurement.contention(), kMaxDetailBytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::GarbageCollectResponse> CacheAdmin::GarbageCollect(
    const v1::GarbageCollectRequest& request) {
  ASSIGN_OR_RETURN(cache::GarbageCollectResult result, store_->GarbageCollect(request.dry_run()));
  v1::GarbageCollectResponse response;
  response.set_binaries_removed(result.binaries_removed);
  response.set_bytes_freed(result.bytes_freed);
  return response;
}

absl::StatusOr<v1::Job> CacheAdmin::GetJob(const v1::GetJobRequest& request) const {
  if (request.id().empty()) return absl::InvalidArgumentError("id is empty");
  return store_->GetJob(request.id());
}

absl::StatusOr<v1::ListJobsResponse> CacheAdmin::ListJobs(
    const v1::ListJobsRequest& request) const {
  if (request.limit() < 0 || request.limit() > kMaxListLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: ", request.limit(), " is not in 0..", kMaxListLimit));
  }
  ASSIGN_OR_RETURN(
      std::vector<v1::Job> jobs,
      store_->ListJobs(request.limit() == 0 ? kDefaultListJobsLimit : request.limit()));
  v1::ListJobsResponse response;
  for (v1::Job& job : jobs) *response.add_jobs() = std::move(job);
  return response;
}

}  // namespace autotune::service
