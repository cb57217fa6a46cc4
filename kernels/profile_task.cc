#include "kernels/profile_task.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/sha256.h"
#include "proto/problem.h"

namespace autotune::kernels {

namespace wv1 = ::autotune::worker::v1;

std::string ConfigLabel(const v1::KernelFamily& family, const v1::Config& config) {
  if (config.params().empty()) return "reference";
  std::vector<std::string> parts;
  for (const v1::TunableParameter& param : family.params()) {
    auto it = config.params().find(param.name());
    if (it != config.params().end()) parts.push_back(absl::StrCat(param.name(), "=", it->second));
  }
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<wv1::ProfileTask> MakeProfileTask(const v1::KernelFamily& family,
                                                 const v1::Problem& problem,
                                                 const SearchSpace& space,
                                                 const CompiledKernel& reference,
                                                 const std::vector<CompiledVariant>& variants,
                                                 const ProfileSettings& settings) {
  const std::string context = ProblemContext(family.name(), problem);
  if (settings.seeds < kMinSeeds) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": validation needs at least ",
                                                   kMinSeeds, " seeds, not ", settings.seeds));
  }
  if (!(settings.launch_timeout_s > 0) || !(settings.timing_budget_s > 0) ||
      settings.min_samples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": launch_timeout_s (", settings.launch_timeout_s,
                     "), timing_budget_s (", settings.timing_budget_s, ") and min_samples (",
                     settings.min_samples, ") must be positive"));
  }
  const v1::Tolerance* tolerance = nullptr;
  for (const v1::Tolerance& candidate : family.tolerances()) {
    if (candidate.dtype() == problem.dtype()) tolerance = &candidate;
  }
  if (tolerance == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": family '", family.name(),
                                                   "' has no tolerance for ",
                                                   DTypeName(problem.dtype())));
  }
  if (variants.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": no variants to profile"));
  }
  if (reference.cubin.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": the reference kernel has no cubin"));
  }

  wv1::ProfileTask task;
  task.set_context(context);
  task.set_rtol(tolerance->rtol());
  task.set_atol(tolerance->atol());
  task.set_seeds(settings.seeds);
  // The same problem always gets the same inputs, so a rerun checks what the
  // first run checked.
  const std::string digest = Sha256Hex(context);
  uint64_t seed = 0;
  (void)absl::SimpleHexAtoi(digest.substr(0, 15), &seed);
  task.set_base_seed(seed);
  task.set_cache_state(settings.cache_state != v1::CACHE_STATE_UNSPECIFIED
                           ? settings.cache_state
                           : (family.cache_state() == v1::HOT ? v1::HOT : v1::COLD));
  task.set_validate_only(settings.validate_only);
  task.set_launch_timeout_s(settings.launch_timeout_s);
  task.set_timing_budget_s(settings.timing_budget_s);
  if (settings.warmup_s > 0) task.set_warmup_s(settings.warmup_s);
  task.set_min_samples(settings.min_samples);
  task.set_max_memory_bytes(settings.max_memory_bytes);

  // Buffers: a shape may depend on params, so each buffer gets the largest
  // extent any variant asks for; outputs are compared over all of it.
  for (int i = 0; i < family.buffers_size(); ++i) {
    wv1::BufferSpec* buffer = task.add_buffers();
    buffer->set_name(family.buffers(i).name());
    buffer->set_role(family.buffers(i).role());
    *buffer->mutable_fill() = family.buffers(i).fill();
    buffer->set_dtype(family.buffers(i).dtype() == v1::DTYPE_UNSPECIFIED
                          ? problem.dtype()
                          : family.buffers(i).dtype());
  }
  const Variant* first = nullptr;
  for (const CompiledVariant& compiled : variants) {
    const Variant& variant = *compiled.variant;
    if (first == nullptr) first = &variant;
    for (size_t i = 0; i < variant.buffers.size() && i < static_cast<size_t>(task.buffers_size());
         ++i) {
      wv1::BufferSpec* buffer = task.mutable_buffers(static_cast<int>(i));
      buffer->set_elements(std::max(buffer->elements(), variant.buffers[i].elements));
    }
    // Scalars are passed to the reference too, so every config must agree
    // on them.
    for (size_t i = 0; i < variant.scalars.size(); ++i) {
      if (variant.scalars[i].value != first->scalars[i].value) {
        return absl::InvalidArgumentError(
            absl::StrCat(context, ": scalars[", i, "] '", variant.scalars[i].name,
                         "' differs between configs (", ConfigLabel(family, first->config), ": ",
                         first->scalars[i].value, ", ", ConfigLabel(family, variant.config), ": ",
                         variant.scalars[i].value, "); the reference cannot be run with both"));
      }
    }
    if (compiled.kernel.cubin.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, " [", ConfigLabel(family, variant.config), "]: no cubin"));
    }
    wv1::KernelImage* image = task.add_variants();
    image->set_id(compiled.id.empty() ? absl::StrCat(variant.index) : compiled.id);
    image->set_cubin(compiled.kernel.cubin);
    image->set_lowered_name(compiled.kernel.lowered_name);
    *image->mutable_launch() = variant.launch;
    image->set_label(ConfigLabel(family, variant.config));
    image->set_bytes_per_call(variant.bytes_per_call);
    image->set_flops_per_call(variant.flops_per_call);
  }
  if (first != nullptr) {
    for (const ScalarValue& scalar : first->scalars) {
      wv1::ScalarSpec* spec = task.add_scalars();
      spec->set_name(scalar.name);
      spec->set_dtype(scalar.dtype);
      spec->set_value(scalar.value);
    }
  }
  wv1::KernelImage* ref = task.mutable_reference();
  ref->set_id("reference");
  ref->set_cubin(reference.cubin);
  ref->set_lowered_name(reference.lowered_name);
  *ref->mutable_launch() = space.reference_launch;
  ref->set_label("reference");
  return task;
}

SerialRule ResolveSerialRule(const worker::v1::SerialOptions& options) {
  SerialRule rule;
  if (options.target_noise() > 0 && options.target_noise() < 1) {
    rule.target_noise = options.target_noise();
  }
  if (options.min_rounds() > 0) rule.min_rounds = options.min_rounds();
  if (options.max_seconds() > 0 && std::isfinite(options.max_seconds())) {
    rule.max_seconds = options.max_seconds();
  }
  if (options.round_seconds() > 0 && std::isfinite(options.round_seconds())) {
    rule.round_seconds = options.round_seconds();
  }
  if (options.throttle_fraction() > 0 && options.throttle_fraction() < 1) {
    rule.throttle_fraction = options.throttle_fraction();
  }
  return rule;
}

}  // namespace autotune::kernels
