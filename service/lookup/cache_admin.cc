#include "service/lookup/cache_admin.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
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

// Whether a text may hold newlines and tabs (a detail, a log) or nothing
// but printable characters (a name).
enum class Lines { kOne, kMany };

// A text field of an imported item: at most `max` bytes, and no control
// character (C0, DEL, or C1 as UTF-8), which `ls` and `show` would print raw
// (an ESC sequence rewrites the admin's terminal; a newline forges a row).
absl::Status CheckText(absl::string_view field, absl::string_view text, size_t max, Lines lines) {
  if (text.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", text.size(), " bytes, more than the limit of ", max));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xC2 && i + 1 < text.size() &&
                    static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9F;
    const bool allowed = lines == Lines::kMany && (c == '\n' || c == '\t');
    if (((c < 0x20 || c == 0x7F) && !allowed) || c1) {
      const int code = c1 ? static_cast<unsigned char>(text[i + 1]) : c;
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: holds the control character U+%04X at byte %d; %s", field, code, i,
                          lines == Lines::kOne ? "a name is printable text"
                                               : "only newlines and tabs may break the text"));
    }
  }
  return absl::OkStatus();
}

// "(64, 1, 1)"
std::string Dims(const google::protobuf::RepeatedField<int64_t>& values) {
  return absl::StrCat("(", absl::StrJoin(values, ", "), ")");
}

// An imported launch against the one `family` computes for the entry's
// problem and config: INVALID_ARGUMENT naming the first field that differs.
absl::Status CheckLaunch(absl::string_view field, const v1::LaunchDims& given,
                         const v1::LaunchDims& computed, absl::string_view family) {
  const std::string why = absl::StrCat(" is not the launch family '", family,
                                       "' computes for this problem and config, ");
  if (!absl::c_equal(given.grid(), computed.grid())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".grid: ", Dims(given.grid()), why, Dims(computed.grid())));
  }
  if (!absl::c_equal(given.block(), computed.block())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".block: ", Dims(given.block()), why, Dims(computed.block())));
  }
  if (given.dynamic_shared_bytes() != computed.dynamic_shared_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dynamic_shared_bytes: ", given.dynamic_shared_bytes(), why,
                     computed.dynamic_shared_bytes()));
  }
  if (given.tensor_maps_size() != computed.tensor_maps_size()) {
    return absl::InvalidArgumentError(absl::StrCat(field,
                                                   ".tensor_maps: ", given.tensor_maps_size(),
                                                   " maps", why, computed.tensor_maps_size()));
  }
  for (int i = 0; i < given.tensor_maps_size(); ++i) {
    if (!google::protobuf::util::MessageDifferencer::Equals(given.tensor_maps(i),
                                                            computed.tensor_maps(i))) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".tensor_maps[", i, "]: {", given.tensor_maps(i).ShortDebugString(),
                       "}", why, "{", computed.tensor_maps(i).ShortDebugString(), "}"));
    }
  }
  return absl::OkStatus();
}

// The first lines of a compile log, for an error.
std::string LogHead(absl::string_view log) {
  constexpr size_t kMaxLogBytes = 2000;
  if (log.size() <= kMaxLogBytes) return std::string(log);
  return absl::StrCat(log.substr(0, kMaxLogBytes), " [...]");
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
  // The role first: nothing of a tuner's family is parsed further or compiled.
  if (!families_refused.empty()) RETURN_IF_ERROR(RefuseNewFamilies(bundle, families_refused));
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
  v1::ImportResponse replaced;
  ASSIGN_OR_RETURN(const v1::CacheBundle trusted, WithOwnCompiles(bundle, replaced));
  ASSIGN_OR_RETURN(
      v1::ImportResponse response,
      store_->Import(trusted, merge,
                     std::string_view(families_refused.data(), families_refused.size())));
  std::set<std::string> binaries;
  for (const v1::Entry& entry : trusted.entries()) {
    if (!entry.binary_sha256().empty()) binaries.insert(entry.binary_sha256());
  }
  response.set_binaries(static_cast<int64_t>(binaries.size()));
  response.set_binaries_replaced(replaced.binaries_replaced());
  *response.mutable_replaced() = std::move(*replaced.mutable_replaced());
  return response;
}

