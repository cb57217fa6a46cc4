#include "service/lookup/lookup_resolver.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "kernels/family_check.h"
#include "kernels/search_space.h"
#include "proto/problem.h"
#include "service/lookup/predictions.h"

namespace autotune::service {
namespace {

std::shared_ptr<const FamilyView> MakeView(cache::FamilyRecord record) {
  auto view = std::make_shared<FamilyView>();
  view->content_hash = std::move(record.content_hash);
  view->family = std::move(record.family);
  view->source = std::move(*view->family.mutable_source());
  view->family.clear_source();
  view->source_sha256 = Sha256Hex(view->source);
  for (int d = 0; d < view->family.dtypes_size(); ++d) {
    const v1::DType dtype = view->family.dtypes(d);
    view->parameter_bytes[dtype] = kernels::TunedKernelParameterBytes(view->family, dtype);
  }
  for (const v1::ProblemDimension& dim : view->family.dims()) {
    if (dim.bucketed()) view->bucketed.push_back(dim.name());
  }
  return view;
}

// Why an entry tuned on `entry` may not stand in for `wanted`; nullopt when it may.
std::optional<std::string> DeviceMismatch(const v1::Device& wanted, const v1::Device& entry) {
  if (wanted.compute_capability() != 0 && entry.compute_capability() != 0 &&
      wanted.compute_capability() != entry.compute_capability()) {
    return absl::StrCat("entry was tuned on compute capability ", entry.compute_capability(),
                        ", request is for ", wanted.compute_capability());
  }
  if (wanted.sm_count() != 0 && entry.sm_count() != 0 && wanted.sm_count() != entry.sm_count()) {
    return absl::StrCat("entry was tuned on ", entry.sm_count(), " SMs, request is for ",
                        wanted.sm_count());
  }
  return std::nullopt;
}

std::string Describe(const v1::LookupRequest& request, absl::string_view device) {
  return absl::StrCat(ProblemContext(request.family(), request.problem()), " on ",
                      device.empty() ? "any device" : device);
}

}  // namespace

std::optional<std::string> DriverTooOld(absl::string_view client_driver,
                                        absl::string_view nvrtc_version) {
  // Versions as NvrtcVersionNumber reads them, the store's order too.
  const absl::StatusOr<int64_t> driver = NvrtcVersionNumber(client_driver);
  const absl::StatusOr<int64_t> built = NvrtcVersionNumber(nvrtc_version);
  if (!driver.ok() || !built.ok() || *built <= *driver) return std::nullopt;
  return absl::StrCat("its binary was built by NVRTC ", nvrtc_version, ", newer than the CUDA ",
                      client_driver, " the client's driver supports");
}

namespace {

v1::LookupResponse Miss(v1::MissKind kind, std::string reason) {
  v1::LookupResponse response;
  response.set_match(v1::MISS);
  response.set_miss_kind(kind);
  response.set_miss_reason(std::move(reason));
  return response;
}

}  // namespace

namespace {

const v1::Entry& EntryOf(const v1::Entry& entry) { return entry; }
const v1::Entry& EntryOf(const v1::Entry* entry) { return *entry; }

// ChooseNearest over entries or pointers to them.
template <typename Entries>
std::optional<NearestChoice> Nearest(const v1::Problem& requested,
                                     const std::vector<std::string>& bucketed,
                                     const Entries& candidates) {
  std::optional<NearestChoice> best;
  bool best_rounds_up = false;
  std::string best_key;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const v1::Problem& tuned = EntryOf(candidates[i]).problem();
    if (tuned.dtype() != requested.dtype() || tuned.dims_size() != requested.dims_size()) {
      continue;
    }
    NearestChoice choice;
    choice.index = i;
    bool agrees = true;
    bool rounds_up = true;
    for (const auto& [name, want] : requested.dims()) {
      auto it = tuned.dims().find(name);
      if (it == tuned.dims().end()) {
        agrees = false;
        break;
      }
      const int64_t have = it->second;
      if (have == want) continue;
      if (std::find(bucketed.begin(), bucketed.end(), name) == bucketed.end() || have <= 0 ||
          want <= 0) {
        agrees = false;
        break;
      }
      v1::DimDistance distance;
      distance.set_name(name);
      distance.set_requested(want);
      distance.set_tuned(have);
      choice.distance.push_back(distance);
      choice.log2_distance +=
          std::fabs(std::log2(static_cast<double>(have) / static_cast<double>(want)));
      if (have < want) rounds_up = false;
    }
    if (!agrees) continue;
    std::string key = FormatDims(tuned.dims());
    bool better = !best.has_value();
    if (!better) {
      constexpr double kEpsilon = 1e-12;
      if (choice.log2_distance < best->log2_distance - kEpsilon) {
        better = true;
      } else if (std::fabs(choice.log2_distance - best->log2_distance) <= kEpsilon) {
        if (rounds_up != best_rounds_up) {
          better = rounds_up;
        } else {
          better = key < best_key;
        }
      }
    }
    if (better) {
      std::sort(
          choice.distance.begin(), choice.distance.end(),
          [](const v1::DimDistance& a, const v1::DimDistance& b) { return a.name() < b.name(); });
      best = std::move(choice);
      best_rounds_up = rounds_up;
      best_key = std::move(key);
    }
  }
  return best;
}

}  // namespace

