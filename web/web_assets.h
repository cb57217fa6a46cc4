// The pages autotune serves and writes, built from web/ (our scripts and
// styles, with d3 and Observable Plot pinned in web/package-lock.json) by
// web/build.mjs into one self-contained HTML document each: every script and
// style inline, nothing fetched from the network when a page opens.
//
//   std::string html(web::ReportPageTemplate());
//   html.replace(html.find(web::kReportDataPlaceholder),
//                web::kReportDataPlaceholder.size(), EscapedJson(data));
//
// Constant data: thread-safe, valid for the life of the program.
#ifndef AUTOTUNE_WEB_WEB_ASSETS_H_
#define AUTOTUNE_WEB_WEB_ASSETS_H_

#include "absl/strings/string_view.h"

namespace autotune::web {

// Appears exactly once in ReportPageTemplate(), as the whole text of
// <script type="application/json" id="autotune-report-data">. The writer puts
// the report's JSON in its place, with every '<' written as \u003c so that
// no text in the data can close the script element.
inline constexpr absl::string_view kReportDataPlaceholder = "@@AUTOTUNE_REPORT_DATA@@";

// The warmup report (`autotune warmup --report-html`, `autotune report`).
absl::string_view ReportPageTemplate();

// The daemon's admin page (GET /admin on its HTTP port); it reads the
// daemon's JSON API under /api/ with the caller's bearer token.
absl::string_view AdminPage();

}  // namespace autotune::web

#endif  // AUTOTUNE_WEB_WEB_ASSETS_H_
