// Small texts the job phases write into measurements, entries and jobs.
#ifndef AUTOTUNE_SERVICE_JOB_TEXT_H_
#define AUTOTUNE_SERVICE_JOB_TEXT_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace autotune::service {

// The first lines of a compiler log, enough to say what went wrong.
inline std::string LogExcerpt(const std::string& log) {
  constexpr size_t kMax = 2000;
  return log.size() <= kMax ? log : absl::StrCat(log.substr(0, kMax), "\n[... log truncated]");
}

// "pid 4121 (2.0 GiB), pid 77": other compute processes on a GPU.
inline std::string DescribeProcesses(
    const google::protobuf::RepeatedPtrField<worker::v1::ForeignProcess>& foreign) {
  std::vector<std::string> parts;
  for (const worker::v1::ForeignProcess& p : foreign) {
    parts.push_back(p.used_memory_bytes() > 0
                        ? absl::StrFormat("pid %d (%.1f GiB)", p.pid(),
                                          static_cast<double>(p.used_memory_bytes()) / (1 << 30))
                        : absl::StrCat("pid ", p.pid()));
  }
  return absl::StrJoin(parts, ", ");
}

// "pid 4121 (2.0 GiB); utilization 97%": what NVML saw on a GPU.
inline std::string DescribeDeviceState(const worker::v1::DeviceState& state) {
  std::string text = DescribeProcesses(state.foreign());
  if (state.utilization_percent() >= 0) {
    absl::StrAppend(&text, "; utilization ", state.utilization_percent(), "%");
  }
  return text;
}

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOB_TEXT_H_