std::optional<NearestChoice> ChooseNearest(const v1::Problem& requested,
                                           const std::vector<std::string>& bucketed,
                                           const std::vector<v1::Entry>& candidates) {
  return Nearest(requested, bucketed, candidates);
}

int64_t LookupResolver::StoreGeneration(Caches caches) const {
  return caches == Caches::kFamilies ? store_->family_generation() : store_->entry_generation();
}

bool LookupResolver::CachedAt(Caches caches, int64_t generation) const {
  return (caches == Caches::kFamilies ? cached_generation_ : cached_entry_generation_) ==
         generation;
}

bool LookupResolver::KeepAt(Caches caches, int64_t generation, bool full) const {
  if (generation % 2 != 0) return false;  // a commit was in flight: may be either side
  if (!full && CachedAt(caches, generation)) return true;
  if (StoreGeneration(caches) != generation) return false;  // moved meanwhile
  if (caches == Caches::kFamilies) {
    current_.clear();  // versions_ stay: a version never changes once stored
    cached_generation_ = generation;
  } else {
    entries_.clear();
    candidates_.clear();
    candidate_entries_ = 0;
    counts_.clear();
    cached_entry_generation_ = generation;
  }
  return true;
}

absl::StatusOr<kernels::Variant> ConfigResolverPool::Resolve(
    const v1::Problem& problem, const v1::Config& config,
    const kernels::DeviceLimits& limits) const {
  const std::string key = absl::StrCat(limits.arch, "/", limits.max_threads_per_block, "/",
                                       limits.max_dynamic_shared_bytes, "/", limits.sm_count);
  std::optional<kernels::FamilyConfigResolver> resolver;
  {
    absl::MutexLock lock(&mu_);
    auto found = idle_.find(key);
    if (found != idle_.end() && !found->second.empty()) {
      resolver.emplace(std::move(found->second.back()));
      found->second.pop_back();
    }
  }
  if (!resolver.has_value()) {
    ASSIGN_OR_RETURN(kernels::FamilyConfigResolver created,
                     kernels::FamilyConfigResolver::Create(*family_, limits));
    resolver.emplace(std::move(created));
  }
  absl::StatusOr<kernels::Variant> resolved = resolver->Resolve(problem, config);
  absl::MutexLock lock(&mu_);
  idle_[key].push_back(*std::move(resolver));
  return resolved;
}

absl::StatusOr<std::shared_ptr<const FamilyView>> LookupResolver::Family(
    const std::string& name, const std::string& hash) const {
  const int64_t generation = StoreGeneration(Caches::kFamilies);
  {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (CachedAt(Caches::kFamilies, generation)) {
      std::string key;
      if (!hash.empty()) {
        key = absl::StrCat(name, "/", hash);
      } else if (auto current = current_.find(name); current != current_.end()) {
        key = absl::StrCat(name, "/", current->second);
      }
      if (auto found = versions_.find(key); !key.empty() && found != versions_.end()) {
        return found->second;
      }
    }
  }
  cache::FamilyRecord record;
  if (hash.empty()) {
    ASSIGN_OR_RETURN(record, store_->GetFamily(name));
  } else {
    ASSIGN_OR_RETURN(record, store_->GetFamilyVersion(name, hash));
  }
  std::shared_ptr<const FamilyView> view = MakeView(std::move(record));
  absl::MutexLock lock(&cache_mu_);
  if (!KeepAt(Caches::kFamilies, generation)) return view;
  if (hash.empty()) current_[name] = view->content_hash;
  versions_[absl::StrCat(name, "/", view->content_hash)] = view;
  return view;
}

