#include "service/jobs/job_options.h"

#include "absl/strings/str_cat.h"

namespace autotune::service {
namespace {

// The screen's timing: enough replays for a usable median, a few
// milliseconds of GPU time per variant (the serial phase measures at length).
constexpr double kScreenBudgetS = 0.003;
constexpr int kScreenMinSamples = 5;
constexpr double kScreenWarmupS = 0.002;

}  // namespace

std::string NameSetting(absl::string_view setting, absl::string_view value,
                        const SettingHint& hint) {
  const std::string how = hint ? hint(setting) : "";
  return absl::StrCat(setting, " (", value, how.empty() ? "" : "; ", how, ")");
}

ResolvedJobOptions ResolveJobOptions(const v1::JobOptions& job, const JobRunnerOptions& defaults) {
  ResolvedJobOptions resolved;
  resolved.screen.launch_timeout_s =
      job.variant_timeout_s() > 0 ? job.variant_timeout_s() : defaults.variant_timeout_s;
  resolved.screen.timing_budget_s = kScreenBudgetS;
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
