// End to end: autotuned's start-up rules, the standard services it exposes
// and its clean shutdown, on the real binary.
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "tests/probes/health.grpc.pb.h"
#include "tests/probes/reflection.grpc.pb.h"
#include "tests/support/host_files.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string LastLine(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  const size_t newline = trimmed.rfind('\n');
  return newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
}

TEST(DaemonTest, ServesHealthAndReflectionWithOwnerOnlyFiles) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_OK(daemon.Start());
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());

  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const std::string service : {"", "autotune.v1.Autotune"}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, request, &response).ok()) << service;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }

  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  auto stream = reflection->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("*");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& service : response.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services, ::testing::Contains("autotune.v1.Autotune"));
  EXPECT_THAT(services, ::testing::Contains("grpc.health.v1.Health"));
  EXPECT_TRUE(stream->Finish().ok());

  EXPECT_EQ(ModeOf(daemon.db_path()), 0600u);
  EXPECT_EQ(ModeOf(dir.path() + "/state"), 0700u);
  EXPECT_EQ(ModeOf(daemon.socket_path()) & 0077, 0u);
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(DaemonTest, SigtermFinishesCleanlyAndTheDatabaseReopens) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_OK(daemon.Start());
  // Calls keep coming while the signal arrives; none may see a broken answer.
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  absl::Notification answered;  // calls are flowing: the next is on its way
  std::thread caller([&] {
    auto stub = v1::Autotune::NewStub(
        grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
    while (!stop) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      v1::StatsResponse response;
      grpc::Status status = stub->Stats(&context, v1::StatsRequest(), &response);
      if (status.ok() && !answered.HasBeenNotified()) answered.Notify();
      if (!status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE &&
          status.error_code() != grpc::StatusCode::CANCELLED) {
        ++bad;
      }
    }
  });
  // No assertion may return before the caller is joined.
  EXPECT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30))) << daemon.Stderr();
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
  stop = true;
  caller.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_THAT(daemon.Stderr(), HasSubstr("database closed"));
  // The socket is removed and the WAL folded back into the database.
  EXPECT_NE(access(daemon.socket_path().c_str(), F_OK), 0);
  EXPECT_NE(access((daemon.db_path() + "-wal").c_str(), F_OK), 0);

  Daemon again(dir.path());
  ASSERT_OK(again.Start());
  EXPECT_EQ(again.Stop(), 0);
}

