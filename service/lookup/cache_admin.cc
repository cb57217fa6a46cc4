#include "service/lookup/cache_admin.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/family_loader.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/lookup/lookup_resolver.h"

namespace autotune::service {

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

absl::Status CacheAdmin::ValidateFilter(const v1::EntryFilter& filter,
                                        absl::string_view field) const {
  if (!filter.family().empty()) {
    RETURN_IF_ERROR(store_->GetFamily(filter.family()).status());
    if (!filter.family_hash().empty()) {
      RETURN_IF_ERROR(store_->GetFamilyVersion(filter.family(), filter.family_hash()).status());
    }
  }
  if (!filter.nvrtc_older_than().empty()) {
    absl::StatusOr<int64_t> version = NvrtcVersionNumber(filter.nvrtc_older_than());
    if (!version.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".nvrtc_older_than: ", version.status().message()));
    }
  }
  const v1::Problem& problem = filter.problem();
  const bool has_dims = problem.dims_size() > 0;
  const bool has_dtype = problem.dtype() != v1::DTYPE_UNSPECIFIED;
  if (has_dims != has_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".problem: give both dims and dtype, or neither"));
  }
  if (has_dims) {
    if (filter.family().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".problem needs ", field, ".family (dims belong to a family)"));
    }
    ASSIGN_OR_RETURN(cache::FamilyRecord family, store_->GetFamily(filter.family()));
    RETURN_IF_ERROR(ValidateProblem(family.family, problem, absl::StrCat(field, ".problem")));
  }
  return absl::OkStatus();
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
        existing->content_hash.substr(0, 12), "...); set replace to make this version current"));
  }
  if (!existing.ok() && !absl::IsNotFound(existing.status())) return existing.status();
  bool changed = false;
  ASSIGN_OR_RETURN(cache::FamilyRecord record,
                   store_->PutFamily(request.family(), /*builtin=*/false, &changed));
  ASSIGN_OR_RETURN(std::vector<v1::KernelSummary> kernels, store_->ListFamilies());
  v1::RegisterKernelResponse response;
  for (v1::KernelSummary& kernel : kernels) {
    if (kernel.name() == record.family.name()) *response.mutable_kernel() = std::move(kernel);
  }
  response.set_changed(changed);
  return response;
}

absl::StatusOr<v1::ListEntriesResponse> CacheAdmin::ListEntries(
    const v1::ListEntriesRequest& request) const {
  RETURN_IF_ERROR(ValidateFilter(request.filter(), "filter"));
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
                   store_->ListEntries(request.filter(), limit, request.offset(), &total));
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
  RETURN_IF_ERROR(ValidateFilter(request.filter(), "filter"));
  const v1::EntryFilter& filter = request.filter();
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
  RETURN_IF_ERROR(ValidateFilter(request.filter(), "filter"));
  return store_->Export(request.filter(), request.include_measurements());
}

absl::StatusOr<v1::BackupResponse> CacheAdmin::Backup(const v1::BackupRequest& request) {
  return store_->Backup(request.path());
}

absl::StatusOr<v1::ImportResponse> CacheAdmin::Import(const v1::CacheBundle& bundle,
                                                      cache::Store::Merge merge) {
  return store_->Import(bundle, merge);
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
