#include "service/jobs/job_options.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/manifest.h"
#include "kernels/search_space.h"

namespace autotune::service {
namespace {

// One number of a request and its range, 0..max; `zero` says what 0 stands
// for when it stands for a default.
struct Bounded {
  const char* name;
  double value;
  double max;
  std::string zero;
};

// Whole numbers as integers ("1048576", not "1.04858e+06").
std::string NumberText(double value) {
  if (std::trunc(value) == value && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrCat(value);
}

absl::Status CheckBounded(absl::string_view prefix, const Bounded& bounded) {
  // Written so that NaN fails too.
  if (bounded.value >= 0 && bounded.value <= bounded.max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(prefix, bounded.name, " is ", NumberText(bounded.value), ", not in 0..",
                   NumberText(bounded.max),
                   bounded.zero.empty() ? "" : absl::StrCat(" (0 = ", bounded.zero, ")")));
}

}  // namespace

std::string NameSetting(absl::string_view setting, absl::string_view value,
                        const SettingHint& hint) {
  const std::string how = hint ? hint(setting) : "";
  return absl::StrCat(setting, " (", value, how.empty() ? "" : "; ", how, ")");
}

absl::Status CheckSearchOptions(const v1::SearchOptions& search, absl::string_view field) {
  if (!v1::SearchStrategy_IsValid(search.strategy())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".strategy ", search.strategy(), " is not a SearchStrategy"));
  }
  // No space holds more variants than a family may have configs: a larger
  // max_variants asks for nothing more.
  return SearchBudgetOf(search).Check(field, kernels::kMaxConfigsPerFamily, kMaxSearchSeconds);
}

SearchBudget SearchBudgetOf(const v1::SearchOptions& search) {
  return {.count = search.max_variants(),
          .fraction = search.max_fraction(),
          .seconds = search.max_seconds()};
}

absl::Status CheckJobOptions(const v1::JobOptions& options) {
  if (options.shard_count() < 0 || options.shard_count() > kernels::kMaxManifestProblems ||
      options.shard_index() < 0 ||
      (options.shard_count() > 0 && options.shard_index() >= options.shard_count())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.shard_index ", options.shard_index(), " is not in 0..shard_count-1 (shard_count ",
        options.shard_count(), ", at most ", kernels::kMaxManifestProblems, ")"));
  }
  const Bounded numbers[] = {
      {"variant_timeout_s", options.variant_timeout_s(), kMaxVariantTimeoutS,
       "the daemon's variant timeout"},
      {"compile_timeout_s", options.compile_timeout_s(), kMaxCompileTimeoutS,
       absl::StrCat(kDefaultCompileTimeoutS, " s")},
      {"serial_candidates", static_cast<double>(options.serial_candidates()), kMaxSerialCandidates,
       absl::StrCat(kDefaultSerialCandidates)},
      {"quiet_wait_s", options.quiet_wait_s(), kMaxQuietWaitS, "the daemon's quiet wait"},
      {"serial_max_s", options.serial_max_s(), kMaxSerialMaxS, "the worker's default"},
      {"candidate_band", options.candidate_band(), kMaxCandidateBand,
       absl::StrCat(kDefaultCandidateBand)},
      {"serial_noise", options.serial_noise(), kMaxSerialNoise, "the worker's default"},
  };
  for (const Bounded& number : numbers) RETURN_IF_ERROR(CheckBounded("options.", number));
  return CheckSearchOptions(options.search(), "options.search");
}

ResolvedJobOptions ResolveJobOptions(const v1::JobOptions& job, const JobRunnerOptions& defaults) {
  ResolvedJobOptions resolved;
  resolved.screen.launch_timeout_s =
      job.variant_timeout_s() > 0 ? job.variant_timeout_s() : defaults.variant_timeout_s;
  resolved.screen.timing_budget_s = kScreenTimingBudgetS;
  resolved.screen.min_samples = kScreenMinSamples;
  resolved.screen.warmup_s = kScreenWarmupS;
  resolved.compile_timeout = job.compile_timeout_s() > 0 ? absl::Seconds(job.compile_timeout_s())
                                                         : defaults.compile_timeout;
  if (job.serial_candidates() > 0) resolved.candidates.max_count = job.serial_candidates();
  if (job.candidate_band() > 0) resolved.candidates.band = job.candidate_band();
  if (job.serial_max_s() > 0) resolved.rounds.set_max_seconds(job.serial_max_s());
  if (job.serial_noise() > 0) resolved.rounds.set_target_noise(job.serial_noise());
  resolved.force = job.force();
  resolved.quiet_wait =
      job.quiet_wait_s() > 0 ? absl::Seconds(job.quiet_wait_s()) : defaults.quiet_wait;
  return resolved;
}

}  // namespace autotune::service
