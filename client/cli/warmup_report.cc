#include "client/cli/warmup_report.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

constexpr absl::string_view kDot = " \u00b7 ";  // " · "

using Row = std::vector<std::string>;

// A table as both renderings need it: header, rows, right-aligned columns.
struct Table {
  Row header;
  std::vector<size_t> right;
  std::vector<Row> rows;
};

// The % of the device's measured copy rate; 0 when either is unknown.
double LimitPercent(const v1::Entry& entry) {
  const double copy = entry.limits().copy_gbps();
  const double achieved = entry.timing().achieved_gbps();
  return copy > 0 && achieved > 0 ? 100 * achieved / copy : 0;
}

// `format` of `value`, or blank when the value is unknown (0).
std::string Known(const absl::FormatSpec<double>& format, double value) {
  return value > 0 ? absl::StrFormat(format, value) : "";
}

Table SummaryTable(const v1::Job& job) {
  Table table;
  table.header = {"FAMILY", "DIMS",   "DTYPE",   "CONFIG",  "MEDIAN_US",
                  "GB/S",   "%LIMIT", "TFLOP/S", "SPEEDUP", "FLAGS"};
  table.right = {4, 5, 6, 7, 8};
  for (const v1::ProblemReport& report : job.reports()) {
    Row row = {report.family(), FormatDims(report.problem().dims()),
               DTypeName(report.problem().dtype())};
    std::vector<std::string> flags;
    if (report.has_entry()) {
      const v1::Entry& entry = report.entry();
      const v1::TimingStats& timing = entry.timing();
      row.push_back(FormatConfig(entry.config()));
      row.push_back(Known("%.2f", timing.median_us()));
      row.push_back(Known("%.1f", timing.achieved_gbps()));
      row.push_back(Known("%.0f%%", LimitPercent(entry)));
      row.push_back(Known("%.2f", timing.achieved_tflops()));
      if (entry.tie()) flags.push_back(absl::StrCat("tie(", entry.tied(), ")"));
      if (!entry.choice().empty()) flags.push_back(BoundFlag(entry.bound()));
      if (entry.contended()) flags.push_back("CONTENDED");
      if (entry.throttled()) flags.push_back("THROTTLED");
    } else {
      row.resize(8);
    }
    row.push_back(Known("%.2fx", report.speedup()));
    if (report.cached()) flags.push_back("cached");
    if (report.regression()) flags.push_back("REGRESSION");
    if (!report.kept_clean().empty()) flags.push_back("kept-clean-entry");
    // The screen ran beside another process: it only ranks, but it is said.
    if (!report.screen_contention().empty()) flags.push_back("screen-contended");
    if (!report.has_entry()) {
      if (!report.error().empty()) {
        flags.push_back(absl::StrCat("error: ", FirstLine(WithWarmupFlags(report.error()), 200)));
      } else if (!job.spec().options().compile_only()) {
        flags.push_back("no entry");
      }
    }
    row.push_back(absl::StrJoin(flags, " "));
    table.rows.push_back(std::move(row));
  }
  return table;
}

// The problems that had an entry before this job; no rows when none did.
Table ChangesTable(const v1::Job& job) {
  Table table;
  table.header = {"FAMILY", "DIMS", "DTYPE", "OLD_US", "NEW_US", "OLD/NEW", "DIFFERS", "FLAGS"};
  table.right = {3, 4, 5};
  for (const v1::ProblemReport& report : job.reports()) {
    if (!report.has_previous()) continue;
    table.rows.push_back({report.family(), FormatDims(report.problem().dims()),
                          DTypeName(report.problem().dtype()),
                          Known("%.2f", report.previous().timing().median_us()),
                          Known("%.2f", report.entry().timing().median_us()),
                          Known("%.3fx", report.previous_ratio()), report.previous_differs(),
                          report.regression() ? "REGRESSION" : ""});
  }
  return table;
}

