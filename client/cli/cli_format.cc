#include "client/cli/cli_format.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "proto/json.h"
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

// "812.3 GB/s (87% of the 934.0 GB/s measured copy rate), 1.23 TFLOP/s".
std::string ThroughputText(const v1::TimingStats& timing, const v1::DeviceLimits& limits) {
  std::vector<std::string> parts;
  if (timing.achieved_gbps() > 0) {
    std::string gbps = absl::StrFormat("%.1f GB/s", timing.achieved_gbps());
    if (limits.copy_gbps() > 0) {
      absl::StrAppend(&gbps, absl::StrFormat(" (%.0f%% of the %.1f GB/s measured copy rate)",
                                             100 * timing.achieved_gbps() / limits.copy_gbps(),
                                             limits.copy_gbps()));
    }
    parts.push_back(std::move(gbps));
  }
  if (timing.achieved_tflops() > 0) {
    parts.push_back(absl::StrFormat("%.2f TFLOP/s", timing.achieved_tflops()));
  }
  return absl::StrJoin(parts, ", ");
}

// "[40.90, 41.50]": the interval the tie rule compares, [q1, q3] (or
// [min, q3] for older measurements).
std::string IntervalText(const v1::TimingStats& timing) {
  const double low = timing.q1_us() > 0 ? timing.q1_us() : timing.min_us();
  if (low <= 0 || timing.q3_us() <= 0) return "";
  return absl::StrCat("[", FormatMicros(low), ", ", FormatMicros(timing.q3_us()), "]");
}

std::string NoiseText(double noise) { return absl::StrFormat("%.2f%%", noise * 100); }

// "8 candidates, 24 rounds, noise 0.31%, 2 rounds dropped for a throttled
// clock; stop: noise below 0.5%".
std::string SerialText(const v1::Entry& entry) {
  std::vector<std::string> parts;
  if (entry.candidates() > 0) parts.push_back(absl::StrCat(entry.candidates(), " candidates"));
  if (entry.rounds() > 0) {
    parts.push_back(absl::StrCat(entry.rounds(), " rounds"));
    parts.push_back(absl::StrCat("noise ", NoiseText(entry.noise())));
  }
  if (entry.throttled_rounds() > 0) {
    parts.push_back(
        absl::StrCat(entry.throttled_rounds(), " rounds dropped for a throttled clock"));
  }
  std::string text = absl::StrJoin(parts, ", ");
  if (!entry.stop().empty())
    absl::StrAppend(&text, text.empty() ? "" : "; ", "stop: ", entry.stop());
  return text;
}

// "copy 934.0 GB/s, peak 4800.0 GB/s; SM clock 1980 MHz default, 1755-1980
// MHz over the rounds".
std::string LimitsText(const v1::DeviceLimits& limits) {
  std::vector<std::string> memory;
  if (limits.copy_gbps() > 0)
    memory.push_back(absl::StrFormat("copy %.1f GB/s", limits.copy_gbps()));
  if (limits.peak_bandwidth_gbps() > 0) {
    memory.push_back(absl::StrFormat("peak %.1f GB/s", limits.peak_bandwidth_gbps()));
  }
  std::vector<std::string> clock;
  if (limits.default_sm_clock_mhz() > 0) {
    clock.push_back(absl::StrCat(limits.default_sm_clock_mhz(), " MHz default"));
  }
  if (limits.min_sm_clock_mhz() > 0 && limits.max_sm_clock_mhz() > 0) {
    clock.push_back(absl::StrCat(limits.min_sm_clock_mhz(), "-", limits.max_sm_clock_mhz(),
                                 " MHz over the rounds"));
  }
  std::string text = absl::StrJoin(memory, ", ");
  if (!clock.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : "; ", "SM clock ", absl::StrJoin(clock, ", "));
  }
  std::vector<std::string> power;
  if (limits.max_power_w() > 0) {
    power.push_back(
        limits.power_limit_w() > 0
            ? absl::StrFormat("%.0f W of %.0f W", limits.max_power_w(), limits.power_limit_w())
            : absl::StrFormat("%.0f W", limits.max_power_w()));
  }
  if (limits.max_temperature_c() > 0) {
    power.push_back(absl::StrCat(limits.max_temperature_c(), " C"));
  }
  if (!limits.clocks_events().empty()) {
    power.push_back(absl::StrCat("clocks held by ", limits.clocks_events()));
  }
  if (!power.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : "; ", "at most ", absl::StrJoin(power, ", "));
  }
  return text;
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

// How much of an entry to print: a lookup's answer, or (show) the evidence
// behind the choice as well.
enum class EntryDetail { kAnswer, kEvidence };