absl::StatusOr<std::optional<v1::Entry>> LookupResolver::FindExact(
    const cache::EntryKey& key) const {
  const int64_t generation = StoreGeneration(Caches::kEntries);
  const std::string cache_key =
      absl::StrCat(key.family, "/", key.family_hash, "/", FormatDims(key.problem.dims()), "/",
                   key.problem.dtype(), "/", key.device);
  {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (CachedAt(Caches::kEntries, generation)) {
      if (auto found = entries_.find(cache_key); found != entries_.end()) {
        if (found->second == nullptr) return std::nullopt;  // known absent
        return *found->second;
      }
    }
  }
  ASSIGN_OR_RETURN(std::optional<v1::Entry> entry, store_->FindEntry(key));
  absl::MutexLock lock(&cache_mu_);
  if (!KeepAt(Caches::kEntries, generation, entries_.size() >= kMaxCachedEntries)) return entry;
  entries_[cache_key] = entry.has_value() ? std::make_shared<const v1::Entry>(*entry) : nullptr;
  return entry;
}

absl::StatusOr<std::shared_ptr<const std::vector<v1::Entry>>> LookupResolver::Candidates(
    const std::string& family, const std::string& family_hash, v1::DType dtype,
    const std::string& device) const {
  const int64_t generation = StoreGeneration(Caches::kEntries);
  const std::string key = absl::StrCat(family, "/", family_hash, "/", dtype, "/", device);
  {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (CachedAt(Caches::kEntries, generation)) {
      if (auto found = candidates_.find(key); found != candidates_.end()) return found->second;
    }
  }
  ASSIGN_OR_RETURN(std::vector<v1::Entry> listed,
                   store_->ListCandidates(family, family_hash, dtype, device));
  auto candidates = std::make_shared<const std::vector<v1::Entry>>(std::move(listed));
  if (candidates->size() > kMaxCachedEntries) return candidates;
  absl::MutexLock lock(&cache_mu_);
  if (!KeepAt(Caches::kEntries, generation,
              candidate_entries_ + candidates->size() > kMaxCachedEntries)) {
    return candidates;
  }
  candidate_entries_ += candidates->size();
  candidates_[key] = candidates;
  return candidates;
}

absl::StatusOr<std::pair<int64_t, int64_t>> LookupResolver::EntryCounts(
    const std::string& family, const std::string& family_hash) const {
  const int64_t generation = StoreGeneration(Caches::kEntries);
  const std::string key = absl::StrCat(family, "/", family_hash);
  {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (CachedAt(Caches::kEntries, generation)) {
      if (auto found = counts_.find(key); found != counts_.end()) return found->second;
    }
  }
  v1::EntryFilter filter;
  filter.set_family(family);
  std::pair<int64_t, int64_t> counts;
  RETURN_IF_ERROR(store_->ListEntries(filter, 0, 0, &counts.first).status());
  filter.set_family_hash(family_hash);
  RETURN_IF_ERROR(store_->ListEntries(filter, 0, 0, &counts.second).status());
  absl::MutexLock lock(&cache_mu_);
  if (!KeepAt(Caches::kEntries, generation)) return counts;
  counts_[key] = counts;
  return counts;
}

absl::StatusOr<v1::GetBinariesResponse> LookupResolver::GetBinaries(
    const v1::GetBinariesRequest& request) const {
  if (request.sha256_size() > kMaxBatchLookups) {
    return absl::InvalidArgumentError(
        absl::StrCat("sha256: ", request.sha256_size(), " digests, at most ", kMaxBatchLookups));
  }
  std::set<std::string> wanted;
  for (int i = 0; i < request.sha256_size(); ++i) {
    const std::string& sha = request.sha256(i);
    const bool hex = sha.size() == 64 && std::all_of(sha.begin(), sha.end(), [](char c) {
                       return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
                     });
    if (!hex) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sha256[", i, "]: '", absl::CHexEscape(sha.substr(0, 80)), sha.size() > 80 ? "..." : "",
          "' is not a sha256 (64 lowercase hex digits)"));
    }
    wanted.insert(sha);
  }
  // All read (and checked) before any is copied into the answer.
  std::vector<std::pair<const std::string*, std::shared_ptr<const std::string>>> found;
  v1::GetBinariesResponse response;
  for (const std::string& sha : wanted) {
    absl::StatusOr<std::shared_ptr<const std::string>> cubin = cubins_.Get(sha);
    if (absl::IsNotFound(cubin.status())) {
      response.add_missing(sha);
      continue;
    }
    if (!cubin.ok()) return cubin.status();
    found.emplace_back(&sha, *std::move(cubin));
  }
  for (const auto& [sha, cubin] : found) (*response.mutable_binaries())[*sha] = *cubin;
  return response;
}

