#include "client/cli_format.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

std::string OneLine(absl::string_view text) {
  std::string line(text);
  std::replace_if(
      line.begin(), line.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  return line;
}

void Field(std::ostream& out, absl::string_view key, absl::string_view value) {
  if (value.empty()) return;
  out << absl::StrFormat("  %-12s %s\n", key, value);
}

std::string ProblemLine(absl::string_view family, const v1::Problem& problem) {
  return absl::StrCat(family, "  ", FormatDims(problem.dims()), "  ", DTypeName(problem.dtype()));
}

std::string TimingText(const v1::TimingStats& timing) {
  if (timing.median_us() <= 0) return "";
  std::vector<std::string> details;
  if (timing.min_us() > 0) details.push_back(absl::StrCat("min ", FormatMicros(timing.min_us())));
  if (timing.p90_us() > 0) details.push_back(absl::StrCat("p90 ", FormatMicros(timing.p90_us())));
  if (timing.cv() > 0) details.push_back(absl::StrFormat("cv %.2f%%", timing.cv() * 100));
  if (timing.samples() > 0) details.push_back(absl::StrCat(timing.samples(), " samples"));
  std::string text = absl::StrCat(FormatMicros(timing.median_us()), " us median");
  if (!details.empty()) absl::StrAppend(&text, " (", absl::StrJoin(details, ", "), ")");
  return text;
}

std::string ThroughputText(const v1::TimingStats& timing) {
  std::vector<std::string> parts;
  if (timing.achieved_gbps() > 0)
    parts.push_back(absl::StrFormat("%.1f GB/s", timing.achieved_gbps()));
  if (timing.achieved_tflops() > 0) {
    parts.push_back(absl::StrFormat("%.2f TFLOP/s", timing.achieved_tflops()));
  }
  return absl::StrJoin(parts, ", ");
}

std::string LaunchText(const v1::LaunchDims& launch) {
  if (launch.grid().empty() && launch.block().empty()) return "";
  std::string text = absl::StrCat("grid ", absl::StrJoin(launch.grid(), "x"), ", block ",
                                  absl::StrJoin(launch.block(), "x"));
  if (launch.dynamic_shared_bytes() > 0) {
    absl::StrAppend(&text, ", ", launch.dynamic_shared_bytes(), " B dynamic shared memory");
  }
  return text;
}

std::string TunedText(const v1::Entry& entry) {
  std::vector<std::string> parts;
  if (!entry.tuned_at().empty()) parts.push_back(entry.tuned_at());
  if (entry.phase() != v1::PHASE_UNSPECIFIED) parts.push_back(FormatPhase(entry.phase()));
  if (!entry.job_id().empty()) parts.push_back(absl::StrCat("job ", entry.job_id()));
  return absl::StrJoin(parts, ", ");
}

std::string BinaryText(const v1::Entry& entry) {
  if (entry.binary_sha256().empty()) return "";
  std::vector<std::string> parts = {absl::StrCat("sha256 ", entry.binary_sha256())};
  if (!entry.arch().empty()) parts.push_back(entry.arch());
  if (!entry.nvrtc_version().empty())
    parts.push_back(absl::StrCat("nvrtc ", entry.nvrtc_version()));
  if (!entry.driver_version().empty()) {
    parts.push_back(absl::StrCat("driver ", entry.driver_version()));
  }
  return absl::StrJoin(parts, ", ");
}

void PrintEntryFields(const v1::Entry& entry, std::ostream& out) {
  Field(out, "config", FormatDims(entry.config().params()));
  Field(out, "time", TimingText(entry.timing()));
  Field(out, "throughput", ThroughputText(entry.timing()));
  if (entry.tie()) {
    Field(out, "margin",
          absl::StrCat("tie among ", entry.tied(),
                       " configs within the noise, decided by the tie-break (next best ",
                       FormatMargin(entry.margin()), ")"));
  } else {
    Field(out, "margin",
          entry.margin() > 0 ? absl::StrCat(FormatMargin(entry.margin()), " over the runner-up")
                             : "none (no runner-up)");
  }
  Field(out, "device", FormatDevice(entry.device()));
  Field(out, "tuned", TunedText(entry));
  Field(out, "launch", LaunchText(entry.launch()));
  Field(out, "binary", BinaryText(entry));
  Field(out, "family hash", entry.family_hash());
}

std::string MatchName(v1::MatchKind match) {
  switch (match) {
    case v1::EXACT:
      return "EXACT";
    case v1::NEAREST:
      return "NEAREST";
    case v1::MISS:
      return "MISS";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

std::string FormatDevice(const v1::Device& device) {
  std::vector<std::string> details;
  if (device.compute_capability() > 0) {
    details.push_back(absl::StrCat("sm_", device.compute_capability()));
  }
  if (device.sm_count() > 0) details.push_back(absl::StrCat(device.sm_count(), " SMs"));
  std::string name = device.name().empty() ? "any device" : device.name();
  if (details.empty()) return name;
  return absl::StrCat(name, " (", absl::StrJoin(details, ", "), ")");
}

TextTable::TextTable(std::vector<std::string> header)
    : header_(std::move(header)), align_(header_.size(), Align::kLeft) {}

void TextTable::SetAlign(size_t column, Align align) {
  if (column < align_.size()) align_[column] = align;
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(header_.size());
  for (std::string& cell : cells) cell = OneLine(cell);
  rows_.push_back(std::move(cells));
}

void TextTable::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) width[i] = header_[i].size();
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += "  ";
      const std::string padding(width[i] - row[i].size(), ' ');
      if (align_[i] == Align::kRight) {
        absl::StrAppend(&line, padding, row[i]);
      } else {
        absl::StrAppend(&line, row[i], padding);
      }
    }
    out << absl::string_view(line).substr(0, line.find_last_not_of(' ') + 1) << "\n";
  };
  print_row(header_);
  for (const auto& row : rows_) print_row(row);
}

