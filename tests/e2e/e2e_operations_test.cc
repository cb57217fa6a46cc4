// End to end: what operators set and watch on the real daemon: the config
// file against the flags, health while the database is unavailable, and
// JSON log lines.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "tests/probes/health.grpc.pb.h"
#include "tests/support/host_files.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The health of `service` ("" = the whole server).
HealthCheckResponse::ServingStatus Health(const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  if (!health->Check(&context, request, &response).ok()) return HealthCheckResponse::UNKNOWN;
  return response.status();
}

// Polls until both the server and autotune.v1.Autotune report `want`.
bool HealthBecomes(const std::shared_ptr<grpc::Channel>& channel,
                   HealthCheckResponse::ServingStatus want, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Health(channel, "") == want && Health(channel, "autotune.v1.Autotune") == want) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

grpc::Status CancelUnknownJob(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Autotune::NewStub(channel);
  grpc::ClientContext context;
  v1::CancelJobRequest request;
  request.set_id("no-such-job");
  v1::Job job;
  return stub->CancelJob(&context, request, &job);
}

TEST(OperationsTest, TheConfigFileSetsWhatFlagsLeaveAndFlagsWin) {
  TempDir dir;
  const std::string config = dir.File("autotuned.textproto");
  const std::string uid = absl::StrCat(getuid());
  WriteText(config, absl::StrCat("# autotuned config\n"
                                 "db: \"",
                                 dir.File("from-config.db"),
                                 "\"\n"
                                 "audit_log: \"",
                                 dir.File("config-audit.log"),
                                 "\"\n"
                                 "peer_role: \"uid:",
                                 uid,
                                 "=reader\"\n"
                                 "health_interval: 0.25\n"));
  // --db (from the Daemon helper) and --peer-role override the file.
  Daemon daemon(dir.path(),
                {"--config", config, "--peer-role", absl::StrCat("uid:", uid, "=tuner")});
  ASSERT_OK(daemon.Start());
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  // A tuner may cancel (this job does not exist); a reader could not.
  EXPECT_EQ(CancelUnknownJob(channel).error_code(), grpc::StatusCode::NOT_FOUND);
  channel.reset();
  EXPECT_EQ(daemon.Stop(), 0);
  EXPECT_TRUE(Exists(daemon.db_path()));
  EXPECT_FALSE(Exists(dir.File("from-config.db")));
  EXPECT_THAT(ReadText(dir.File("config-audit.log")), HasSubstr("\"CancelJob\""));

  // --print-config shows the merge without starting anything.
  const CommandResult printed =
      RunCommand({AutotunedPath(), "--config", config, "--readers", "3", "--print-config"});
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_THAT(printed.out, HasSubstr("readers: 3"));
  EXPECT_THAT(printed.out, HasSubstr(absl::StrCat("db: \"", dir.File("from-config.db"), "\"")));
  EXPECT_THAT(printed.out, HasSubstr("health_interval: 0.25"));
}

TEST(OperationsTest, ABadConfigFileStopsStartUpNamingFileAndLineAndCreatesNothing) {
  TempDir dir;
  const std::string config = dir.File("bad.textproto");
  WriteText(config, absl::StrCat("db: \"", dir.File("never.db"), "\"\nlisten_on: \"x\"\n"));
  const CommandResult bad = RunCommand({AutotunedPath(), "--config", config});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr(absl::StrCat("config file ", config, ": line 2 column")));
  EXPECT_THAT(bad.err, HasSubstr("listen_on"));
  EXPECT_FALSE(Exists(dir.File("never.db")));

  WriteText(config, absl::StrCat("db: \"", dir.File("never.db"), "\"\nreaders: 0\n"));
  const CommandResult out_of_range = RunCommand({AutotunedPath(), "--config", config});
  EXPECT_NE(out_of_range.exit_code, 0);
  EXPECT_THAT(out_of_range.err, HasSubstr(absl::StrCat("config file ", config, ": readers: ")));
  EXPECT_FALSE(Exists(dir.File("never.db")));
}

