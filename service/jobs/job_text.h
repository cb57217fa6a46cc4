// Small texts the job phases write into measurements, entries and jobs.
#ifndef AUTOTUNE_SERVICE_JOBS_JOB_TEXT_H_
#define AUTOTUNE_SERVICE_JOBS_JOB_TEXT_H_

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace autotune::service {

// The first lines of a compiler log, enough to say what went wrong.
inline std::string LogExcerpt(const std::string& log) {
  constexpr size_t kMax = 2000;
  return log.size() <= kMax ? log : absl::StrCat(log.substr(0, kMax), "\n[... log truncated]");
}

// The line of a compiler log that says what went wrong: the first that
// holds "error", else the first that is not blank, at most 300 characters.
inline std::string FirstErrorLine(const std::string& log) {
  std::string first;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (absl::StrContains(line, "error")) return std::string(line.substr(0, 300));
    if (first.empty()) first = std::string(line.substr(0, 300));
  }
  return first;
}

// Variants that failed to compile, grouped by their first error line: a
// source error shared by every variant is one group, not 80 copies.
class CompileErrorGroups {
 public:
  // Counts one failed variant; `detail` (its name expression and log) is kept
  // for the first of each group. At most kMaxGroups are kept; later ones
  // count in `others`.
  void Add(const std::string& first_line, const std::string& detail) {
    for (Group& group : groups_) {
      if (group.first_line == first_line) {
        ++group.count;
        return;
      }
    }
    if (groups_.size() >= kMaxGroups) {
      ++others_;
      return;
    }
    groups_.push_back({first_line, detail, 1});
  }

  // "80 variants failed to compile, with 2 distinct errors:" then, per group,
  // "  79 x <first line>" and the first such variant's detail, indented.
  std::string Describe(int64_t failed) const {
    std::string text = absl::StrCat(failed, " variants failed to compile");
    if (groups_.size() + (others_ > 0 ? 1 : 0) > 1) {
      absl::StrAppend(&text, ", with ", groups_.size(), others_ > 0 ? " or more" : "",
                      " distinct errors");
    }
    absl::StrAppend(&text, ":");
    for (const Group& group : groups_) {
      absl::StrAppend(&text, "\n  ", group.count, " x ", group.first_line,
                      "\n    first: ", absl::StrReplaceAll(group.detail, {{"\n", "\n    "}}));
    }
    if (others_ > 0) absl::StrAppend(&text, "\n  ", others_, " x other errors");
    return text;
  }

 private:
  static constexpr size_t kMaxGroups = 5;
  struct Group {
    std::string first_line;
    std::string detail;
    int64_t count = 0;
  };
  std::vector<Group> groups_;
  int64_t others_ = 0;
};

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

#endif  // AUTOTUNE_SERVICE_JOBS_JOB_TEXT_H_