std::string FormatMicros(double micros) {
  if (micros <= 0) return "-";
  return absl::StrFormat("%.2f", micros);
}

std::string FormatMargin(double margin) {
  if (margin == 0) return "-";
  return absl::StrFormat("%+.1f%%", margin * 100);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr absl::string_view kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatPhase(v1::Phase phase) {
  if (phase == v1::PHASE_UNSPECIFIED || !v1::Phase_IsValid(phase)) return "-";
  return absl::AsciiStrToLower(v1::Phase_Name(phase));
}

std::string FirstLine(absl::string_view text, size_t max_chars) {
  absl::string_view line = text.substr(0, text.find('\n'));
  if (line.size() <= max_chars) return std::string(line);
  if (max_chars <= 3) return std::string(line.substr(0, max_chars));
  return absl::StrCat(line.substr(0, max_chars - 3), "...");
}

absl::Status PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print the answer as JSON: ", printed.message().ToString()));
  }
  out << json;
  if (json.empty() || json.back() != '\n') out << "\n";
  return absl::OkStatus();
}

void PrintEntryTable(const google::protobuf::RepeatedPtrField<v1::Entry>& entries,
                     std::ostream& out) {
  TextTable table(
      {"FAMILY", "DIMS", "DTYPE", "DEVICE", "CONFIG", "MEDIAN_US", "MARGIN", "PHASE", "TUNED_AT"});
  table.SetAlign(5, TextTable::Align::kRight);
  table.SetAlign(6, TextTable::Align::kRight);
  for (const v1::Entry& entry : entries) {
    table.AddRow({entry.family(), FormatDims(entry.problem().dims()),
                  (DTypeName(entry.problem().dtype())), entry.device().name(),
                  FormatDims(entry.config().params()), FormatMicros(entry.timing().median_us()),
                  entry.tie() ? absl::StrCat("tie/", entry.tied()) : FormatMargin(entry.margin()),
                  FormatPhase(entry.phase()), entry.tuned_at()});
  }
  table.Print(out);
}

std::string MissKindText(v1::MissKind kind) {
  switch (kind) {
    case v1::MISS_NO_ENTRY:
      return "no-entry (nothing tuned for this problem or a usable neighbour)";
    case v1::MISS_OTHER_DEVICE:
      return "other-device (tuned, but on a device that does not match)";
    case v1::MISS_OLDER_VERSION:
      return "older-version (tuned only for older versions of the family's source)";
    case v1::MISS_EXACT_ONLY:
      return "exact-only (a nearest neighbour exists; --exact refused it)";
    default:
      return "unspecified (the server did not say)";
  }
}

