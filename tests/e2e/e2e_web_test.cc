// End to end: the daemon's HTTP port (service/rpc/http_server.h) with the admin
// API and page (service/rpc/admin_api.h), and the HTML warmup report
// (client/cli/report_html.h), from the real autotuned and the real CLI. Jobs are
// compiled with NVRTC and measured by the stand-in profile worker
// (service/testing/fake_profile_worker.cc). The pages are then opened in
// headless Chromium by web/tests/*.mjs, which check what is drawn and keep a
// screenshot in AUTOTUNE_ARTIFACTS_DIR.
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/token.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"
#include "service/testing/worker_hold.h"
#include "tests/support/daemon_test.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kPageProblems = 3;

class WebEndToEndTest : public DaemonTest {
 protected:
  void SetUp() override {
    // Two fast variants, one that computes wrong results, one unsupported.
    ASSERT_OK(WriteModesFamily(dir_.path(), "[0, 1, 2, 6]", "[256, 512, 1024]"));
    for (const char* role : {"reader", "admin"}) {
      ASSERT_OK_AND_ASSIGN(token_[role], NewToken());
      ASSERT_OK(WriteFileAtomically(Path(absl::StrCat(role, ".token")), token_[role] + "\n"));
    }
    ASSERT_OK(WriteFileAtomically(
        Path("tokens"), absl::StrCat("reader dash ", TokenHash(token_["reader"]), "\nadmin ops ",
                                     TokenHash(token_["admin"]), "\n")));
    ASSERT_OK(StartDaemon());
    ASSERT_EQ(Cli({"register", Path("modes.textproto")}).exit_code, 0);
  }

  // The daemon on this test's database, its HTTP port in port_.
  absl::Status StartDaemon() {
    RETURN_IF_ERROR(DaemonTest::StartDaemon(
        {"--kernels", "none", "--compile-workers", "2", "--profile-worker",
         FAKE_PROFILE_WORKER_PATH, "--lease-dir", Path("leases"), "--http-listen", "127.0.0.1:0",
         "--token-file", Path("tokens"), "--audit-log", Path("audit.log")}));
    port_ = HttpPort();
    if (port_ == 0) return absl::InternalError("no HTTP port in the log: " + daemon_->Stderr());
    return absl::OkStatus();
  }

  // The port in "metrics served on http://127.0.0.1:PORT/metrics", of the
  // daemon started last (they share one log).
  int HttpPort() const {
    const std::string log = daemon_->Stderr();
    const std::string marker = "served on http://127.0.0.1:";
    const size_t at = log.rfind(marker);
    int port = 0;
    if (at == std::string::npos) return 0;
    const std::string rest = log.substr(at + marker.size());
    return absl::SimpleAtoi(rest.substr(0, rest.find('/')), &port) ? port : 0;
  }

  HttpAnswer Get(const std::string& path, const std::string& role) {
    std::vector<std::string> headers;
    if (!role.empty()) headers.push_back("Authorization: Bearer " + token_[role]);
    return HttpCall(port_, "GET", path, headers);
  }

  HttpAnswer Invalidate(const std::string& role, const std::string& content_type,
                        const std::string& body) {
    return HttpCall(port_, "POST", "/api/invalidate",
                    {"Authorization: Bearer " + token_[role], "Content-Type: " + content_type},
                    body);
  }

  int64_t EntryCount() {
    const HttpAnswer answer = Get("/api/entries", "reader");
    v1::ListEntriesResponse entries;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(answer.body, &entries).ok())
        << answer.body;
    return entries.total();
  }

  // node SCRIPT ARGS..., with the pinned packages of the build; what the
  // script says it checked goes to the test's output.
  CommandResult Node(const std::string& script, std::vector<std::string> args) {
    args.insert(args.begin(), {AUTOTUNE_NODE, std::string(AUTOTUNE_WEB_TESTS_DIR) + "/" + script,
                               "--node-modules", AUTOTUNE_WEB_NODE_MODULES});
    CommandResult result = RunCommand(args, absl::Minutes(2));
    std::cout << result.out;
    return result;
  }

  static std::string Artifact(const std::string& name) {
    const std::string dir = EnvironmentOr("AUTOTUNE_ARTIFACTS_DIR", AUTOTUNE_ARTIFACTS_DIR);
    EXPECT_OK(MakeDirectories(dir, 0755));
    return dir + "/" + name;
  }

  std::map<std::string, std::string> token_;
  int port_ = 0;
};

