// Small texts the job phases write into measurements, entries and jobs.
#ifndef AUTOTUNE_SERVICE_JOB_TEXT_H_
#define AUTOTUNE_SERVICE_JOB_TEXT_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace autotune::service {

// Now, as RFC 3339 in UTC to the second: "2026-12-01T11:02:13+00:00".
inline std::string NowText() {
  return absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
}

// The first lines of a compiler log, enough to say what went wrong.
inline std::string LogExcerpt(const std::string& log) {
  constexpr size_t kMax = 2000;
  return log.size() <= kMax ? log : absl::StrCat(log.substr(0, kMax), "\n[... log truncated]");
}

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOB_TEXT_H_
