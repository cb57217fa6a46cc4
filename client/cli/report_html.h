// The warmup report as one self-contained HTML page: the report table of
// warmup_report.h, and per problem the landscape behind the choice (every
// screened variant's time, coloured by status; the serial candidates with
// their intervals; the winner marked; time against each tunable parameter),
// then a regression chart over the job (new/old median per problem that had
// an entry before). The page is web/web_assets.h's report template with the
// data inlined as JSON: it opens from a file, with no network access.
//
//   ASSIGN_OR_RETURN(ReportPageData data, CollectReportData(client, job, absl::Now()));
//   ASSIGN_OR_RETURN(std::string html, RenderReportHtml(data));
//   RETURN_IF_ERROR(WriteFileAtomically(path, html, "HTML report"));
//
// Thread-safety: RenderReportHtml is a pure function; CollectReportData
// makes calls on `client`, which is thread-safe.
#ifndef AUTOTUNE_CLIENT_CLI_REPORT_HTML_H_
#define AUTOTUNE_CLIENT_CLI_REPORT_HTML_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "proto/autotune.pb.h"
#include "proto/report_page.pb.h"

namespace autotune::client {

// The report's data for `job` (finished, with its reports): per report with
// an entry, the measurements behind it (GetEntry for the entry's family
// version, problem and device) that the job which chose it made (this job;
// for a cached problem, the earlier one), or all of them when none were. A report without an entry
// gets its error as the landscape's error; so does one whose entry is gone from the cache
// (NOT_FOUND: invalidated since). Any other error of the daemon is
// returned: an incomplete report is not written.
absl::StatusOr<v1::ReportPageData> CollectReportData(Client& client, const v1::Job& job,
                                                     absl::Time generated_at);

// The HTML page of `data`. Every '<' in the inlined JSON is written
// \u003c, so no text in the data (an error, a compiler log) can end the
// script element that holds it. INTERNAL when the data cannot be printed
// as JSON.
absl::StatusOr<std::string> RenderReportHtml(const v1::ReportPageData& data);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_REPORT_HTML_H_