// An inference server keeps its connection open between calls. A stop
// waits for calls, never for idle connections to close (gRPC alone would
// wait the whole grace period, 10 s, for them).
TEST(DaemonTest, AStopDoesNotWaitForIdleConnections) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_OK(daemon.Start());
  auto stub = v1::Autotune::NewStub(
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::StatsResponse response;
  ASSERT_TRUE(stub->Stats(&context, v1::StatsRequest(), &response).ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the stop waited for the idle channel";
}

TEST(DaemonTest, RefusesADatabaseHeldByAnotherDaemon) {
  TempDir dir;
  Daemon first(dir.path());
  ASSERT_OK(first.Start());
  Daemon second(dir.path(),
                {"--db", first.db_path(), "--listen", "unix://" + dir.path() + "/second.sock"});
  ASSERT_OK(second.Start());
  EXPECT_NE(second.WaitExit(), 0);
  EXPECT_THAT(LastLine(second.Stderr()), HasSubstr("in use"));
  EXPECT_EQ(first.Stop(), 0);
}

TEST(DaemonTest, RefusesASocketAnotherDaemonServes) {
  TempDir dir;
  Daemon first(dir.path());
  ASSERT_OK(first.Start());
  Daemon second(dir.path(), {"--db", dir.path() + "/other.db", "--listen", first.address()});
  ASSERT_OK(second.Start());
  EXPECT_NE(second.WaitExit(), 0);
  EXPECT_THAT(LastLine(second.Stderr()), HasSubstr("already listening"));
  // The first one still answers.
  CommandResult stats = RunCommand({AutotuneCliPath(), "--server", first.address(), "stats"});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(first.Stop(), 0);
}

TEST(DaemonTest, ReplacesAStaleSocketFile) {
  TempDir dir;
  {
    Daemon crashed(dir.path());
    ASSERT_OK(crashed.Start());
  }  // SIGKILL: the socket file stays behind
  ASSERT_EQ(access((dir.path() + "/autotune.sock").c_str(), F_OK), 0);
  Daemon daemon(dir.path());
  ASSERT_OK(daemon.Start());
  EXPECT_EQ(daemon.Stop(), 0);
}

struct BadDatabaseCase {
  const char* name;
  const char* expected;
};

class BadDatabaseTest : public ::testing::TestWithParam<BadDatabaseCase> {};

TEST_P(BadDatabaseTest, ExitsNonZeroWithOneLineReason) {
  TempDir dir;
  const std::string db = dir.path() + "/cache.db";
  const std::string kind = GetParam().name;
  if (kind == "garbage") {
    std::ofstream(db) << std::string(8192, 'x');
  } else if (kind == "newer_schema") {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(handle, "PRAGMA user_version = 999", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(handle);
  } else if (kind == "unreadable_directory") {
    std::ofstream(dir.path() + "/plain") << "not a directory";
  }
  std::string db_flag = db;
  if (kind == "unreadable_directory") db_flag = dir.path() + "/plain/cache.db";
  Daemon daemon(dir.path(), {"--db", db_flag, "--listen", "unix://" + dir.path() + "/d.sock"});
  ASSERT_OK(daemon.Start());
  EXPECT_NE(daemon.WaitExit(), 0);
  const std::string err = daemon.Stderr();
  EXPECT_THAT(LastLine(err), HasSubstr(GetParam().expected)) << err;
  EXPECT_THAT(LastLine(err), ::testing::StartsWith("autotuned: "));
  if (kind == "newer_schema") {
    // Refused, and left as it was.
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(handle, "PRAGMA user_version", -1, &stmt, nullptr);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(stmt, 0), 999);
    sqlite3_finalize(stmt);
    sqlite3_close(handle);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadDatabaseTest,
    ::testing::Values(BadDatabaseCase{"garbage", "not"}, BadDatabaseCase{"newer_schema", "newer"},
                      BadDatabaseCase{"unreadable_directory", "not a directory"}),
    [](const ::testing::TestParamInfo<BadDatabaseCase>& info) { return info.param.name; });

TEST(DaemonTest, TcpNeedsTlsOrInsecureLoopback) {
  TempDir dir;
  Daemon open_to_all(dir.path(), {"--listen", "0.0.0.0:7777", "--insecure"});
  ASSERT_OK(open_to_all.Start());
  EXPECT_NE(open_to_all.WaitExit(), 0);
  EXPECT_THAT(LastLine(open_to_all.Stderr()), HasSubstr("non-loopback"));

  Daemon no_flag(dir.path(), {"--listen", "127.0.0.1:7777"});
  ASSERT_OK(no_flag.Start());
  EXPECT_NE(no_flag.WaitExit(), 0);
  EXPECT_THAT(LastLine(no_flag.Stderr()), HasSubstr("--insecure"));

  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  // Plaintext TCP carries no peer identity: callers without a token get the
  // anonymous role.
  Daemon loopback(dir.path(), {"--listen", address, "--insecure", "--anonymous-role", "reader"});
  ASSERT_OK(loopback.Start());
  CommandResult stats;
  for (int attempt = 0; attempt < 100; ++attempt) {
    stats = RunCommand({AutotuneCliPath(), "--server", address, "stats"});
    if (stats.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(stats.exit_code, 0) << stats.err << loopback.Stderr();
  EXPECT_EQ(loopback.Stop(), 0);
}

// Runs a shell-free openssl command line; fails the test when it fails.
void OpenSsl(std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/openssl");
  CommandResult result = RunCommand(args);
  ASSERT_EQ(result.exit_code, 0) << result.err;
}

// A throwaway CA in `dir` (ca.pem, ca.key).
void MakeCa(const std::string& dir) {
  OpenSsl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/ca.key", "-out",
           dir + "/ca.pem", "-days", "1", "-subj", "/CN=autotune test CA"});
}

// <name>.pem and <name>.key in `dir`, for `subject`, with `extension`,
// signed by MakeCa's CA.
void SignCertificate(const std::string& dir, const std::string& name, const std::string& subject,
                     const std::string& extension) {
  const std::string base = dir + "/" + name;
  OpenSsl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", base + ".key", "-out", base + ".csr",
           "-subj", subject, "-addext", extension});
  OpenSsl({"x509", "-req", "-in", base + ".csr", "-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key",
           "-CAcreateserial", "-out", base + ".pem", "-days", "1", "-copy_extensions", "copy"});
}