TEST_F(WebEndToEndTest, TheApiAnswersWithRolesAndInvalidatesOnlyForAnAdmin) {
  const CommandResult warmup = Cli({"warmup", Path("modes.manifest")});
  ASSERT_EQ(warmup.exit_code, 0) << warmup.out << warmup.err;
  ASSERT_EQ(EntryCount(), kPageProblems);

  EXPECT_EQ(Get("/api/entries", "").status, 401) << "no token, and --anonymous-role none";
  const HttpAnswer whoami = Get("/api/whoami", "reader");
  EXPECT_EQ(whoami.status, 200);
  EXPECT_THAT(whoami.body, HasSubstr("\"role\":\"reader\""));
  EXPECT_THAT(whoami.body, HasSubstr("\"caller\":\"token:dash\""));

  const HttpAnswer entry =
      Get("/api/entry?family=modes&dims=n%3D512&dtype=FLOAT32&device=", "reader");
  ASSERT_EQ(entry.status, 200) << entry.body;
  v1::GetEntryResponse shown;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(entry.body, &shown).ok());
  EXPECT_EQ(shown.entry().config().params().at("MODE"), 0);
  EXPECT_GE(shown.measurements_size(), 4) << "every variant screened, and the candidates";

  const HttpAnswer jobs = Get("/api/jobs", "reader");
  ASSERT_EQ(jobs.status, 200);
  EXPECT_THAT(jobs.body, HasSubstr("\"state\":\"SUCCEEDED\""));
  const HttpAnswer devices = Get("/api/devices", "reader");
  ASSERT_EQ(devices.status, 200);
  EXPECT_THAT(devices.body, HasSubstr("\"started\":true"));
  EXPECT_THAT(devices.body, HasSubstr("\"contention\":\"none\"")) << "the serial phase probed";

  const std::string body =
      R"({"filter":{"family":"modes","problem":{"dims":{"n":"512"},"dtype":"FLOAT32"}}})";
  const HttpAnswer refused = Invalidate("reader", "application/json", body);
  EXPECT_EQ(refused.status, 403);
  EXPECT_THAT(refused.body, HasSubstr("PERMISSION_DENIED"));
  EXPECT_EQ(Invalidate("admin", "application/x-www-form-urlencoded", body).status, 400)
      << "a cross-site form cannot invalidate";
  EXPECT_EQ(Invalidate("admin", "application/json", "{not json").status, 400);
  // The media type exactly: "application/jsonfoo" is not JSON (found on e01f360).
  EXPECT_EQ(Invalidate("admin", "application/jsonfoo", body).status, 400);
  EXPECT_EQ(EntryCount(), kPageProblems) << "nothing refused changed anything";

  const HttpAnswer removed = Invalidate("admin", "application/json", body);
  ASSERT_EQ(removed.status, 200) << removed.body;
  EXPECT_THAT(removed.body, HasSubstr("\"entries_removed\":\"1\""));
  EXPECT_EQ(EntryCount(), kPageProblems - 1);
  ASSERT_OK_AND_ASSIGN(const std::string audit, ReadFile(Path("audit.log")));
  EXPECT_THAT(audit, HasSubstr("(HTTP)"));
  EXPECT_THAT(audit, HasSubstr("token:ops"));

  EXPECT_EQ(Get("/api/nothing", "reader").status, 404);
  EXPECT_EQ(Get("/elsewhere", "").status, 404);
  EXPECT_EQ(daemon_->Stop(), 0);
}