namespace {

// LookupResponse.arguments of a config resolved for a problem.
v1::LaunchArguments ArgumentsOf(const v1::KernelFamily& family, const kernels::Variant& variant) {
  v1::LaunchArguments arguments;
  for (size_t i = 0; i < variant.buffers.size(); ++i) {
    const kernels::BufferExtent& extent = variant.buffers[i];
    v1::BufferShape* buffer = arguments.add_buffers();
    buffer->set_name(extent.name);
    buffer->set_dtype(extent.dtype);
    buffer->mutable_shape()->Assign(extent.shape.begin(), extent.shape.end());
    if (static_cast<int>(i) < family.buffers_size()) buffer->set_role(family.buffers(i).role());
  }
  for (const kernels::ScalarValue& value : variant.scalars) {
    v1::ScalarValue* scalar = arguments.add_scalars();
    scalar->set_name(value.name);
    scalar->set_dtype(value.dtype);
    scalar->set_value(value.value);
  }
  return arguments;
}

// What an entry's config is resolved for: the arch it was compiled for and
// the multiprocessors of the device it was tuned on (a persistent grid).
kernels::DeviceLimits TargetOf(const v1::Entry& entry) {
  kernels::DeviceLimits target;
  if (!entry.arch().empty()) target.arch = entry.arch();
  target.sm_count = entry.device().sm_count();
  return target;
}

}  // namespace

