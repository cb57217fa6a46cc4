#include "client/cli/report_html.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "proto/json.h"
#include "proto/problem.h"
#include "web/web_assets.h"

namespace autotune::client {

absl::StatusOr<v1::ReportPageData> CollectReportData(Client& client, const v1::Job& job,
                                                     absl::Time generated_at) {
  v1::ReportPageData data;
  data.set_generated_at(Timestamp(generated_at));
  *data.mutable_job() = job;
  for (const v1::ProblemReport& report : job.reports()) {
    v1::ProblemLandscape& landscape = *data.add_landscapes();
    if (!report.has_entry()) {
      landscape.set_error(report.error().empty() ? "no entry was chosen" : report.error());
      continue;
    }
    v1::GetEntryRequest request;
    request.set_family(report.entry().family());
    request.set_family_hash(report.entry().family_hash());
    *request.mutable_problem() = report.entry().problem();
    *request.mutable_device() = report.entry().device();
    absl::StatusOr<v1::GetEntryResponse> response = client.GetEntry(request);
    if (absl::IsNotFound(response.status())) {
      landscape.set_error(
          absl::StrCat("the entry is no longer cached (", response.status().message(), ")"));
      continue;
    }
    if (!response.ok()) {
      return absl::Status(
          response.status().code(),
          absl::StrCat("reading the measurements of ", report.family(), " ",
                       FormatDims(report.problem().dims()), ": ", response.status().message()));
    }
    // The cache keeps the measurements of every job that tuned this
    // problem: show those of the job that chose the entry (this one, or the
    // earlier one a cached problem kept), all of them when none match.
    const std::string& chooser = report.cached() ? report.entry().job_id() : job.id();
    for (v1::Measurement& measurement : *response->mutable_measurements()) {
      if (measurement.job_id() == chooser) {
        *landscape.add_measurements() = std::move(measurement);
      }
    }
    if (landscape.measurements().empty()) {
      *landscape.mutable_measurements() = std::move(*response->mutable_measurements());
    }
  }
  return data;
}

absl::StatusOr<std::string> RenderReportHtml(const v1::ReportPageData& data) {
  ASSIGN_OR_RETURN(const std::string json, MessageJson(data));
  std::string page(web::ReportPageTemplate());
  const std::string placeholder(web::kReportDataPlaceholder);
  page.replace(page.find(placeholder), placeholder.size(),
               absl::StrReplaceAll(json, {{"<", "\\u003c"}}));
  return page;
}

}  // namespace autotune::client