TEST_F(WebEndToEndTest, TheAdminPageIsSelfContained) {
  const HttpAnswer page = Get("/admin", "");
  ASSERT_EQ(page.status, 200);
  EXPECT_THAT(page.headers, HasSubstr("Content-Security-Policy: default-src 'none'"));
  EXPECT_THAT(page.headers, HasSubstr("connect-src 'self'"));
  EXPECT_THAT(page.body, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(page.body, Not(HasSubstr("<script src=")));
  EXPECT_THAT(page.body, Not(HasSubstr("<link rel=\"stylesheet\" href=")));
  const HttpAnswer metrics = Get("/metrics", "");
  EXPECT_EQ(metrics.status, 200) << "scrapers present no token";
  EXPECT_THAT(metrics.body, HasSubstr("autotune_database_up 1"));
}

// The report and the admin page in a real browser.
TEST_F(WebEndToEndTest, TheReportAndTheAdminPageRenderInChromium) {
  ASSERT_EQ(Cli({"warmup", Path("modes.manifest")}).exit_code, 0);
  // Again, so that every problem has a previous entry to compare with.
  const std::string html = Path("report.html");
  const CommandResult warmup =
      Cli({"warmup", Path("modes.manifest"), "--retune", "--report-html", html});
  ASSERT_EQ(warmup.exit_code, 0) << warmup.out << warmup.err;

  const CommandResult report =
      Node("report_page.mjs",
           {"--report", html, "--screenshot", Artifact("warmup-report.png"), "--expect-problems",
            absl::StrCat(kPageProblems), "--expect-winners", absl::StrCat(kPageProblems)});
  EXPECT_EQ(report.exit_code, 0) << report.out << report.err;

  const CommandResult admin =
      Node("admin_page.mjs", {"--url", absl::StrCat("http://127.0.0.1:", port_, "/admin"),
                              "--token-file", Path("admin.token"), "--reader-token-file",
                              Path("reader.token"), "--expect-entries", absl::StrCat(kPageProblems),
                              "--invalidate", "--screenshot", Artifact("admin-page.png")});
  EXPECT_EQ(admin.exit_code, 0) << admin.out << admin.err;
  EXPECT_EQ(EntryCount(), kPageProblems - 1) << "the page's invalidation went through";
}

// Live progress: the page, opened while a job runs, follows it by itself.
TEST_F(WebEndToEndTest, TheAdminPageFollowsARunningJob) {
  ASSERT_EQ(Cli({"warmup", Path("modes.manifest")}).exit_code, 0);
  // Again, held where the page must see it however long the browser takes:
  // at the second screened variant until the page shows the job running,
  // then at the sixth until it shows the progress moved. The page sees the
  // job as stored, and a running job is stored on progress at most once a
  // second: held a second at the first variant, the job is then stored
  // SCREENING; held a second at the second, its next step is stored too.
  EXPECT_EQ(daemon_->Stop(), 0);
  WorkerHold screening(Path("hold-screening"), "screen", 1);
  WorkerHold running(Path("hold-running"), "screen", 2);
  WorkerHold moved(Path("hold-moved"), "screen", 6);
  setenv("FAKE_WORKER_HOLD",
         absl::StrCat(screening.spec(), ",", running.spec(), ",", moved.spec()).c_str(), 1);
  const absl::Status started = StartDaemon();
  unsetenv("FAKE_WORKER_HOLD");
  ASSERT_OK(started);
  std::thread warmup([this] { Cli({"warmup", Path("modes.manifest"), "--retune"}); });
  const bool screened = screening.WaitHeld();
  absl::SleepFor(absl::Seconds(1));
  screening.Go();
  const bool held = running.WaitHeld();
  const v1::Job listed = WaitForNewestJob(
      daemon_->address(), [](const v1::Job& job) { return job.state() == v1::SCREENING; },
      absl::Minutes(1));
  EXPECT_TRUE(screened && held) << "the job never screened" << daemon_->Stderr();
  EXPECT_EQ(listed.state(), v1::SCREENING);
  absl::SleepFor(absl::Seconds(1));

  const CommandResult admin =
      Node("admin_page.mjs",
           {"--url", absl::StrCat("http://127.0.0.1:", port_, "/admin"), "--token-file",
            Path("reader.token"), "--expect-running", "--go-files",
            absl::StrCat(running.go_file(), ",", moved.go_file()), "--expect-entries",
            absl::StrCat(kPageProblems), "--screenshot", Artifact("admin-page-live.png")});
  // Whatever the page did, the job ends.
  running.Go();
  moved.Go();
  warmup.join();
  EXPECT_EQ(admin.exit_code, 0) << admin.out << admin.err;
  EXPECT_THAT(admin.out, HasSubstr("followed live"));
}

}  // namespace
}  // namespace autotune::testing