absl::StatusOr<v1::LookupResponse> LookupResolver::Resolve(const v1::LookupRequest& request,
                                                           absl::string_view field,
                                                           bool include_recipe) const {
  std::shared_ptr<const FamilyView> family;
  ASSIGN_OR_RETURN(v1::LookupResponse response, ResolveEntry(request, field, &family));
  // The config the answer names, resolved for the requested problem (a
  // NEAREST entry's or the default config's, below).
  std::optional<kernels::Variant> named;
  if (response.match() == v1::EXACT) {
    *response.mutable_launch() = response.entry().launch();
  } else if (response.match() == v1::NEAREST) {
    // Checked for the arch the entry was compiled for.
    const kernels::DeviceLimits target = TargetOf(response.entry());
    absl::StatusOr<kernels::Variant> fitted =
        family->resolvers.Resolve(request.problem(), response.entry().config(), target);
    if (fitted.ok()) {
      *response.mutable_launch() = fitted->launch;
      named = *std::move(fitted);
    } else {
      v1::LookupResponse miss =
          Miss(v1::MISS_NEAREST_UNFIT,
               absl::StrCat("the nearest entry for ",
                            Describe(request, response.entry().device().name()), " (tuned at ",
                            FormatDims(response.entry().problem().dims()),
                            ") does not fit the requested problem: ", fitted.status().message()));
      *miss.mutable_entry() = std::move(*response.mutable_entry());
      response = std::move(miss);
    }
  }
  if (response.match() != v1::MISS && !request.driver_version().empty()) {
    if (std::optional<std::string> why =
            DriverTooOld(request.driver_version(), response.entry().nvrtc_version())) {
      v1::LookupResponse miss =
          Miss(v1::MISS_DRIVER_TOO_OLD,
               absl::StrCat("the entry for ", Describe(request, response.entry().device().name()),
                            " cannot be served: ", *why,
                            "; its config applies: compile it for this driver"));
      *miss.mutable_entry() = std::move(*response.mutable_entry());
      *miss.mutable_launch() = std::move(*response.mutable_launch());
      response = std::move(miss);
    }
  }
  if (response.match() == v1::MISS) {
    if (family->family.has_default_config()) {
      kernels::DeviceLimits target;
      target.sm_count = request.device().sm_count();
      absl::StatusOr<kernels::Variant> untuned =
          family->resolvers.Resolve(request.problem(), family->family.default_config(), target);
      if (untuned.ok()) {
        *response.mutable_default_config() = untuned->config;
        *response.mutable_default_launch() = untuned->launch;
        if (response.miss_kind() != v1::MISS_DRIVER_TOO_OLD) named = *std::move(untuned);
      }
    }
  }
  if (response.match() == v1::MISS && predictions_ != nullptr && !request.exact_only() &&
      !request.device().name().empty() &&
      (response.miss_kind() == v1::MISS_NO_ENTRY || response.miss_kind() == v1::MISS_OTHER_DEVICE ||
       response.miss_kind() == v1::MISS_OLDER_VERSION ||
       response.miss_kind() == v1::MISS_NEAREST_UNFIT)) {
    // The generation first: a model is learned for the entries it names.
    const int64_t generation = store_->entry_generation();
    ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<v1::Entry>> entries,
                     Candidates(request.family(), family->content_hash, request.problem().dtype(),
                                request.device().name()));
    const std::string& device = request.device().name();
    PredictionAnswer prediction = predictions_->Predict(
        family, request.problem(), device, request.device().sm_count(), entries, generation);
    // Devices of one arch help each other: with too few problems tuned on
    // this device, the device of the request's compute capability with the
    // most of them predicts (never EXACT here; the answer names it).
    std::string source = device;
    const int64_t tuned_here = absl::c_count_if(*entries, [&](const v1::Entry& entry) {
      return entry.device().name() == device &&
             entry.problem().dtype() == request.problem().dtype();
    });
    const int32_t capability = request.device().compute_capability();
    if (!prediction.predicted.has_value() && tuned_here < predictions_->min_problems() &&
        capability != 0) {
      ASSIGN_OR_RETURN(
          std::shared_ptr<const std::vector<v1::Entry>> everywhere,
          Candidates(request.family(), family->content_hash, request.problem().dtype(), ""));
      std::map<std::string, int64_t> tuned;  // device -> problems, of this capability
      for (const v1::Entry& entry : *everywhere) {
        if (entry.device().name() != device && entry.device().compute_capability() == capability &&
            entry.problem().dtype() == request.problem().dtype()) {
          ++tuned[entry.device().name()];
        }
      }
      const auto most =
          std::max_element(tuned.begin(), tuned.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
      if (most != tuned.end()) {
        source = most->first;
        PredictionAnswer elsewhere = predictions_->Predict(
            family, request.problem(), source, request.device().sm_count(), everywhere, generation);
        if (elsewhere.predicted.has_value()) {
          prediction = std::move(elsewhere);
        } else {
          absl::StrAppend(&prediction.why_not, "; from ", source, ": ", elsewhere.why_not);
        }
      }
    }
    std::optional<std::string> too_old;
    if (prediction.predicted.has_value() && !request.driver_version().empty()) {
      too_old = DriverTooOld(request.driver_version(), prediction.predicted->entry.nvrtc_version());
    }
    if (!prediction.predicted.has_value()) {
      absl::StrAppend(response.mutable_miss_reason(), "; no prediction: ", prediction.why_not);
    } else if (too_old.has_value()) {
      absl::StrAppend(response.mutable_miss_reason(),
                      "; the predicted config's binary cannot be "
                      "served: ",
                      *too_old);
    } else if (source == device &&
               DeviceMismatch(request.device(), prediction.predicted->entry.device()).has_value()) {
      absl::StrAppend(response.mutable_miss_reason(),
                      "; no prediction: the device's other properties differ from the request's");
    } else {
      Predicted& predicted = *prediction.predicted;
      response.set_match(v1::PREDICTED);
      response.clear_miss_kind();
      response.clear_miss_reason();
      response.clear_distance();
      response.clear_log2_distance();
      *response.mutable_entry() = std::move(predicted.entry);
      *response.mutable_launch() = predicted.variant.launch;
      v1::Prediction* about = response.mutable_prediction();
      about->set_predicted_us(predicted.predicted_us);
      about->set_problems(predicted.problems);
      about->set_measurements(predicted.measurements);
      about->set_ranked(predicted.ranked);
      about->set_device(source);
      named = std::move(predicted.variant);
    }
  }
  const bool launchable = response.match() != v1::MISS ||
                          response.miss_kind() == v1::MISS_DRIVER_TOO_OLD ||
                          response.has_default_config();
  if (launchable) {
    if (auto found = family->parameter_bytes.find(request.problem().dtype());
        found != family->parameter_bytes.end()) {
      response.mutable_parameter_bytes()->Assign(found->second.begin(), found->second.end());
    }
    if (!named.has_value()) {
      // An EXACT entry (or one too new for the driver): its config was tuned
      // at these dims, for the arch it was compiled for.
      const kernels::DeviceLimits target = TargetOf(response.entry());
      absl::StatusOr<kernels::Variant> resolved =
          family->resolvers.Resolve(request.problem(), response.entry().config(), target);
      if (resolved.ok()) named = *std::move(resolved);
    }
    if (named.has_value()) *response.mutable_arguments() = ArgumentsOf(family->family, *named);
  }
  if (include_recipe) {
    // The config the answer names: the entry's while it applies, else the
    // default config.
    const v1::Config* config = nullptr;
    if (response.match() != v1::MISS || response.miss_kind() == v1::MISS_DRIVER_TOO_OLD) {
      config = &response.entry().config();
    } else if (response.has_default_config()) {
      config = &response.default_config();
    }
    if (config != nullptr) {
      absl::StatusOr<kernels::CompileInputs> inputs =
          kernels::CompileInputsFor(family->family, *config, request.problem().dtype());
      if (!inputs.ok()) {
        return absl::Status(inputs.status().code(),
                            absl::StrCat(field, ": no recipe for the answer's config: ",
                                         inputs.status().message()));
      }
      v1::CompileRecipe* recipe = response.mutable_recipe();
      recipe->set_source_sha256(family->source_sha256);
      recipe->set_source(family->source);
      recipe->set_program_name(kernels::ProgramName(family->family));
      recipe->set_name_expression(std::move(inputs->name_expression));
      for (std::string& option : inputs->options) recipe->add_options(std::move(option));
      *recipe->mutable_headers() = family->family.headers();
      *recipe->mutable_config() = *config;
    }
  }
  return response;
}

