#include "client/cli/report_html.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "client/testing/fake_autotune_server.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "web/web_assets.h"

namespace autotune::client {
namespace {

using ::autotune::client::testing::FakeAutotuneServer;
using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Job JobOfTwoProblems() {
  v1::Job job;
  job.set_id("job-9");
  job.set_state(v1::SUCCEEDED);
  v1::ProblemReport& chosen = *job.add_reports();
  chosen.set_family("rmsnorm");
  (*chosen.mutable_problem()->mutable_dims())["rows"] = 64;
  chosen.mutable_problem()->set_dtype(v1::BFLOAT16);
  v1::Entry& entry = *chosen.mutable_entry();
  entry.set_family("rmsnorm");
  entry.set_family_hash("abc123");
  *entry.mutable_problem() = chosen.problem();
  entry.mutable_device()->set_name("NVIDIA H200");
  entry.mutable_device()->set_compute_capability(90);
  (*entry.mutable_config()->mutable_params())["THREADS"] = 256;
  v1::ProblemReport& failed = *job.add_reports();
  failed.set_family("rmsnorm");
  (*failed.mutable_problem()->mutable_dims())["rows"] = 128;
  failed.mutable_problem()->set_dtype(v1::BFLOAT16);
  failed.set_error("every variant was rejected");
  return job;
}

v1::Measurement Screened(int threads, double median_us, v1::VariantStatus status,
                         const std::string& job_id = "job-9") {
  v1::Measurement measurement;
  measurement.set_job_id(job_id);
  measurement.set_family("rmsnorm");
  (*measurement.mutable_config()->mutable_params())["THREADS"] = threads;
  measurement.set_status(status);
  measurement.set_phase(v1::SCREEN);
  measurement.mutable_timing()->set_median_us(median_us);
  return measurement;
}

// The JSON the page holds, read back from the page.
v1::ReportPageData DataOf(const std::string& page) {
  const std::string open = "id=\"autotune-report-data\">";
  const size_t begin = page.find(open) + open.size();
  const size_t end = page.find("</script>", begin);
  v1::ReportPageData data;
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(page.substr(begin, end - begin), &data).ok());
  return data;
}

class ReportHtmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(server_.Start());
    ClientOptions options;
    options.address = server_.address();
    ASSERT_OK_AND_ASSIGN(client_, Client::Connect(options));
  }
  FakeAutotuneServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ReportHtmlTest, EveryProblemWithAnEntryGetsItsMeasurements) {
  *server_.answers().entry.add_measurements() = Screened(128, 12.5, v1::OK);
  *server_.answers().entry.add_measurements() = Screened(256, 10.25, v1::OK);
  *server_.answers().entry.add_measurements() = Screened(1024, 0, v1::WRONG_RESULT);
  *server_.answers().entry.add_measurements() = Screened(128, 14.5, v1::OK, "an-earlier-job");

  ASSERT_OK_AND_ASSIGN(
      const v1::ReportPageData data,
      CollectReportData(*client_, JobOfTwoProblems(), absl::FromUnixSeconds(1796000000)));

  EXPECT_EQ(data.generated_at(), "2026-11-30T00:53:20Z");
  ASSERT_EQ(data.landscapes_size(), 2);
  EXPECT_EQ(data.landscapes(0).measurements_size(), 3) << "only this job's measurements";
  EXPECT_EQ(data.landscapes(1).measurements_size(), 0);
  EXPECT_EQ(data.landscapes(1).error(), "every variant was rejected");
  const v1::GetEntryRequest& asked = server_.calls().get_entry;
  EXPECT_EQ(asked.family(), "rmsnorm");
  EXPECT_EQ(asked.family_hash(), "abc123") << "the version the job tuned, not the current one";
  EXPECT_EQ(asked.device().name(), "NVIDIA H200");
  EXPECT_EQ(asked.problem().dims().at("rows"), 64);
}

TEST_F(ReportHtmlTest, AnEntryInvalidatedSinceSaysSo) {
  server_.answers().status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry");
  ASSERT_OK_AND_ASSIGN(const v1::ReportPageData data,
                       CollectReportData(*client_, JobOfTwoProblems(), absl::Now()));
  EXPECT_THAT(data.landscapes(0).error(), HasSubstr("no longer cached"));
}

TEST_F(ReportHtmlTest, AnyOtherDaemonErrorWritesNoReport) {
  server_.answers().status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "database is gone");
  EXPECT_THAT(CollectReportData(*client_, JobOfTwoProblems(), absl::Now()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rmsnorm rows=64")));
}

TEST(RenderReportHtmlTest, TheDataIsInlinedAndCannotCloseItsScript) {
  v1::ReportPageData data;
  *data.mutable_job() = JobOfTwoProblems();
  data.mutable_job()->mutable_reports(1)->set_error(
      "ptxas: </script><script>alert(1)</script> & more");
  *data.add_landscapes()->add_measurements() = Screened(256, 10.25, v1::OK);
  data.add_landscapes()->set_error("every variant was rejected");

  ASSERT_OK_AND_ASSIGN(const std::string page, RenderReportHtml(data));

  EXPECT_THAT(page, Not(HasSubstr(web::kReportDataPlaceholder)));
  EXPECT_THAT(page, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(page, HasSubstr("ptxas: \\u003c/script"));
  EXPECT_THAT(page, Not(HasSubstr("src=\"http"))) << "the page fetches nothing";
  const v1::ReportPageData read = DataOf(page);
  EXPECT_EQ(read.job().id(), "job-9");
  EXPECT_EQ(read.job().reports(1).error(), data.job().reports(1).error());
  EXPECT_EQ(read.landscapes(0).measurements(0).timing().median_us(), 10.25);
}

}  // namespace
}  // namespace autotune::client
