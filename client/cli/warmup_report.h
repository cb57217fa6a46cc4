// The report of a finished warmup job: per problem the chosen config, its
// time and throughput against the device's measured copy rate, the speedup
// over the family's default config and what changed against the cache; then
// the variants' counts by status and where the time went. Three renderings
// of the same rows: text for the terminal, GitHub-flavoured Markdown for a CI
// summary, CSV for spreadsheets and scripts (`autotune warmup --json` prints
// the Job message itself).
//
//   io.out << RenderReportText(job);
//   RETURN_IF_ERROR(WriteFileAtomically(path, RenderReportCsv(job), "CSV report"));
//
// What is read: job.id, state, error, counts, timing and, per report, family,
// problem, entry (config, timing.median_us, achieved_gbps, achieved_tflops,
// limits.copy_gbps, tie, tied, contended, rounds, noise, candidates), cached,
// error, previous (timing.median_us), previous_ratio, previous_differs,
// regression, speedup, status_counts and screened. Problems keep the order of
// job.reports. A number the daemon left at 0 means unknown and prints blank.
//
// Pure functions of the message: no I/O, thread-safe.
#ifndef AUTOTUNE_CLIENT_CLI_WARMUP_REPORT_H_
#define AUTOTUNE_CLIENT_CLI_WARMUP_REPORT_H_

#include <string>

#include "proto/autotune.pb.h"

namespace autotune::client {

// A table with one row per problem (FAMILY DIMS DTYPE CONFIG MEDIAN_US GB/S
// %LIMIT TFLOP/S SPEEDUP FLAGS), where FLAGS holds "tie(N)", "bound(0.31%)"
// (Entry.bound, BoundFlag), "CONTENDED", "THROTTLED",
// "cached", "REGRESSION", or the error of a problem without an entry; then,
// when some problem had a previous entry, "Changes against the cache" (old and
// new median, their ratio, what differs); then a "variants:" line with the
// counts by status summed over the reports ("OK 2,900 · WRONG_RESULT 12") and
// a "time:" line from job.timing. The job's state and error are the caller's
// to print (the CLI says them in its status line and its exit message).
std::string RenderReportText(const v1::Job& job);

// The same as a Markdown document: a "## Warmup job ID: STATE" heading, the
// job's counts and error, the tables with `|`, `*`, `<`... escaped, and the
// two summary lines.
std::string RenderReportMarkdown(const v1::Job& job);

// One header row and one row per problem, with the columns
//   family,dims,dtype,config,median_us,gbps,limit_pct,tflops,speedup,tie,
//   tied,contended,cached,previous_median_us,ratio,regression,rounds,noise,
//   candidates,error
// Fields holding a comma, a quote or a line break are quoted as RFC 4180
// says (quotes doubled); lines end in "\n". Numbers are plain, without units
// or thousands separators (limit_pct in percent, noise a fraction); booleans
// are "true" or "false"; a problem without an entry leaves the entry's
// columns empty, and unknown numbers (0) are empty too.
std::string RenderReportCsv(const v1::Job& job);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_WARMUP_REPORT_H_
