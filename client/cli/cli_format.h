// How the `autotune` CLI prints answers for people: aligned tables and
// short key/value blocks. Machine-readable output is protobuf JSON (PrintJson).
#ifndef AUTOTUNE_CLIENT_CLI_CLI_FORMAT_H_
#define AUTOTUNE_CLIENT_CLI_CLI_FORMAT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

// "exact-only (a nearest neighbour exists; --exact refused it)": the typed
// reason of a MISS, a stable word first for scripts.
std::string MissKindText(v1::MissKind kind);

// "NVIDIA H200 (sm_90, 132 SMs)"; parts that are unset are left out.
std::string FormatDevice(const v1::Device& device);

// Columns separated by two spaces, padded to the widest cell, with no
// trailing spaces. Newlines and tabs inside a cell print as spaces so that a
// row stays one line.
class TextTable {
 public:
  enum class Align { kLeft, kRight };

  explicit TextTable(std::vector<std::string> header);

  // Right-aligns a column (numbers); the header follows the column.
  void SetAlign(size_t column, Align align);
  // Missing cells print empty; extra cells are an error of the caller and dropped.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// "BLOCK_M=128 BLOCK_N=64": a config as the CLI names it, params sorted by
// name and separated by spaces (the daemon's messages name configs the same
// way, in the family's parameter order); "" for an empty config.
std::string FormatConfig(const v1::Config& config);
// 2940 -> "2,940"; -1234 -> "-1,234".
std::string FormatCount(int64_t count);
// Durations for people: 0.42 -> "0.4 s", 41.3 -> "41 s", 125 -> "2 min 05 s",
// 3725 -> "1 h 02 min". Negative values print as 0.
std::string FormatSeconds(double seconds);
// 12.3456 -> "12.35"; 1234.5 -> "1234.50"; 0 (unmeasured) -> "-".
std::string FormatMicros(double micros);
// 0.032 -> "+3.2%"; 0 -> "-" (no runner-up).
std::string FormatMargin(double margin);
// What a choice guarantees (Entry.bound): 0.0031 -> "within 0.31% of every
// candidate"; 0 -> "the fastest beyond doubt"; negative -> "not bounded
// (too few rounds)". BoundFlag is the report's short form: "bound(0.31%)",
// "bound(?)".
std::string BoundText(double bound);
std::string BoundFlag(double bound);
// 1536 -> "1.5 KiB".
std::string FormatBytes(int64_t bytes);
// "SERIAL_VALIDATION" -> "serial_validation"; unspecified -> "-".
std::string FormatPhase(v1::Phase phase);
// First line of `text`, cut to `max_chars` with "..." when longer.
std::string FirstLine(absl::string_view text, size_t max_chars);
// The `autotune warmup` flag that sets JobOptions field `field`
// ("quiet_wait_s" -> "--quiet-wait"); empty for a field it has none for.
std::string WarmupFlag(absl::string_view field);
// `text` from the daemon, which names job options by their field
// ("JobOptions.force"), with the flag that sets each one after it:
// "JobOptions.force (autotune warmup --force)".
std::string WithWarmupFlags(absl::string_view text);

// Protobuf JSON with proto field names and every field, indented.
absl::Status PrintJson(const google::protobuf::Message& message, std::ostream& out);

// The ls table: FAMILY DIMS DTYPE DEVICE CONFIG MEDIAN_US MARGIN PHASE TUNED_AT.
void PrintEntryTable(const google::protobuf::RepeatedPtrField<v1::Entry>& entries,
                     std::ostream& out);

// "EXACT flash_attn batch=8,... bf16" then config, time, margin, device...;
// for NEAREST the distance per dimension, for MISS the reason.
void PrintLookupResponse(const v1::LookupRequest& request, const v1::LookupResponse& response,
                         std::ostream& out);

// An entry in detail with the evidence behind the choice: its interval,
// margin or tie, the serial rounds, contention and the device's limits; then
// the serial validation candidates sorted by median (the winner marked "*"),
// the fastest screened variants, the variants' counts by status and the
// rejected variants with their details (a few, the count says how many).
void PrintEntryDetail(const v1::GetEntryResponse& response, std::ostream& out);

void PrintStats(const v1::StatsResponse& stats, std::ostream& out);
void PrintKernelTable(const v1::ListKernelsResponse& kernels, std::ostream& out);
void PrintJobTable(const v1::ListJobsResponse& jobs, std::ostream& out);

// One line of job counts: "12 problems, 340 variants: 330 compiled (...)".
std::string FormatJobCounts(const v1::JobCounts& counts);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_CLI_FORMAT_H_