absl::StatusOr<v1::LookupResponse> LookupResolver::ResolveEntry(
    const v1::LookupRequest& request, absl::string_view field,
    std::shared_ptr<const FamilyView>* family_out) const {
  if (request.family().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".family is empty"));
  }
  ASSIGN_OR_RETURN(*family_out, Family(request.family(), request.family_hash()));
  const std::shared_ptr<const FamilyView>& family = *family_out;
  RETURN_IF_ERROR(
      ValidateProblem(family->family, request.problem(), absl::StrCat(field, ".problem")));

  const std::string& device = request.device().name();
  const v1::Problem& problem = request.problem();
  std::shared_ptr<const std::vector<v1::Entry>> candidates;

  // EXACT.
  std::optional<v1::Entry> exact;
  if (!device.empty()) {
    ASSIGN_OR_RETURN(
        exact, FindExact(cache::EntryKey{request.family(), family->content_hash, problem, device}));
  } else {
    ASSIGN_OR_RETURN(candidates,
                     Candidates(request.family(), family->content_hash, problem.dtype(), ""));
    const std::string wanted = FormatDims(problem.dims());
    std::set<std::string> devices;
    for (const v1::Entry& entry : *candidates) {
      if (FormatDims(entry.problem().dims()) == wanted) {
        devices.insert(entry.device().name());
        exact = entry;
      }
    }
    if (devices.size() > 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ".device.name is empty and entries exist for ", devices.size(),
                       " devices (", absl::StrJoin(devices, ", "), "); name one"));
    }
  }
  if (exact.has_value()) {
    if (std::optional<std::string> mismatch = DeviceMismatch(request.device(), exact->device())) {
      return Miss(v1::MISS_OTHER_DEVICE,
                  absl::StrCat("no entry for ", Describe(request, device), ": ", *mismatch));
    }
    v1::LookupResponse response;
    response.set_match(v1::EXACT);
    *response.mutable_entry() = *std::move(exact);
    return response;
  }

  // NEAREST. An exact-only request still looks, to say why it missed.
  const std::vector<std::string>& bucketed = family->bucketed;
  std::optional<NearestChoice> choice;
  std::vector<const v1::Entry*> usable;     // into candidates
  std::optional<std::string> other_device;  // why the nearest on another device cannot serve
  if (!bucketed.empty()) {
    if (candidates == nullptr) {
      ASSIGN_OR_RETURN(candidates,
                       Candidates(request.family(), family->content_hash, problem.dtype(), device));
    }
    std::vector<const v1::Entry*> mismatched;
    for (const v1::Entry& entry : *candidates) {
      if (DeviceMismatch(request.device(), entry.device()).has_value()) {
        mismatched.push_back(&entry);
      } else {
        usable.push_back(&entry);
      }
    }
    choice = Nearest(problem, bucketed, usable);
    if (!choice.has_value()) {
      if (std::optional<NearestChoice> elsewhere = Nearest(problem, bucketed, mismatched)) {
        other_device = DeviceMismatch(request.device(), mismatched[elsewhere->index]->device());
      }
    }
  }
  if (choice.has_value() && !request.exact_only()) {
    if (device.empty()) {
      // "Any device" must still be unambiguous among the equally near ones.
      std::set<std::string> devices;
      const std::string key = FormatDims(usable[choice->index]->problem().dims());
      for (const v1::Entry* entry : usable) {
        if (FormatDims(entry->problem().dims()) == key) devices.insert(entry->device().name());
      }
      if (devices.size() > 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            field, ".device.name is empty and the nearest entries exist for ", devices.size(),
            " devices (", absl::StrJoin(devices, ", "), "); name one"));
      }
    }
    v1::LookupResponse response;
    response.set_match(v1::NEAREST);
    *response.mutable_entry() = *usable[choice->index];
    for (v1::DimDistance& distance : choice->distance) {
      *response.add_distance() = std::move(distance);
    }
    response.set_log2_distance(choice->log2_distance);
    return response;
  }

  v1::MissKind kind = v1::MISS_NO_ENTRY;
  std::string reason = absl::StrCat("no entry for ", Describe(request, device));
  if (choice.has_value()) {
    kind = v1::MISS_EXACT_ONLY;
    absl::StrAppend(&reason, " (exact match requested; the nearest tuned problem is ",
                    FormatDims(usable[choice->index]->problem().dims()), ")");
  } else if (other_device.has_value()) {
    kind = v1::MISS_OTHER_DEVICE;
    absl::StrAppend(&reason, " (the nearest entry cannot serve: ", *other_device, ")");
  } else if (request.exact_only()) {
    absl::StrAppend(&reason, " (exact match requested)");
  } else if (bucketed.empty()) {
    absl::StrAppend(&reason, " (family has no bucketed dimensions, so no nearest match)");
  } else {
    absl::StrAppend(&reason, " (and none that differs only in ", absl::StrJoin(bucketed, ", "),
                    ")");
  }
  // A named device with nothing tuned on it: was this problem tuned on
  // another? Best effort, as the counts below.
  if (kind == v1::MISS_NO_ENTRY && !device.empty()) {
    absl::StatusOr<std::shared_ptr<const std::vector<v1::Entry>>> anywhere =
        Candidates(request.family(), family->content_hash, problem.dtype(), "");
    if (anywhere.ok()) {
      const std::string wanted = FormatDims(problem.dims());
      std::set<std::string> devices;
      for (const v1::Entry& entry : **anywhere) {
        if (FormatDims(entry.problem().dims()) == wanted) devices.insert(entry.device().name());
      }
      if (!devices.empty()) {
        kind = v1::MISS_OTHER_DEVICE;
        absl::StrAppend(&reason, "; tuned only on ", absl::StrJoin(devices, ", "));
      }
    }
  }
  // Counts that say more; best effort: a MISS stays a MISS when they fail.
  absl::StatusOr<std::pair<int64_t, int64_t>> counts =
      EntryCounts(request.family(), family->content_hash);
  const bool counted = counts.ok();
  const int64_t all_versions = counted ? counts->first : 0;
  const int64_t this_version = counted ? counts->second : 0;
  if (counted && all_versions > this_version) {
    if (kind == v1::MISS_NO_ENTRY && this_version == 0) kind = v1::MISS_OLDER_VERSION;
    absl::StrAppend(&reason, "; ", all_versions - this_version,
                    " entries exist for other versions of the family's source (tuned before it "
                    "changed; look them up by family_hash, or tune again)");
  } else if (counted && this_version > 0) {
    absl::StrAppend(&reason, "; ", this_version,
                    " entries exist for this family for other problems, dtypes or devices");
  }
  return Miss(kind, std::move(reason));
}