TEST(OperationsTest, HealthIsNotServingWhileTheDatabaseIsUnavailableAndRecovers) {
  TempDir dir;
  Daemon daemon(dir.path(), {"--health-interval", "0.1"});
  ASSERT_OK(daemon.Start());
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(HealthBecomes(channel, HealthCheckResponse::SERVING, absl::Seconds(5)));

  // Moved away under the daemon: its writes would land where no restart
  // finds them.
  const std::string moved = dir.File("moved.db");
  ASSERT_EQ(rename(daemon.db_path().c_str(), moved.c_str()), 0);
  EXPECT_TRUE(HealthBecomes(channel, HealthCheckResponse::NOT_SERVING, absl::Seconds(5)));
  {
    auto stub = v1::Autotune::NewStub(channel);
    grpc::ClientContext context;
    v1::StatsResponse stats;
    EXPECT_TRUE(stub->Stats(&context, v1::StatsRequest(), &stats).ok());  // calls go on
  }
  ASSERT_EQ(rename(moved.c_str(), daemon.db_path().c_str()), 0);
  EXPECT_TRUE(HealthBecomes(channel, HealthCheckResponse::SERVING, absl::Seconds(5)));

  // Another process holds the write lock past the busy timeout.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(daemon.db_path().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_TRUE(HealthBecomes(channel, HealthCheckResponse::NOT_SERVING, absl::Seconds(20)));
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_TRUE(HealthBecomes(channel, HealthCheckResponse::SERVING, absl::Seconds(20)));

  const std::string log = daemon.Stderr();
  EXPECT_THAT(log, HasSubstr("health: NOT_SERVING: database " + daemon.db_path() + " is gone"));
  EXPECT_THAT(log, HasSubstr("health: SERVING again"));
  channel.reset();
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(OperationsTest, OversizedRequestsAreRefusedWithTheirLimitAndTheDaemonGoesOn) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_OK(daemon.Start());
  auto stub = v1::Autotune::NewStub(
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
  {
    // One message past 64 MiB: refused by gRPC before any of it is read.
    v1::LookupRequest request;
    request.set_family(std::string((64 << 20) + 1024, 'f'));
    grpc::ClientContext context;
    v1::LookupResponse response;
    const grpc::Status status = stub->Lookup(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  }
  {
    v1::BatchLookupRequest request;
    for (int i = 0; i < 100001; ++i) request.add_lookups()->set_family("rmsnorm");
    grpc::ClientContext context;
    v1::BatchLookupResponse response;
    const grpc::Status status = stub->BatchLookup(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(status.error_message(), "lookups: 100001 items, at most 100000");
  }
  {
    v1::RegisterKernelRequest request;
    request.mutable_family()->set_name("huge_source");
    request.mutable_family()->set_kernel_name("scale");
    request.mutable_family()->set_source(std::string((1 << 20) + 1, ' '));
    grpc::ClientContext context;
    v1::RegisterKernelResponse response;
    const grpc::Status status = stub->RegisterKernel(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr("source: 1048577 bytes, more than the limit of 1048576"));
  }
  grpc::ClientContext context;
  v1::ListKernelsResponse kernels;
  ASSERT_TRUE(stub->ListKernels(&context, v1::ListKernelsRequest(), &kernels).ok());
  for (const auto& kernel : kernels.kernels()) EXPECT_NE(kernel.name(), "huge_source");
  stub.reset();
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(OperationsTest, JsonLogsMakeEveryLineAnObjectTheWorkersOutputIncluded) {
  TempDir dir;
  // A worker that says something on stderr and cannot serve.
  const std::string worker = dir.File("talkative-worker");
  WriteText(worker, "#!/bin/sh\necho 'worker says: \"no NVRTC\" here' >&2\nexit 1\n");
  ASSERT_EQ(chmod(worker.c_str(), 0700), 0);
  Daemon daemon(dir.path(), {"--log-format", "json", "--worker", worker});
  ASSERT_OK(daemon.Start());
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  channel.reset();
  EXPECT_EQ(daemon.Stop(), 0);

  int lines = 0;
  bool relayed = false;
  bool own = false;
  for (absl::string_view line : absl::StrSplit(daemon.Stderr(), '\n', absl::SkipEmpty())) {
    ++lines;
    google::protobuf::Struct object;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &object).ok())
        << "not a JSON object: " << line;
    const auto& fields = object.fields();
    ASSERT_TRUE(fields.contains("time") && fields.contains("level") && fields.contains("message"))
        << line;
    const std::string& message = fields.at("message").string_value();
    if (message == "worker says: \"no NVRTC\" here") {
      relayed = true;
      EXPECT_EQ(fields.at("source").string_value(), "stderr");
    }
    if (absl::StrContains(message, "autotuned listening on")) {
      own = true;
      EXPECT_EQ(fields.at("level").string_value(), "info");
    }
  }
  EXPECT_GT(lines, 3);
  EXPECT_TRUE(relayed) << daemon.Stderr();
  EXPECT_TRUE(own) << daemon.Stderr();
}

}  // namespace
}  // namespace autotune::testing