absl::Status CacheAdmin::RefuseNewFamilies(const v1::CacheBundle& bundle,
                                           absl::string_view families_refused) const {
  for (int i = 0; i < bundle.families_size(); ++i) {
    const v1::KernelFamily& family = bundle.families(i).family();
    const std::string hash = FamilyContentHash(family);
    absl::StatusOr<cache::FamilyRecord> stored = store_->GetFamilyVersion(family.name(), hash);
    if (stored.ok()) continue;
    if (!absl::IsNotFound(stored.status())) return stored.status();
    return absl::PermissionDeniedError(absl::StrCat(
        "families[", i, "]: importing family '",
        absl::CHexEscape(family.name().substr(0, kMaxNameBytes)), "' version ", hash.substr(0, 12),
        " would add that version; ", families_refused, " (nothing was imported)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CacheBundle> CacheAdmin::WithOwnCompiles(const v1::CacheBundle& bundle,
                                                            v1::ImportResponse& response) const {
  v1::CacheBundle trusted = bundle;
  // Bytes from elsewhere are never stored: an entry's binary is this
  // daemon's compile, which the compile cache stored when it ran.
  trusted.clear_binaries();
  if (bundle.entries_size() == 0) return trusted;
  std::map<std::string, std::shared_ptr<const cache::FamilyRecord>> records;  // "name/hash"
  for (const v1::FamilyRecord& record : bundle.families()) {
    auto family = std::make_shared<cache::FamilyRecord>();
    family->family = record.family();
    family->content_hash = FamilyContentHash(record.family());
    records[absl::StrCat(family->family.name(), "/", family->content_hash)] = std::move(family);
  }
  std::vector<ConfigCompile> configs;
  configs.reserve(bundle.entries_size());
  for (int i = 0; i < bundle.entries_size(); ++i) {
    const v1::Entry& entry = bundle.entries(i);
    const std::string key = absl::StrCat(entry.family(), "/", entry.family_hash());
    std::shared_ptr<const cache::FamilyRecord>& record = records[key];
    if (record == nullptr) {
      absl::StatusOr<cache::FamilyRecord> stored =
          store_->GetFamilyVersion(entry.family(), entry.family_hash());
      if (absl::IsNotFound(stored.status())) {
        return absl::InvalidArgumentError(
            absl::StrCat("entries[", i, "].family_hash: family '", entry.family(), "' version ",
                         entry.family_hash(), " is neither in the bundle nor in the store"));
      }
      if (!stored.ok()) return stored.status();
      record = std::make_shared<const cache::FamilyRecord>(*std::move(stored));
    }
    configs.push_back({record, entry.problem(), entry.config(), entry.arch()});
  }
  absl::StatusOr<CompiledConfigs> compiled =
      config_compiler_ ? config_compiler_(configs)
                       : absl::FailedPreconditionError("this daemon has no compiler");
  if (!compiled.ok()) {
    if (!absl::IsFailedPrecondition(compiled.status())) return compiled.status();
    for (int i = 0; i < bundle.entries_size(); ++i) {
      const v1::Entry& entry = bundle.entries(i);
      if (entry.binary_sha256().empty() && entry.function_name().empty()) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "entries[", i, "].", entry.binary_sha256().empty() ? "function_name" : "binary_sha256",
          ": this daemon cannot compile (", compiled.status().message(),
          "), so it cannot check what the entry would have readers load; import it into a "
          "daemon that compiles, or without binaries (nothing was imported)"));
    }
    return trusted;  // served with their recipes, compiled by whoever loads them
  }
  for (int i = 0; i < trusted.entries_size(); ++i) {
    v1::Entry& entry = *trusted.mutable_entries(i);
    const CompileEnd& end = compiled->ends[i];
    const std::string what =
        absl::StrCat("entries[", i, "] (", ProblemContext(entry.family(), entry.problem()), ")");
    if (!end.store_error.ok()) {
      return absl::Status(end.store_error.code(),
                          absl::StrCat(what, ": ", end.store_error.message()));
    }
    if (end.status == v1::COMPILE_TIMEOUT) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": this daemon's compile of the config for ", entry.arch(),
          " ran past its deadline; nothing was imported (try again: finished compiles are kept)"));
    }
    if (end.status != v1::OK) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".config: does not compile here for ", entry.arch(), " (NVRTC ",
                       compiled->nvrtc_version, "): ", LogHead(end.log)));
    }
    if (!entry.function_name().empty() && entry.function_name() != end.lowered_name) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", i, "].function_name: '", entry.function_name(),
                       "' is not the kernel this config compiles to, '", end.lowered_name, "'"));
    }
    if (!entry.binary_sha256().empty() && entry.binary_sha256() != end.binary_sha256) {
      response.set_binaries_replaced(response.binaries_replaced() + 1);
      response.add_replaced(
          absl::StrCat(what, ": the imported binary ", entry.binary_sha256().substr(0, 12),
                       " is not what this daemon compiles (NVRTC ", compiled->nvrtc_version, ", ",
                       entry.arch(), "); kept its own, ", end.binary_sha256.substr(0, 12)));
    }
    entry.set_binary_sha256(end.binary_sha256);
    entry.set_function_name(end.lowered_name);
    entry.set_nvrtc_version(compiled->nvrtc_version);
  }
  return trusted;
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
      if (entry.arch().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field,
                         ".arch is empty; name the architecture the entry was tuned on "
                         "(sm_90)"));
      }
      kernels::DeviceLimits target;  // the arch the entry was compiled for, its device's SMs
      target.arch = entry.arch();
      target.sm_count = entry.device().sm_count();
      absl::StatusOr<kernels::Variant> variant =
          kernels::ResolveConfig(*family, entry.problem(), entry.config(), target);
      if (!variant.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".config: ", variant.status().message()));
      }
      RETURN_IF_ERROR(
          CheckLaunch(field + ".launch", entry.launch(), variant->launch, entry.family()));
    }
    RETURN_IF_ERROR(CheckTiming(field + ".timing", entry.timing(), /*median_required=*/true));
    for (const auto& [name, value] :
         {std::pair<const char*, double>{"margin", entry.margin()}, {"noise", entry.noise()}}) {
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".", name, " is ", value));
      }
    }
    RETURN_IF_ERROR(
        CheckText(field + ".device.name", entry.device().name(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(
        CheckText(field + ".driver_version", entry.driver_version(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(CheckText(field + ".arch", entry.arch(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(CheckText(field + ".job_id", entry.job_id(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(CheckText(field + ".tuned_at", entry.tuned_at(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(CheckText(field + ".stop", entry.stop(), kMaxDetailBytes, Lines::kMany));
    RETURN_IF_ERROR(
        CheckText(field + ".contention", entry.contention(), kMaxDetailBytes, Lines::kMany));
    RETURN_IF_ERROR(
        CheckText(field + ".function_name", entry.function_name(), kMaxDetailBytes, Lines::kOne));
  }
  // A binary no entry names would be stored and served to anyone who asks
  // for its digest: a free file host. And an entry names a binary the bundle
  // carries or the store holds: a bundle that is not whole is refused, even
  // though the entry is served with this daemon's own compile.
  std::set<std::string> named, carried;
  for (const v1::Entry& entry : bundle.entries()) named.insert(entry.binary_sha256());
  for (const v1::Binary& binary : bundle.binaries()) carried.insert(binary.sha256());
  for (int i = 0; i < bundle.entries_size(); ++i) {
    const std::string& sha = bundle.entries(i).binary_sha256();
    if (sha.empty() || carried.contains(sha)) continue;
    absl::StatusOr<v1::Binary> stored = store_->GetBinary(sha);
    if (absl::IsNotFound(stored.status())) {
      return absl::InvalidArgumentError(absl::StrCat("entries[", i, "].binary_sha256: binary ",
                                                     absl::CHexEscape(sha.substr(0, 64)),
                                                     " is neither in the bundle nor in the store"));
    }
    // A damaged stored copy is no reason to refuse: the entry is served
    // with this daemon's compile, not with those bytes.
    if (!stored.ok() && !absl::IsDataLoss(stored.status())) return stored.status();
    carried.insert(sha);
  }
  for (int i = 0; i < bundle.binaries_size(); ++i) {
    if (!named.contains(bundle.binaries(i).sha256())) {
      return absl::InvalidArgumentError(
          absl::StrCat("binaries[", i, "]: no entry of the bundle names binary ",
                       absl::CHexEscape(bundle.binaries(i).sha256().substr(0, 64)),
                       "; a bundle carries only the "
                       "binaries of its entries"));
    }
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
    RETURN_IF_ERROR(
        CheckText(field + ".device.name", measurement.device().name(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(CheckText(field + ".job_id", measurement.job_id(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(
        CheckText(field + ".measured_at", measurement.measured_at(), kMaxNameBytes, Lines::kOne));
    RETURN_IF_ERROR(
        CheckText(field + ".detail", measurement.detail(), kMaxDetailBytes, Lines::kMany));
    RETURN_IF_ERROR(
        CheckText(field + ".contention", measurement.contention(), kMaxDetailBytes, Lines::kMany));
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