namespace {

// This thread's CPU time so far.
absl::Duration ThreadCpuTime() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return absl::DurationFromTimespec(now);
}

// Optimistic tries before the commits are held off.
constexpr int kOptimisticTries = 4;

struct Generations {
  int64_t families = 0;
  int64_t entries = 0;
  static Generations Of(const cache::Store& store) {
    return {store.family_generation(), store.entry_generation()};
  }
  bool settled() const { return families % 2 == 0 && entries % 2 == 0; }
  bool operator==(const Generations&) const = default;
};

// `answer()` as of one committed state of `store` (see the header).
template <typename Answer>
absl::StatusOr<Answer> Consistently(const cache::Store& store,
                                    absl::FunctionRef<absl::StatusOr<Answer>()> answer) {
  for (int attempt = 0; attempt < kOptimisticTries; ++attempt) {
    const Generations before = Generations::Of(store);
    if (before.settled()) {
      absl::StatusOr<Answer> result = answer();
      if (Generations::Of(store) == before) return result;
    } else {
      absl::SleepFor(absl::Microseconds(20));  // a commit is landing
    }
  }
  cache::Store::CommitHold hold(store);
  return answer();
}

}  // namespace

void LookupResolver::Count(const v1::LookupResponse& response) const {
  std::atomic<int64_t>& counter = response.match() == v1::EXACT       ? counters_.exact
                                  : response.match() == v1::NEAREST   ? counters_.nearest
                                  : response.match() == v1::PREDICTED ? counters_.predicted
                                                                      : counters_.miss;
  counter.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<v1::LookupResponse> LookupResolver::Lookup(const v1::LookupRequest& request) const {
  absl::StatusOr<v1::LookupResponse> response =
      Consistently<v1::LookupResponse>(*store_, [&] { return LookupOnce(request); });
  if (response.ok()) Count(*response);
  return response;
}

absl::StatusOr<v1::BatchLookupResponse> LookupResolver::BatchLookup(
    const v1::BatchLookupRequest& request, absl::Duration cpu_budget) const {
  if (request.lookups_size() > kMaxBatchLookups) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookups: ", request.lookups_size(), " items, at most ", kMaxBatchLookups));
  }
  // One budget for every try: a batch answered again after a commit does not
  // start over.
  const absl::Duration cpu_deadline = ThreadCpuTime() + cpu_budget;
  absl::StatusOr<v1::BatchLookupResponse> response = Consistently<v1::BatchLookupResponse>(
      *store_, [&] { return BatchLookupOnce(request, cpu_deadline, cpu_budget); });
  if (response.ok()) {
    for (const v1::BatchLookupResult& result : response->results()) {
      if (result.has_response()) Count(result.response());
    }
  }
  return response;
}

