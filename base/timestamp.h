// Timestamps as text, in one format everywhere (rows, jobs, the audit log,
// the logs, reports, start-up results): RFC 3339 in UTC with a Z, which sorts
// as text in time order.
//
//   Timestamp(t)        "2026-12-02T15:14:35Z"       what people read
//   TimestampMillis(t)  "2026-12-02T15:14:35.042Z"   events within a second
#ifndef AUTOTUNE_BASE_TIMESTAMP_H_
#define AUTOTUNE_BASE_TIMESTAMP_H_

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace autotune {

inline std::string Timestamp(absl::Time time = absl::Now()) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

inline std::string TimestampMillis(absl::Time time = absl::Now()) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

}  // namespace autotune

#endif  // AUTOTUNE_BASE_TIMESTAMP_H_