TEST(DaemonTest, ServesTcpWithTlsAndRefusesPlaintextClients) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "openssl is not installed";
  TempDir dir;
  const std::string d = dir.path();
  // A throwaway CA and a server certificate for localhost / 127.0.0.1.
  MakeCa(d);
  SignCertificate(d, "server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1");

  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  Daemon daemon(d, {"--listen", address, "--tls-cert", d + "/server.pem", "--tls-key",
                    d + "/server.key", "--anonymous-role", "reader"});
  ASSERT_OK(daemon.Start());
  CommandResult secure;
  for (int attempt = 0; attempt < 100; ++attempt) {
    secure = RunCommand(
        {AutotuneCliPath(), "--server", address, "--tls", "--tls-ca", d + "/ca.pem", "stats"});
    if (secure.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(secure.exit_code, 0) << secure.err << daemon.Stderr();

  CommandResult plaintext =
      RunCommand({AutotuneCliPath(), "--server", address, "--timeout", "2", "stats"});
  EXPECT_NE(plaintext.exit_code, 0);
  // A client that does not trust the CA is refused too.
  CommandResult untrusted =
      RunCommand({AutotuneCliPath(), "--server", address, "--tls", "--timeout", "2", "stats"});
  EXPECT_NE(untrusted.exit_code, 0);
  EXPECT_EQ(daemon.Stop(), 0);
}

// Client certificates name roles (--cert-role): a certificate's common name
// is looked up; one the daemon does not map gets the anonymous role.
TEST(DaemonTest, ClientCertificatesAreMappedToRoles) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "openssl is not installed";
  TempDir dir;
  const std::string d = dir.path();
  MakeCa(d);
  SignCertificate(d, "server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1");
  SignCertificate(d, "alice", "/CN=alice", "extendedKeyUsage=clientAuth");
  SignCertificate(d, "bob", "/CN=bob", "extendedKeyUsage=clientAuth");

  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  Daemon daemon(d, {"--listen", address, "--tls-cert", d + "/server.pem", "--tls-key",
                    d + "/server.key", "--tls-client-ca", d + "/ca.pem", "--cert-role",
                    "alice=admin", "--cert-role", "bob=reader"});
  ASSERT_OK(daemon.Start());
  const auto as = [&](const std::string& who, std::vector<std::string> command) {
    std::vector<std::string> argv = {AutotuneCliPath(),
                                     "--server",
                                     address,
                                     "--tls-ca",
                                     d + "/ca.pem",
                                     "--tls-cert",
                                     d + "/" + who + ".pem",
                                     "--tls-key",
                                     d + "/" + who + ".key"};
    argv.insert(argv.end(), command.begin(), command.end());
    return RunCommand(argv);
  };
  CommandResult stats;
  for (int attempt = 0; attempt < 100; ++attempt) {
    stats = as("bob", {"stats"});
    if (stats.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(stats.exit_code, 0) << stats.err << daemon.Stderr();
  CommandResult bob = as("bob", {"invalidate", "--all", "--dry-run"});
  EXPECT_NE(bob.exit_code, 0);
  EXPECT_THAT(bob.err, HasSubstr("cert:bob has reader"));
  CommandResult alice = as("alice", {"invalidate", "--all", "--dry-run"});
  EXPECT_EQ(alice.exit_code, 0) << alice.err;
  // Without a client certificate the handshake itself is refused.
  CommandResult none = RunCommand({AutotuneCliPath(), "--server", address, "--tls-ca",
                                   d + "/ca.pem", "--timeout", "2", "stats"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace autotune::testing