void PrintLookupResponse(const v1::LookupRequest& request, const v1::LookupResponse& response,
                         std::ostream& out) {
  out << MatchName(response.match()) << "  " << ProblemLine(request.family(), request.problem())
      << "\n";
  if (response.match() == v1::MISS) {
    Field(out, "why", MissKindText(response.miss_kind()));
    Field(out, "reason",
          response.miss_reason().empty() ? "no cached entry" : response.miss_reason());
    return;
  }
  for (const v1::DimDistance& distance : response.distance()) {
    Field(out, "distance",
          absl::StrCat(distance.name(), ": requested ", distance.requested(), ", tuned ",
                       distance.tuned()));
  }
  if (response.match() == v1::NEAREST) {
    Field(out, "tuned for", FormatDims(response.entry().problem().dims()));
  }
  PrintEntryFields(response.entry(), out);
}

void PrintEntryDetail(const v1::GetEntryResponse& response, std::ostream& out) {
  const v1::Entry& entry = response.entry();
  out << ProblemLine(entry.family(), entry.problem()) << "\n";
  PrintEntryFields(entry, out);
  out << "\n" << response.measurements_size() << " measurements\n";
  if (response.measurements().empty()) return;

  std::vector<const v1::Measurement*> sorted;
  for (const v1::Measurement& measurement : response.measurements()) sorted.push_back(&measurement);
  // Finalists first (the latest phase), working variants before failed ones,
  // fastest first: the order in which a reader checks why the winner won.
  std::stable_sort(
      sorted.begin(), sorted.end(), [](const v1::Measurement* a, const v1::Measurement* b) {
        auto key = [](const v1::Measurement* m) {
          const double median = m->timing().median_us() > 0 ? m->timing().median_us() : 1e300;
          return std::make_tuple(-static_cast<int>(m->phase()), m->status() != v1::OK, median);
        };
        return key(a) < key(b);
      });
  const std::string chosen = FormatDims(entry.config().params());
  TextTable table({"", "STATUS", "PHASE", "CONFIG", "MEDIAN_US", "CV", "MAX_ERR", "DETAIL"});
  table.SetAlign(4, TextTable::Align::kRight);
  table.SetAlign(5, TextTable::Align::kRight);
  table.SetAlign(6, TextTable::Align::kRight);
  for (const v1::Measurement* m : sorted) {
    const std::string config = FormatDims(m->config().params());
    const bool winner = m->status() == v1::OK && config == chosen;
    // A detail opens with the variant's context ("family dims dtype
    // [config]: "), which the other columns already show.
    absl::string_view detail = m->detail();
    if (absl::StartsWith(detail, m->family() + " ")) {
      const size_t end = detail.find("]: ");
      if (end != absl::string_view::npos) detail.remove_prefix(end + 3);
    }
    table.AddRow({winner ? "*" : "", v1::VariantStatus_Name(m->status()), FormatPhase(m->phase()),
                  config, FormatMicros(m->timing().median_us()),
                  m->timing().cv() > 0 ? absl::StrFormat("%.2f%%", m->timing().cv() * 100) : "-",
                  m->max_error() > 0 ? absl::StrFormat("%.3g", m->max_error()) : "-",
                  FirstLine(detail, 60)});
  }
  table.Print(out);
}

void PrintStats(const v1::StatsResponse& stats, std::ostream& out) {
  auto line = [&out](absl::string_view key, absl::string_view value) {
    out << absl::StrFormat("%-14s %s\n", key, value);
  };
  std::string server = stats.server_version().empty() ? "autotuned" : stats.server_version();
  if (stats.uptime_s() > 0) {
    absl::StrAppend(&server, ", up ",
                    absl::FormatDuration(absl::Seconds(static_cast<int64_t>(stats.uptime_s()))));
  }
  line("server", server);
  if (!stats.listen_addresses().empty()) {
    line("listening", absl::StrJoin(stats.listen_addresses(), ", "));
  }
  std::string database = stats.database_path();
  std::vector<std::string> details;
  if (stats.database_bytes() > 0) details.push_back(FormatBytes(stats.database_bytes()));
  if (stats.schema_version() > 0)
    details.push_back(absl::StrCat("schema ", stats.schema_version()));
  if (!details.empty()) absl::StrAppend(&database, " (", absl::StrJoin(details, ", "), ")");
  line("database", database);
  line("families", absl::StrCat(stats.families()));
  line("entries", absl::StrCat(stats.entries()));
  line("binaries", absl::StrCat(stats.binaries(), " (", FormatBytes(stats.binary_bytes()), ")"));
  line("measurements", absl::StrCat(stats.measurements()));
  line("jobs", absl::StrCat(stats.jobs()));
  line("lookups", absl::StrCat("exact ", stats.lookups_exact(), ", nearest ",
                               stats.lookups_nearest(), ", miss ", stats.lookups_miss()));
}