absl::StatusOr<v1::LookupResponse> LookupResolver::LookupOnce(
    const v1::LookupRequest& request) const {
  ASSIGN_OR_RETURN(v1::LookupResponse response,
                   Resolve(request, "request", request.include_recipe()));
  if (request.include_cubin() && response.match() != v1::MISS &&
      !response.entry().binary_sha256().empty()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const std::string> cubin,
                     cubins_.Get(response.entry().binary_sha256()));
    *response.mutable_cubin() = *cubin;
  }
  return response;
}

absl::StatusOr<v1::BatchLookupResponse> LookupResolver::BatchLookupOnce(
    const v1::BatchLookupRequest& request, absl::Duration cpu_deadline,
    absl::Duration cpu_budget) const {
  v1::BatchLookupResponse response;
  std::vector<absl::StatusOr<v1::LookupResponse>> answers;
  answers.reserve(static_cast<size_t>(request.lookups_size()));
  // The cubins the answers send, by sha256.
  absl::flat_hash_map<std::string, absl::StatusOr<std::shared_ptr<const std::string>>> cubins;
  const auto sends_cubin = [&](const v1::LookupRequest& item,
                               const absl::StatusOr<v1::LookupResponse>& answer) {
    return answer.ok() && (request.include_cubin() || item.include_cubin()) &&
           answer->match() != v1::MISS && !answer->entry().binary_sha256().empty();
  };
  // The first item not answered for the budget; the clock is read every few
  // items (a read costs about as much as an EXACT answer).
  constexpr int kItemsPerClockRead = 16;
  int answered = request.lookups_size();
  for (int i = 0; i < request.lookups_size(); ++i) {
    if (i % kItemsPerClockRead == 0 && i > 0 && ThreadCpuTime() > cpu_deadline) {
      answered = i;
      break;
    }
    const v1::LookupRequest& item = request.lookups(i);
    absl::StatusOr<v1::LookupResponse>& answer = answers.emplace_back(Resolve(
        item, absl::StrCat("lookups[", i, "]"), request.include_recipe() || item.include_recipe()));
    if (answer.ok() && answer->has_recipe()) {
      v1::CompileRecipe* recipe = answer->mutable_recipe();
      auto& sources = *response.mutable_sources();
      if (!sources.contains(recipe->source_sha256())) {
        sources[recipe->source_sha256()] = std::move(*recipe->mutable_source());
      }
      recipe->clear_source();
    }
    if (sends_cubin(item, answer)) cubins.try_emplace(answer->entry().binary_sha256(), nullptr);
  }
  // All read (or found in memory) before any is copied into the response:
  // the cubins kept then lie together in the daemon's heap, and the
  // response's copies, freed once it is sent, leave one block the next
  // batch reuses instead of faulting in fresh memory.
  for (auto& [sha, cubin] : cubins) cubin = cubins_.Get(sha);
  for (int i = answered; i < request.lookups_size(); ++i) {
    answers.emplace_back(absl::ResourceExhaustedError(
        absl::StrCat("lookups[", i, "]: not answered: this BatchLookup used its ",
                     absl::FormatDuration(cpu_budget), " of the daemon's CPU on its first ",
                     answered, " items; send the rest in another call")));
  }
  for (int i = 0; i < request.lookups_size(); ++i) {
    absl::StatusOr<v1::LookupResponse>& answer = answers[static_cast<size_t>(i)];
    if (sends_cubin(request.lookups(i), answer)) {
      const std::string& sha = answer->entry().binary_sha256();
      const absl::StatusOr<std::shared_ptr<const std::string>>& cubin = cubins.at(sha);
      if (!cubin.ok()) {
        answer = cubin.status();
      } else if (!response.binaries().contains(sha)) {
        (*response.mutable_binaries())[sha] = **cubin;
      }
    }
    v1::BatchLookupResult* result = response.add_results();
    if (answer.ok()) {
      *result->mutable_response() = *std::move(answer);
    } else {
      result->set_error_code(static_cast<int32_t>(answer.status().code()));
      result->set_error_message(std::string(answer.status().message()));
    }
  }
  return response;
}

}  // namespace autotune::service