void PrintEntryFields(const v1::Entry& entry, EntryDetail detail, std::ostream& out) {
  Field(out, "config", FormatConfig(entry.config()));
  Field(out, "time", TimingText(entry.timing()));
  if (detail == EntryDetail::kEvidence) {
    const std::string interval = IntervalText(entry.timing());
    if (!interval.empty()) {
      Field(out, "interval",
            absl::StrCat(interval, entry.timing().q1_us() > 0 ? " us (q1, q3)" : " us (min, q3)"));
    }
  }
  Field(out, "throughput", ThroughputText(entry.timing(), entry.limits()));
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
  if (!entry.choice().empty()) {
    Field(out, "choice", absl::StrCat(BoundText(entry.bound()), ": ", entry.choice()));
  }
  if (entry.throttled()) {
    Field(out, "throttled", "THROTTLED: measured while the GPU ran below its clocks (forced)");
  }
  if (detail == EntryDetail::kEvidence) Field(out, "serial", SerialText(entry));
  Field(out, "search", entry.search());
  // A contended time may be too slow, and the config chosen on it too: a
  // lookup says so as well.
  if (entry.contended()) {
    Field(out, "contended",
          absl::StrCat("CONTENDED: measured with another compute process on the GPU",
                       entry.contention().empty() ? "" : ": ", entry.contention()));
  }
  if (detail == EntryDetail::kEvidence) Field(out, "limits", LimitsText(entry.limits()));
  Field(out, "device", FormatDevice(entry.device()));
  Field(out, "tuned", TunedText(entry));
  Field(out, "launch", LaunchText(entry.launch()));
  Field(out, "binary", BinaryText(entry));
  Field(out, "family hash", entry.family_hash());
}

// A measurement's detail without the context it opens with ("family dims
// dtype [config]: "), which the columns beside it already show.
absl::string_view DetailText(const v1::Measurement& m) {
  absl::string_view detail = m.detail();
  if (absl::StartsWith(detail, m.family() + " ")) {
    const size_t end = detail.find("]: ");
    if (end != absl::string_view::npos) detail.remove_prefix(end + 3);
  }
  return detail;
}

double MedianOrLast(const v1::Measurement* m) {
  return m->timing().median_us() > 0 ? m->timing().median_us() : 1e300;
}

// Working variants first, then by median, then by config: the order in which
// a reader checks why the winner won.
void SortByMedian(std::vector<const v1::Measurement*>& measurements) {
  std::sort(
      measurements.begin(), measurements.end(),
      [](const v1::Measurement* a, const v1::Measurement* b) {
        return std::make_tuple(a->status() != v1::OK, MedianOrLast(a), FormatConfig(a->config())) <
               std::make_tuple(b->status() != v1::OK, MedianOrLast(b), FormatConfig(b->config()));
      });
}

void PrintSerialTable(const std::vector<const v1::Measurement*>& serial, const v1::Entry& entry,
                      std::ostream& out) {
  const std::string chosen = FormatConfig(entry.config());
  double winner_median = 0;
  for (const v1::Measurement* m : serial) {
    if (m->status() == v1::OK && FormatConfig(m->config()) == chosen) {
      winner_median = m->timing().median_us();
    }
  }
  TextTable table(
      {" ", "CONFIG", "MEDIAN_US", "VS_WINNER", "[MIN, Q3]", "ROUNDS", "NOISE", "STATUS", "NOTE"});
  for (size_t column : {2, 3, 5, 6}) table.SetAlign(column, TextTable::Align::kRight);
  for (const v1::Measurement* m : serial) {
    const std::string config = FormatConfig(m->config());
    const bool winner = m->status() == v1::OK && config == chosen;
    const double median = m->timing().median_us();
    std::string versus;
    if (!winner && m->status() == v1::OK && median > 0 && winner_median > 0) {
      versus = absl::StrFormat("%+.2f%%", (median / winner_median - 1) * 100);
    }
    std::vector<std::string> notes;
    if (m->contended()) notes.push_back("CONTENDED");
    if (m->status() != v1::OK) notes.push_back(FirstLine(DetailText(*m), 60));
    table.AddRow({winner ? "*" : "", config, FormatMicros(median), versus,
                  IntervalText(m->timing()), m->rounds() > 0 ? absl::StrCat(m->rounds()) : "",
                  m->rounds() > 0 ? NoiseText(m->noise()) : "", v1::VariantStatus_Name(m->status()),
                  absl::StrJoin(notes, " ")});
  }
  table.Print(out);
}

std::string StatusCountsText(const std::map<v1::VariantStatus, int64_t>& counts) {
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts) {
    parts.push_back(absl::StrCat(v1::VariantStatus_Name(status), " ", FormatCount(count)));
  }
  return absl::StrJoin(parts, ", ");
}