void PrintKernelTable(const v1::ListKernelsResponse& kernels, std::ostream& out) {
  TextTable table(
      {"NAME", "HASH", "DIMS", "DTYPES", "CONFIGS", "ENTRIES", "ORIGIN", "REGISTERED_AT"});
  table.SetAlign(4, TextTable::Align::kRight);
  table.SetAlign(5, TextTable::Align::kRight);
  for (const v1::KernelSummary& kernel : kernels.kernels()) {
    std::vector<std::string> dims;
    for (const v1::ProblemDimension& dim : kernel.dims()) dims.push_back(dim.name());
    std::vector<absl::string_view> dtypes;
    for (int dtype : kernel.dtypes()) dtypes.push_back(DTypeName(static_cast<v1::DType>(dtype)));
    table.AddRow({kernel.name(), kernel.content_hash().substr(0, 12), absl::StrJoin(dims, ","),
                  absl::StrJoin(dtypes, ","), absl::StrCat(kernel.config_count()),
                  absl::StrCat(kernel.entry_count()), kernel.builtin() ? "builtin" : "registered",
                  kernel.registered_at()});
  }
  table.Print(out);
}

void PrintJobTable(const v1::ListJobsResponse& jobs, std::ostream& out) {
  TextTable table(
      {"ID", "STATE", "PROBLEMS", "VARIANTS", "OK", "FAILED", "CREATED_AT", "UPDATED_AT", "ERROR"});
  for (size_t column : {2, 3, 4, 5}) table.SetAlign(column, TextTable::Align::kRight);
  for (const v1::Job& job : jobs.jobs()) {
    const v1::JobCounts& c = job.counts();
    const int64_t failed = c.compile_errors() + c.wrong_result() + c.timeout() + c.fault();
    table.AddRow({job.id(), v1::JobState_Name(job.state()), absl::StrCat(c.problems()),
                  absl::StrCat(c.variants()), absl::StrCat(c.ok()), absl::StrCat(failed),
                  job.created_at(), job.updated_at(), FirstLine(job.error(), 60)});
  }
  table.Print(out);
}

std::string FormatJobCounts(const v1::JobCounts& c) {
  std::string text = absl::StrCat(c.problems(), " problems");
  if (c.cached_problems() > 0) absl::StrAppend(&text, " (", c.cached_problems(), " cached)");
  absl::StrAppend(&text, ", ", c.variants(), " variants");
  if (c.compiles() > 0) absl::StrAppend(&text, " (", c.compiles(), " distinct compiles)");
  absl::StrAppend(&text, ": ", c.compiled(), " compiled");
  if (c.compile_cache_hits() > 0 || c.compile_errors() > 0) {
    absl::StrAppend(&text, " (", c.compile_cache_hits(), " cache hits, ", c.compile_errors(),
                    " errors");
    if (c.compile_timeouts() > 0) absl::StrAppend(&text, ", ", c.compile_timeouts(), " timeouts");
    absl::StrAppend(&text, ")");
  }
  if (c.measured() > 0) absl::StrAppend(&text, ", ", c.measured(), " measured: ", c.ok(), " ok");
  const std::pair<int64_t, absl::string_view> failures[] = {{c.wrong_result(), "wrong result"},
                                                            {c.timeout(), "timeout"},
                                                            {c.fault(), "fault"},
                                                            {c.unsupported(), "unsupported"}};
  for (const auto& [count, name] : failures) {
    if (count > 0) absl::StrAppend(&text, ", ", count, " ", name);
  }
  return text;
}

}  // namespace autotune::client
