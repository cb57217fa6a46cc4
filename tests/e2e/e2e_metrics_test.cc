// End to end: the daemon's Prometheus metrics (service/rpc/metrics.h), scraped
// over HTTP from the real autotuned and checked against the calls that made
// them.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "client/bundle.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;

// The body of GET /metrics at 127.0.0.1:`port`; empty when it fails.
std::string Scrape(int port) { return HttpCall(port, "GET", "/metrics").body; }

// "name{labels}" -> value, for every sample line of a scrape.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) {
      continue;
    }
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

// The port in the daemon's "metrics served on http://127.0.0.1:PORT/metrics".
int MetricsPort(const Daemon& daemon) {
  const std::string log = daemon.Stderr();
  const std::string marker = "metrics served on http://127.0.0.1:";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return 0;
  int port = 0;
  const std::string rest = log.substr(at + marker.size());
  return absl::SimpleAtoi(rest.substr(0, rest.find('/')), &port) ? port : 0;
}

TEST(MetricsEndToEndTest, ScrapedCountsFollowTheCallsThatMadeThem) {
  TempDir dir;
  Daemon daemon(dir.path(),
                {"--kernels", "none", "--gpus", "none", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_OK(daemon.Start());
  const int port = MetricsPort(daemon);
  ASSERT_GT(port, 0) << daemon.Stderr();

  std::map<std::string, double> before = Samples(Scrape(port));
  EXPECT_EQ(before["autotune_database_up"], 1);
  EXPECT_EQ(before["autotune_cache_entries"], 0);
  EXPECT_EQ(before["autotune_lookups_total{result=\"exact\"}"], 0);

  SampleBundleOptions options;
  options.entries = QuickstartEntries();  // vector_scale bf16 n=4096, batch 1, 8, 64
  options.cubin_kind = CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = 1000;
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, MakeSampleBundle(options));
  ASSERT_OK(client::WriteBundleFile(dir.File("sample.json"), bundle));
  CommandResult imported = RunCommand(
      {AutotuneCliPath(), "--server", daemon.address(), "import", dir.File("sample.json")});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto lookup = [&](const std::string& dims) {
    CommandResult result =
        RunCommand({AutotuneCliPath(), "--server", daemon.address(), "lookup", "vector_scale",
                    "--dims", dims, "--dtype", "bf16", "--device", "NVIDIA H200"});
    EXPECT_EQ(result.exit_code, 0) << result.err;
  };
  lookup("batch=8,n=4096");
  lookup("batch=64,n=4096");
  lookup("batch=12,n=4096");  // NEAREST
  lookup("batch=8,n=1000");   // MISS

  const std::string text = Scrape(port);
  std::map<std::string, double> after = Samples(text);
  EXPECT_EQ(after["autotune_lookups_total{result=\"exact\"}"], 2) << text;
  EXPECT_EQ(after["autotune_lookups_total{result=\"nearest\"}"], 1);
  EXPECT_EQ(after["autotune_lookups_total{result=\"miss\"}"], 1);
  EXPECT_EQ(after["autotune_lookup_duration_seconds_count{rpc=\"Lookup\"}"], 4);
  EXPECT_GT(after["autotune_lookup_duration_seconds_sum{rpc=\"Lookup\"}"], 0);
  EXPECT_EQ(after["autotune_cache_entries"], 3);
  EXPECT_EQ(after["autotune_cache_binaries"], bundle.binaries_size());
  EXPECT_GT(after["autotune_cache_database_bytes"], 0);
  EXPECT_EQ(after["autotune_workers_restarted_total"], 0);
  EXPECT_THAT(text, HasSubstr("# TYPE autotune_lookups_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE autotune_lookup_duration_seconds histogram"));
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(MetricsEndToEndTest, AJobShowsInJobsByStateAndInCompileSeconds) {
  TempDir dir;
  Daemon daemon(dir.path(), {"--kernels", "none", "--gpus", "none", "--metrics-listen",
                             "127.0.0.1:0", "--compile-workers", "2"});
  ASSERT_OK(daemon.Start());
  const int port = MetricsPort(daemon);
  ASSERT_GT(port, 0) << daemon.Stderr();
  std::map<std::string, double> before = Samples(Scrape(port));
  EXPECT_EQ(before["autotune_jobs{state=\"succeeded\"}"], 0);
  EXPECT_EQ(before["autotune_compile_seconds_total"], 0);

  const std::string testdata = AUTOTUNE_KERNELS_TESTDATA;
  CommandResult registered = RunCommand({AutotuneCliPath(), "--server", daemon.address(),
                                         "register", testdata + "/good/axpy.textproto"});
  ASSERT_EQ(registered.exit_code, 0) << registered.err;
  const std::string manifest = dir.File("axpy.manifest");
  std::ofstream(manifest) << "arch: \"sm_90\"\n"
                             "items { family: \"axpy\" dims { name: \"n\" values: [1024] } "
                             "dtypes: [FLOAT32] }\n";
  CommandResult warmup = RunCommand(
      {AutotuneCliPath(), "--server", daemon.address(), "warmup", manifest, "--compile-only"},
      absl::Minutes(5));
  ASSERT_EQ(warmup.exit_code, 0) << warmup.err << daemon.Stderr();

  const std::string text = Scrape(port);
  std::map<std::string, double> after = Samples(text);
  EXPECT_EQ(after["autotune_jobs{state=\"succeeded\"}"], 1) << text;
  EXPECT_GT(after["autotune_compile_seconds_total"], 0);
  EXPECT_EQ(after["autotune_gpu_seconds_total"], 0);  // compile-only
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(MetricsEndToEndTest, APortThatIsTakenStopsTheStartWithTheFlagNamed) {
  TempDir dir;
  Daemon first(dir.path(),
               {"--kernels", "none", "--gpus", "none", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_OK(first.Start());
  const int port = MetricsPort(first);
  ASSERT_GT(port, 0);
  TempDir other;
  Daemon second(other.path(), {"--kernels", "none", "--gpus", "none", "--metrics-listen",
                               absl::StrCat("127.0.0.1:", port)});
  const absl::Status started = second.Start();
  EXPECT_FALSE(started.ok());
  EXPECT_THAT(started.message(), HasSubstr("--http-listen 127.0.0.1:"));
  EXPECT_EQ(first.Stop(), 0);
}

// `autotune admin-url` gives the daemon's own user a link into the admin
// page: its token, swapped once for a session cookie, signs the page in
// with the user's role; without it the page's API answers 401.
TEST(AdminUrlEndToEndTest, TheLinkSignsTheSocketsOwnerIntoTheAdminPage) {
  TempDir dir;
  Daemon daemon(dir.path(), {"--kernels", "none", "--gpus", "none", "--http-listen", "127.0.0.1:0",
                             "--anonymous-role", "none"});
  ASSERT_OK(daemon.Start());
  const int port = MetricsPort(daemon);
  ASSERT_GT(port, 0) << daemon.Stderr();
  EXPECT_NE(HttpCall(port, "GET", "/api/entries").status, 200);

  CommandResult link = RunCommand({AutotuneCliPath(), "--server", daemon.address(), "admin-url"});
  ASSERT_EQ(link.exit_code, 0) << link.err;
  const std::string prefix = absl::StrCat("http://127.0.0.1:", port, "/admin#login=");
  ASSERT_TRUE(absl::StartsWith(link.out, prefix)) << link.out;
  const std::string token = link.out.substr(prefix.size(), link.out.find('\n') - prefix.size());
  EXPECT_THAT(link.out, HasSubstr("(expires 20"));
  const HttpAnswer login =
      HttpCall(port, "POST", "/api/login",
               {"Content-Type: application/json", "X-Autotune-Request: admin-page"},
               absl::StrCat("{\"login\": \"", token, "\"}"));
  ASSERT_EQ(login.status, 200) << login.body;
  const size_t at = login.headers.find("Set-Cookie: ");
  ASSERT_NE(at, std::string::npos) << login.headers;
  const std::string cookie = login.headers.substr(at + 12, login.headers.find(';', at) - at - 12);
  const std::vector<std::string> session = {"Cookie: " + cookie, "X-Autotune-Request: admin-page"};
  const HttpAnswer who = HttpCall(port, "GET", "/api/whoami", session);
  EXPECT_EQ(who.status, 200) << who.body;
  EXPECT_THAT(who.body, HasSubstr("\"admin\""));
  EXPECT_THAT(who.body, HasSubstr("login:uid:"));
  EXPECT_EQ(HttpCall(port, "GET", "/api/entries", session).status, 200);
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace autotune::testing