std::string MatchName(v1::MatchKind match) {
  switch (match) {
    case v1::EXACT:
      return "EXACT";
    case v1::NEAREST:
      return "NEAREST";
    case v1::MISS:
      return "MISS";
    case v1::PREDICTED:
      return "PREDICTED";
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

std::string FormatConfig(const v1::Config& config) {
  return absl::StrReplaceAll(FormatDims(config.params()), {{",", " "}});
}

std::string FormatCount(int64_t count) {
  const std::string digits =
      absl::StrCat(count < 0 ? -static_cast<uint64_t>(count) : static_cast<uint64_t>(count));
  std::string text = count < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

std::string FormatSeconds(double seconds) {
  if (!(seconds > 0)) seconds = 0;
  if (seconds < 9.95) return absl::StrFormat("%.1f s", seconds);
  const int64_t whole = static_cast<int64_t>(seconds + 0.5);
  if (whole < 60) return absl::StrCat(whole, " s");
  if (whole < 3600) return absl::StrFormat("%d min %02d s", whole / 60, whole % 60);
  return absl::StrFormat("%d h %02d min", whole / 3600, whole % 3600 / 60);
}

std::string FormatMicros(double micros) {
  if (micros <= 0) return "-";
  return absl::StrFormat("%.2f", micros);
}

std::string FormatMargin(double margin) {
  if (margin == 0) return "-";
  return absl::StrFormat("%+.1f%%", margin * 100);
}

std::string BoundText(double bound) {
  if (bound < 0) return "not bounded (too few rounds)";
  if (bound == 0) return "the fastest beyond doubt";
  return absl::StrFormat("within %.2f%% of every candidate", bound * 100);
}

std::string BoundFlag(double bound) {
  return bound < 0 ? "bound(?)" : absl::StrFormat("bound(%.2f%%)", bound * 100);
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

std::string WarmupFlag(absl::string_view field) {
  static const auto* const flags = new std::map<std::string, std::string, std::less<>>{
      {"compile_only", "--compile-only"},
      {"shard_index", "--shard"},
      {"shard_count", "--shard"},
      {"variant_timeout_s", "--variant-timeout"},
      {"compile_timeout_s", "--compile-timeout"},
      {"retune", "--retune"},
      {"serial_candidates", "--candidates"},
      {"force", "--force"},
      {"quiet_wait_s", "--quiet-wait"},
      {"candidate_band", "--candidate-band"},
      {"serial_max_s", "--serial-max"},
      {"serial_noise", "--serial-noise"},
      {"search", "--search, --budget, --seed"},
  };
  auto it = flags->find(field);
  return it == flags->end() ? "" : it->second;
}

std::string WithWarmupFlags(absl::string_view text) {
  static constexpr absl::string_view kPrefix = "JobOptions.";
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(kPrefix); at != absl::string_view::npos;
       at = text.find(kPrefix, at + 1)) {
    size_t end = at + kPrefix.size();
    while (end < text.size() && (absl::ascii_isalnum(text[end]) || text[end] == '_')) ++end;
    const std::string flag =
        WarmupFlag(text.substr(at + kPrefix.size(), end - at - kPrefix.size()));
    if (flag.empty()) continue;
    absl::StrAppend(&out, text.substr(from, end - from), " (autotune warmup ", flag, ")");
    from = end;
  }
  absl::StrAppend(&out, text.substr(from));
  return out;
}

std::string FirstLine(absl::string_view text, size_t max_chars) {
  absl::string_view line = text.substr(0, text.find('\n'));
  if (line.size() <= max_chars) return std::string(line);
  if (max_chars <= 3) return std::string(line.substr(0, max_chars));
  return absl::StrCat(line.substr(0, max_chars - 3), "...");
}

absl::Status PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  ASSIGN_OR_RETURN(const std::string json, MessageJson(message, /*indent=*/true));
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
                  FormatConfig(entry.config()), FormatMicros(entry.timing().median_us()),
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
    case v1::MISS_DRIVER_TOO_OLD:
      return "driver-too-old (tuned, but its binary needs a newer driver; its config applies)";
    case v1::MISS_NEAREST_UNFIT:
      return "nearest-unfit (the nearest entry's config does not fit this problem)";
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
    if (response.has_entry()) Field(out, "tuned config", FormatConfig(response.entry().config()));
    if (response.has_default_config()) {
      Field(out, "default", FormatConfig(response.default_config()));
    }
    if (response.has_default_launch()) {
      Field(out, "default launch", LaunchText(response.default_launch()));
    }
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
  if (response.match() == v1::PREDICTED) {
    const v1::Prediction& prediction = response.prediction();
    Field(out, "predicted",
          absl::StrCat(absl::StrFormat("%.2f", prediction.predicted_us()), " us by a model of ",
                       prediction.problems(), " problems tuned on ", prediction.device(), " (",
                       prediction.measurements(), " measured variants); the fastest of ",
                       prediction.ranked(),
                       " tuned configs that fit; never measured on this problem"));
    Field(out, "tuned for", FormatDims(response.entry().problem().dims()));
  }
  if (!response.has_launch()) {
    PrintEntryFields(response.entry(), EntryDetail::kAnswer, out);
    return;
  }
  // The launch for the requested problem, not the tuned one's.
  v1::Entry entry = response.entry();
  *entry.mutable_launch() = response.launch();
  PrintEntryFields(entry, EntryDetail::kAnswer, out);
}

void PrintEntryDetail(const v1::GetEntryResponse& response, std::ostream& out) {
  static constexpr size_t kScreenRows = 10;
  static constexpr size_t kRejectedRows = 10;
  const v1::Entry& entry = response.entry();
  out << ProblemLine(entry.family(), entry.problem()) << "\n";
  PrintEntryFields(entry, EntryDetail::kEvidence, out);
  if (response.measurements().empty()) {
    out << "\nno measurements behind this entry\n";
    return;
  }

  std::vector<const v1::Measurement*> serial;
  std::vector<const v1::Measurement*> screened;  // SCREEN, OK
  std::vector<const v1::Measurement*> rejected;  // not OK, before the serial phase
  std::map<v1::VariantStatus, int64_t> counts;   // before the serial phase
  int64_t variants = 0;
  for (const v1::Measurement& m : response.measurements()) {
    if (m.phase() == v1::SERIAL_VALIDATION) {
      serial.push_back(&m);
      continue;
    }
    ++variants;
    ++counts[m.status()];
    if (m.status() != v1::OK) {
      rejected.push_back(&m);
    } else if (m.phase() == v1::SCREEN) {
      screened.push_back(&m);
    }
  }

  if (serial.empty()) {
    out << "\nSerial validation: none (chosen on the screen's timing)\n";
  } else {
    out << "\nSerial validation: " << serial.size() << " candidates, timed together\n";
    SortByMedian(serial);
    PrintSerialTable(serial, entry, out);
  }

  if (!screened.empty()) {
    SortByMedian(screened);
    const size_t shown = std::min(screened.size(), kScreenRows);
    out << "\nScreen: fastest " << shown << " of " << FormatCount(screened.size())
        << " valid variants\n";
    const std::string chosen = FormatConfig(entry.config());
    TextTable table({" ", "CONFIG", "MEDIAN_US", "CV"});
    table.SetAlign(2, TextTable::Align::kRight);
    table.SetAlign(3, TextTable::Align::kRight);
    for (size_t i = 0; i < shown; ++i) {
      const v1::Measurement* m = screened[i];
      const std::string config = FormatConfig(m->config());
      table.AddRow(
          {config == chosen ? "*" : "", config, FormatMicros(m->timing().median_us()),
           m->timing().cv() > 0 ? absl::StrFormat("%.2f%%", m->timing().cv() * 100) : "-"});
    }
    table.Print(out);
  }

  if (variants > 0)
    out << "\n" << FormatCount(variants) << " variants: " << StatusCountsText(counts) << "\n";

  if (!rejected.empty()) {
    std::stable_sort(rejected.begin(), rejected.end(),
                     [](const v1::Measurement* a, const v1::Measurement* b) {
                       return std::make_tuple(a->status(), FormatConfig(a->config())) <
                              std::make_tuple(b->status(), FormatConfig(b->config()));
                     });
    const size_t shown = std::min(rejected.size(), kRejectedRows);
    out << "\nRejected: " << (shown < rejected.size() ? absl::StrCat("first ", shown, " of ") : "")
        << FormatCount(rejected.size()) << "\n";
    TextTable table({"STATUS", "PHASE", "CONFIG", "MAX_ERR", "DETAIL"});
    table.SetAlign(3, TextTable::Align::kRight);
    for (size_t i = 0; i < shown; ++i) {
      const v1::Measurement* m = rejected[i];
      table.AddRow({v1::VariantStatus_Name(m->status()), FormatPhase(m->phase()),
                    FormatConfig(m->config()),
                    m->max_error() > 0 ? absl::StrFormat("%.3g", m->max_error()) : "-",
                    FirstLine(DetailText(*m), 80)});
    }
    table.Print(out);
  }
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
    std::vector<std::string> dtypes;  // DTypeName gives a new string
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