// "variants: OK 2,900 · WRONG_RESULT 12 (2,900 screened; 2,800 screens
// carried from an older family version)": statuses in the
// enum's order, names the client does not know after them; "" when the
// reports count nothing.
std::string StatusLine(const v1::Job& job) {
  std::map<std::string, int64_t> by_name;
  int64_t screened = 0;
  int64_t carried = 0;
  for (const v1::ProblemReport& report : job.reports()) {
    for (const auto& [name, count] : report.status_counts()) by_name[name] += count;
    screened += report.screened();
    carried += report.screens_carried();
  }
  std::map<std::pair<int, std::string>, int64_t> ordered;
  for (const auto& [name, count] : by_name) {
    v1::VariantStatus status;
    const int rank = v1::VariantStatus_Parse(name, &status) ? static_cast<int>(status) : 1 << 20;
    ordered[{rank, name}] = count;
  }
  std::vector<std::string> parts;
  for (const auto& [key, count] : ordered) {
    parts.push_back(absl::StrCat(key.second, " ", FormatCount(count)));
  }
  if (parts.empty()) return "";
  std::string line = absl::StrCat("variants: ", absl::StrJoin(parts, kDot));
  if (screened > 0) {
    absl::StrAppend(&line, " (", FormatCount(screened), " screened");
    if (carried > 0) {
      absl::StrAppend(&line, "; ", FormatCount(carried),
                      " screens carried from an older family version");
    }
    absl::StrAppend(&line, ")");
  }
  return line;
}

// "time: compile 12 s · screen 41 s · serial 30 s · waited 5.0 s · total
// 1 min 28 s"; "" without job.timing.
std::string TimingLine(const v1::Job& job) {
  if (!job.has_timing()) return "";
  const v1::JobTiming& timing = job.timing();
  std::vector<std::string> parts = {absl::StrCat("compile ", FormatSeconds(timing.compile_s())),
                                    absl::StrCat("screen ", FormatSeconds(timing.screen_s())),
                                    absl::StrCat("serial ", FormatSeconds(timing.serial_s()))};
  if (timing.waited_s() > 0) {
    parts.push_back(absl::StrCat("waited ", FormatSeconds(timing.waited_s())));
  }
  parts.push_back(absl::StrCat("total ", FormatSeconds(timing.elapsed_s())));
  return absl::StrCat("time: ", absl::StrJoin(parts, kDot));
}

// "search: model on 2 problems: 768 of 13,808 variants measured (5.6%),
// best found after 131 and 160": the strategies that ran, and how much of
// the spaces they measured; "" when no report says.
std::string SearchLine(const v1::Job& job) {
  std::map<std::string, int64_t> problems;  // by strategy
  int64_t space = 0;
  int64_t measured = 0;
  std::vector<std::string> found;
  for (const v1::ProblemReport& report : job.reports()) {
    if (!report.has_search()) continue;
    const v1::SearchReport& search = report.search();
    ++problems[absl::AsciiStrToLower(v1::SearchStrategy_Name(search.strategy()))];
    space += search.space();
    measured += search.measured();
    if (search.best_size() > 0 && found.size() < 8) {
      found.push_back(FormatCount(search.best(search.best_size() - 1).measured()));
    }
  }
  if (problems.empty()) return "";
  std::vector<std::string> strategies;
  for (const auto& [name, count] : problems) {
    strategies.push_back(
        absl::StrCat(name, " on ", FormatCount(count), " problem", count == 1 ? "" : "s"));
  }
  std::string line =
      absl::StrCat("search: ", absl::StrJoin(strategies, kDot), ": ", FormatCount(measured), " of ",
                   FormatCount(space), " variants measured");
  if (space > 0 && measured < space) {
    absl::StrAppend(&line, absl::StrFormat(" (%.1f%%)", 100.0 * static_cast<double>(measured) /
                                                            static_cast<double>(space)));
  }
  if (!found.empty()) {
    absl::StrAppend(&line, ", best found after ", absl::StrJoin(found, ", "));
  }
  return line;
}

