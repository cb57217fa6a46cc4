#include "service/jobs/job_report.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "service/jobs/choice.h"

namespace autotune::service {
namespace {

// "NVRTC 12.8 -> 13.0", "family version 1a2b3c4d -> 5e6f7a8b", "earlier run".
std::string WhatDiffers(const v1::Entry& before, const v1::Entry& now) {
  std::vector<std::string> parts;
  if (before.family_hash() != now.family_hash()) {
    parts.push_back(absl::StrCat("family version ", before.family_hash().substr(0, 8), " -> ",
                                 now.family_hash().substr(0, 8)));
  }
  if (before.nvrtc_version() != now.nvrtc_version()) {
    parts.push_back(absl::StrCat("NVRTC ", before.nvrtc_version(), " -> ", now.nvrtc_version()));
  }
  if (before.driver_version() != now.driver_version()) {
    parts.push_back(absl::StrCat("driver ", before.driver_version(), " -> ", now.driver_version()));
  }
  if (parts.empty()) parts.push_back("earlier run");
  return absl::StrJoin(parts, ", ");
}

}  // namespace

v1::ProblemReport MakeProblemReport(const PlannedProblem& problem, const ScreenResult& screen,
                                    const SerialResult* serial) {
  v1::ProblemReport report;
  const v1::KernelFamily& family = problem.record->family;
  report.set_family(family.name());
  *report.mutable_problem() = problem.problem;
  if (family.has_default_config()) *report.mutable_default_config() = family.default_config();
  std::map<std::string, int64_t> counts = screen.status_counts;
  report.set_screened(static_cast<int32_t>(screen.ok.size()));
  if (screen.time.variants() > 0) *report.mutable_screen_time() = screen.time;
  report.set_screens_carried(screen.carried);
  report.set_screens_carried_from(screen.carried_from);
  report.set_screen_contention(screen.contention);
  if (serial == nullptr) {
    report.set_error(std::string(screen.error.message()));
  } else {
    for (const auto& [status, n] : serial->status_counts) {
      // A candidate that failed the serial phase counts there, not as OK.
      counts[status] += n;
      counts["OK"] -= n;
    }
    report.set_default_median_us(serial->default_median_us);
    report.set_kept_clean(serial->kept_clean);
    if (serial->entry) {
      const v1::Entry& entry = *serial->entry;
      *report.mutable_entry() = entry;
      const double median = entry.timing().median_us();
      if (serial->default_median_us > 0 && median > 0) {
        report.set_speedup(serial->default_median_us / median);
      }
      if (problem.previous) {
        *report.mutable_previous() = *problem.previous;
        report.set_previous_differs(WhatDiffers(*problem.previous, entry));
        const double before = problem.previous->timing().median_us();
        if (before > 0 && median > 0) {
          report.set_previous_ratio(before / median);
          // Slower than before beyond the noise of either and the tie band.
          const double noise =
              std::max({kTieBand, 2 * entry.noise(), 2 * problem.previous->noise()});
          report.set_regression(median > before * (1 + noise));
        }
      }
    } else {
      report.set_error(std::string(serial->error.message()));
    }
  }
  for (const auto& [status, n] : counts) {
    if (n > 0) (*report.mutable_status_counts())[status] = n;
  }
  return report;
}

}  // namespace autotune::service