// "screen: 19.1 ms a variant over 2,940 (their GPU time 5.6 ms): load 1.1
// · validate 3.0 · graph 5.2 · warm-up 2.2 · samples 3.4 · task set-up 0.4
// · cubins 0.1 · other 3.7 (storing 0.3 alongside)": where the screens'
// wall time went, per variant measured now (ScreenTime); "" when no report
// has one.
std::string ScreenTimeLine(const v1::Job& job) {
  // Every field is a count or a sum of seconds: added up field by field.
  v1::ScreenTime sum;
  const google::protobuf::Reflection* reflection = sum.GetReflection();
  const google::protobuf::Descriptor* descriptor = sum.GetDescriptor();
  for (const v1::ProblemReport& report : job.reports()) {
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* field = descriptor->field(i);
      if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE) {
        reflection->SetDouble(
            &sum, field,
            reflection->GetDouble(sum, field) + reflection->GetDouble(report.screen_time(), field));
      } else if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT32) {
        reflection->SetInt32(
            &sum, field,
            reflection->GetInt32(sum, field) + reflection->GetInt32(report.screen_time(), field));
      }
    }
  }
  if (sum.variants() == 0) return "";
  const double n = sum.variants();
  auto ms = [n](double seconds) { return absl::StrFormat("%.1f", seconds * 1000 / n); };
  const double other = sum.wall_s() - sum.cubins_s() - sum.setup_s() - sum.load_s() -
                       sum.validate_s() - sum.graph_s() - sum.warmup_s() - sum.samples_s();
  return absl::StrCat("screen: ", ms(sum.wall_s()), " ms a variant over ",
                      FormatCount(sum.variants()), " (their GPU time ", ms(sum.gpu_s()),
                      " ms): load ", ms(sum.load_s()), kDot, "validate ", ms(sum.validate_s()),
                      kDot, "graph ", ms(sum.graph_s()), kDot, "warm-up ", ms(sum.warmup_s()), kDot,
                      "samples ", ms(sum.samples_s()), kDot, "task set-up ", ms(sum.setup_s()),
                      kDot, "cubins ", ms(sum.cubins_s()), kDot, "other ", ms(std::max(0.0, other)),
                      " (storing ", ms(sum.store_s()), " alongside)");
}

// What a compile-only job did and did not do, and what lookups answer after
// it; "" for a job that measured.
std::string CompileOnlyLine(const v1::Job& job) {
  if (!job.spec().options().compile_only()) return "";
  const v1::JobCounts& counts = job.counts();
  return absl::StrCat(
      "compile-only", job.arch().empty() ? "" : absl::StrCat(" for ", job.arch()), ": ",
      FormatCount(counts.compiled()), " variants compiled, ",
      FormatCount(counts.compile_cache_hits()), " found compiled before, ",
      FormatCount(counts.compile_errors()),
      " failed; nothing was measured, so no entry was added or changed: lookups answer as "
      "before (MISS no-entry for a problem never measured here), and a warmup that measures "
      "reuses these compiles");
}

std::vector<std::string> SummaryLines(const v1::Job& job) {
  std::vector<std::string> lines;
  for (std::string line : {CompileOnlyLine(job), StatusLine(job), SearchLine(job),
                           ScreenTimeLine(job), TimingLine(job)}) {
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

void PrintText(const Table& table, std::ostream& out) {
  TextTable text(table.header);
  for (size_t column : table.right) text.SetAlign(column, TextTable::Align::kRight);
  for (const Row& row : table.rows) text.AddRow(row);
  text.Print(out);
}

// Text that reads as itself inside Markdown: line breaks become spaces and
// the characters Markdown would act on are backslash-escaped. '_' inside a
// word (BLOCK_V) cannot start emphasis and '>' only quotes at a line's
// start, so both are left alone where they are harmless.
std::string MarkdownText(absl::string_view text) {
  std::string escaped;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n' || c == '\r' || c == '\t') {
      escaped += ' ';
      continue;
    }
    const bool inside_word = i > 0 && i + 1 < text.size() && absl::ascii_isalnum(text[i - 1]) &&
                             absl::ascii_isalnum(text[i + 1]);
    if ((c == '_' && !inside_word) ||
        absl::string_view("\\`*|<[]&~").find(c) != absl::string_view::npos) {
      escaped += '\\';
    }
    escaped += c;
  }
  return escaped;
}

void PrintMarkdown(const Table& table, std::ostream& out) {
  auto print_row = [&out](const Row& row) {
    out << "|";
    for (const std::string& cell : row) out << " " << MarkdownText(cell) << " |";
    out << "\n";
  };
  print_row(table.header);
  out << "|";
  for (size_t i = 0; i < table.header.size(); ++i) {
    const bool right = std::find(table.right.begin(), table.right.end(), i) != table.right.end();
    out << (right ? " ---: |" : " --- |");
  }
  out << "\n";
  for (const Row& row : table.rows) print_row(row);
}

// A field as RFC 4180 writes it: quoted, quotes doubled, when it holds a
// comma, a quote or a line break.
std::string CsvField(absl::string_view text) {
  if (text.find_first_of(",\"\r\n") == absl::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

// Plain numbers; 0, which the messages use for unknown, is empty.
std::string CsvNumber(double value) { return value != 0 ? absl::StrCat(value) : ""; }
std::string CsvBool(bool value) { return value ? "true" : "false"; }

}  // namespace

std::string RenderReportText(const v1::Job& job) {
  std::ostringstream out;
  // A compile-only job has nothing per problem to show but its errors.
  Table summary = SummaryTable(job);
  if (job.spec().options().compile_only()) summary.rows.clear();
  if (!summary.rows.empty()) PrintText(summary, out);
  const Table changes = ChangesTable(job);
  if (!changes.rows.empty()) {
    out << "\nChanges against the cache\n";
    PrintText(changes, out);
  }
  const std::vector<std::string> lines = SummaryLines(job);
  if (!lines.empty() && !summary.rows.empty()) out << "\n";
  for (const std::string& line : lines) out << line << "\n";
  return out.str();
}

std::string RenderReportMarkdown(const v1::Job& job) {
  std::ostringstream out;
  out << "## Warmup job " << MarkdownText(job.id()) << ": " << v1::JobState_Name(job.state())
      << "\n\n"
      << MarkdownText(FormatJobCounts(job.counts())) << "\n";
  if (!job.error().empty()) {
    // Verbatim, lines kept (compile errors come grouped over several lines),
    // in a fence longer than any run of backticks inside.
    size_t longest = 0;
    size_t run = 0;
    for (char c : job.error()) {
      run = c == '`' ? run + 1 : 0;
      longest = std::max(longest, run);
    }
    const std::string fence(std::max<size_t>(3, longest + 1), '`');
    out << "\n**Error:**\n\n" << fence << "\n" << job.error() << "\n" << fence << "\n";
  }
  const Table summary = SummaryTable(job);
  out << "\n";
  if (job.spec().options().compile_only()) {
    // Nothing was measured: the summary lines say what was compiled.
  } else if (summary.rows.empty()) {
    out << "No per-problem reports.\n";
  } else {
    PrintMarkdown(summary, out);
  }
  const Table changes = ChangesTable(job);
  if (!changes.rows.empty()) {
    out << "\n### Changes against the cache\n\n";
    PrintMarkdown(changes, out);
  }
  const std::vector<std::string> lines = SummaryLines(job);
  if (!lines.empty()) out << "\n";
  for (const std::string& line : lines) out << "- " << MarkdownText(line) << "\n";
  return out.str();
}

std::string RenderReportCsv(const v1::Job& job) {
  std::string csv =
      "family,dims,dtype,config,median_us,gbps,limit_pct,tflops,speedup,tie,tied,contended,"
      "cached,previous_median_us,ratio,regression,rounds,noise,candidates,bound,worker_processes,"
      "throttled,error\n";
  for (const v1::ProblemReport& report : job.reports()) {
    std::vector<std::string> fields = {report.family(), FormatDims(report.problem().dims()),
                                       DTypeName(report.problem().dtype())};
    const v1::Entry& entry = report.entry();
    const bool has_entry = report.has_entry();
    auto of_entry = [has_entry](std::string field) { return has_entry ? field : ""; };
    fields.push_back(of_entry(FormatConfig(entry.config())));
    fields.push_back(CsvNumber(entry.timing().median_us()));
    fields.push_back(CsvNumber(entry.timing().achieved_gbps()));
    fields.push_back(CsvNumber(LimitPercent(entry)));
    fields.push_back(CsvNumber(entry.timing().achieved_tflops()));
    fields.push_back(CsvNumber(report.speedup()));
    fields.push_back(of_entry(CsvBool(entry.tie())));
    fields.push_back(CsvNumber(entry.tied()));
    fields.push_back(of_entry(CsvBool(entry.contended())));
    fields.push_back(CsvBool(report.cached()));
    fields.push_back(CsvNumber(report.previous().timing().median_us()));
    fields.push_back(CsvNumber(report.previous_ratio()));
    fields.push_back(CsvBool(report.regression()));
    fields.push_back(CsvNumber(entry.rounds()));
    fields.push_back(CsvNumber(entry.noise()));
    fields.push_back(CsvNumber(entry.candidates()));
    // 0 is a bound (the fastest beyond doubt), not an unknown.
    fields.push_back(of_entry(entry.choice().empty() ? "" : absl::StrCat(entry.bound())));
    fields.push_back(CsvNumber(entry.worker_processes()));
    fields.push_back(of_entry(CsvBool(entry.throttled())));
    fields.push_back(report.error());
    for (std::string& field : fields) field = CsvField(field);
    absl::StrAppend(&csv, absl::StrJoin(fields, ","), "\n");
  }
  return csv;
}

}  // namespace autotune::client
