#include "client/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "client/bundle.h"
#include "client/grpc_status.h"
#include "client/testing/fake_autotune_server.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::client::testing::FakeAutotuneServer;
using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

struct StatusCase {
  grpc::StatusCode grpc_code;
  std::string grpc_message;
  absl::StatusCode code;
  std::string message;
};

TEST(StatusFromGrpcTest, KeepsCodeAndMessage) {
  const StatusCase cases[] = {
      {grpc::StatusCode::NOT_FOUND, "unknown family 'foo'", absl::StatusCode::kNotFound,
       "unknown family 'foo'"},
      {grpc::StatusCode::INVALID_ARGUMENT, "dimension 'batch' is required",
       absl::StatusCode::kInvalidArgument, "dimension 'batch' is required"},
      {grpc::StatusCode::UNIMPLEMENTED, "", absl::StatusCode::kUnimplemented, ""},
      {grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded",
       absl::StatusCode::kDeadlineExceeded, "Deadline Exceeded"},
      {grpc::StatusCode::PERMISSION_DENIED, "tuner role required",
       absl::StatusCode::kPermissionDenied, "tuner role required"},
  };
  for (const StatusCase& c : cases) {
    const absl::Status status =
        StatusFromGrpc(grpc::Status(c.grpc_code, c.grpc_message), "unix:///run/a.sock");
    EXPECT_EQ(status.code(), c.code) << c.grpc_message;
    EXPECT_EQ(status.message(), c.message);
  }
}

TEST(StatusFromGrpcTest, OkStaysOk) {
  EXPECT_OK(StatusFromGrpc(grpc::Status::OK, "unix:///run/a.sock"));
}

TEST(StatusFromGrpcTest, UnavailableSaysWhereAndWhatToCheck) {
  const absl::Status status = StatusFromGrpc(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"),
      "unix:///run/a.sock");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(),
            "cannot reach autotuned at unix:///run/a.sock: failed to connect to all addresses; "
            "is the daemon running?");
}

TEST(ConnectTest, RejectsBadOptions) {
  ClientOptions no_address;
  no_address.address = "";
  EXPECT_THAT(Client::Connect(no_address),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("address")));

  ClientOptions zero_timeout;
  zero_timeout.timeout = absl::ZeroDuration();
  EXPECT_THAT(Client::Connect(zero_timeout),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout")));

  ClientOptions cert_without_key;
  cert_without_key.tls = TlsOptions{"", "/etc/client.pem", ""};
  EXPECT_THAT(Client::Connect(cert_without_key),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("private key")));
}

TEST(ConnectTest, MissingTlsFileIsNamed) {
  ClientOptions options;
  options.address = "localhost:1";
  options.tls = TlsOptions{"/nonexistent/roots.pem", "", ""};
  EXPECT_THAT(Client::Connect(options),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/roots.pem")));
}

TEST(ConnectTest, DefaultAddressFollowsAutotuneServer) {
  setenv("AUTOTUNE_SERVER", "unix:///tmp/elsewhere.sock", 1);
  EXPECT_EQ(ClientOptions().address, "unix:///tmp/elsewhere.sock");
  unsetenv("AUTOTUNE_SERVER");
  EXPECT_NE(ClientOptions().address, "unix:///tmp/elsewhere.sock");
}

TEST(ClientTest, UnreachableDaemonIsUnavailableNamingTheAddress) {
  ClientOptions options;
  options.address = "unix:///nonexistent-autotune-dir/autotune.sock";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  EXPECT_THAT(client->Stats(v1::StatsRequest()),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("cannot reach autotuned at "
                                       "unix:///nonexistent-autotune-dir/autotune.sock"),
                             HasSubstr("is the daemon running?"))));
}

TEST(ClientTest, ADaemonThatIsDownIsFoundWithoutStartingGrpc) {
  const bool started_before = grpc_is_initialized() != 0;
  TempDir dir;
  const std::string path = dir.File("autotune.sock");
  ClientOptions options;
  options.address = absl::StrCat("unix://", path);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  EXPECT_THAT(
      client->Stats(v1::StatsRequest()),
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr(absl::StrCat("cannot reach autotuned at unix://", path)),
                     HasSubstr("nothing listens there (connect: No such file or directory)"),
                     HasSubstr("is the daemon running?"))));
  // A socket left by a daemon that is gone: bound, nobody listening.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::copy(path.begin(), path.end(), address.sun_path);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
  EXPECT_THAT(client->BatchLookup(v1::BatchLookupRequest()),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("nothing listens there (connect: Connection refused)")));
  EXPECT_THAT(client->GetBinariesReceivingCubins({std::string(64, 'a')}, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("Connection refused")));
  EXPECT_THAT(client->Export(v1::ExportRequest()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("Connection refused")));
  if (!started_before) {
    EXPECT_EQ(grpc_is_initialized(), 0);
  }
}

TEST(ClientTest, ADaemonThatComesUpLaterIsFoundByTheSameClient) {
  TempDir dir;
  const std::string path = dir.File("autotune.sock");
  ClientOptions options;
  options.address = absl::StrCat("unix://", path);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  EXPECT_THAT(client->Stats(v1::StatsRequest()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("nothing listens there")));
  FakeAutotuneServer server;
  ASSERT_OK(server.Start(path));
  server.answers().stats.set_entries(7);
  ASSERT_OK_AND_ASSIGN(v1::StatsResponse stats, client->Stats(v1::StatsRequest()));
  EXPECT_EQ(stats.entries(), 7);
}

class ClientWithServerTest : public ::testing::Test {
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

TEST_F(ClientWithServerTest, LookupSendsTheRequestAndReturnsTheAnswer) {
  server_.answers().lookup.set_match(v1::NEAREST);
  server_.answers().lookup.mutable_entry()->set_family("flash_attn");
  v1::LookupRequest request;
  request.set_family("flash_attn");
  (*request.mutable_problem()->mutable_dims())["batch"] = 12;
  request.set_include_cubin(true);

  ASSERT_OK_AND_ASSIGN(v1::LookupResponse response, client_->Lookup(request));
  EXPECT_EQ(response.match(), v1::NEAREST);
  EXPECT_EQ(response.entry().family(), "flash_attn");
  EXPECT_TRUE(MessageDifferencer::Equals(server_.calls().lookup, request));
}

TEST_F(ClientWithServerTest, ServerErrorKeepsCodeAndMessage) {
  server_.answers().status = grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown family 'foo'");
  EXPECT_THAT(client_->Lookup(v1::LookupRequest()),
              StatusIs(absl::StatusCode::kNotFound, "unknown family 'foo'"));
}

TEST_F(ClientWithServerTest, ReceivesAnswersLargerThanGrpcsDefaultLimit) {
  // 40 binaries of 256 KB: 10 MB, over gRPC's default 4 MiB receive limit.
  for (int i = 0; i < 40; ++i) {
    (*server_.answers().batch_lookup.mutable_binaries())[absl::StrCat("sha", i)] =
        std::string(256 << 10, 'c');
  }
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse response,
                       client_->BatchLookup(v1::BatchLookupRequest()));
  EXPECT_EQ(response.binaries_size(), 40);

  // The same answer with gRPC's default limit fails: the raised limit is what
  // lets it through.
  ClientOptions small;
  small.address = server_.address();
  small.max_receive_message_bytes = 4 << 20;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> limited, Client::Connect(small));
  EXPECT_THAT(limited->BatchLookup(v1::BatchLookupRequest()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("message larger")));
}

TEST_F(ClientWithServerTest, BinariesComeInCallsOfBoundedSizeIntoSharedBlocks) {
  // Three calls' worth of digests, one of them asked twice, one not stored.
  std::vector<std::string> shas;
  for (int i = 0; i < 2 * kBinariesPerCall + 5; ++i) {
    const std::string sha = absl::StrCat(std::string(60, 'f'), absl::Dec(i, absl::kZeroPad4));
    shas.push_back(sha);
    if (i != 7) server_.answers().binaries[sha] = std::string(5000 + i, static_cast<char>(i));
  }
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries received,
                       client_->GetBinariesReceivingCubins(shas, absl::Seconds(30)));
  const std::vector<v1::GetBinariesRequest> calls = server_.calls().get_binaries;
  ASSERT_EQ(calls.size(), 3u);
  size_t asked = 0;
  for (const v1::GetBinariesRequest& call : calls) {
    EXPECT_LE(call.sha256_size(), kBinariesPerCall);
    asked += static_cast<size_t>(call.sha256_size());
  }
  EXPECT_EQ(asked, shas.size());
  ASSERT_EQ(received.binaries.size(), shas.size() - 1);
  for (int i = 0; i < static_cast<int>(shas.size()); ++i) {
    if (i == 7) continue;
    ASSERT_TRUE(received.binaries.contains(shas[i])) << i;
    EXPECT_EQ(*received.binaries.at(shas[i]), std::string(5000 + i, static_cast<char>(i)));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(received.binaries.at(shas[i])->data()) % 256, 0u);
  }
  EXPECT_THAT(received.missing, ElementsAre(shas[7]));
}

TEST_F(ClientWithServerTest, AFailedBinariesCallFailsItsOwnDigestsAndTheOthersGoOn) {
  std::vector<std::string> shas;
  for (int i = 0; i < 4 * kBinariesPerCall; ++i) {
    shas.push_back(absl::StrCat(std::string(60, 'e'), absl::Dec(i, absl::kZeroPad4)));
    server_.answers().binaries[shas.back()] = "cubin";
  }
  server_.answers().get_binaries_answered = 1;  // then DATA_LOSS
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries received,
                       client_->GetBinariesReceivingCubins(shas, absl::Seconds(30)));
  EXPECT_EQ(server_.calls().get_binaries.size(), 4u);
  EXPECT_EQ(received.binaries.size(), static_cast<size_t>(kBinariesPerCall));
  ASSERT_EQ(received.failed.size(), static_cast<size_t>(3 * kBinariesPerCall));
  for (const auto& [sha, status] : received.failed) {
    EXPECT_FALSE(received.binaries.contains(sha));
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("binary is corrupt")));
  }
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries none,
                       client_->GetBinariesReceivingCubins({}, absl::Seconds(1)));
  EXPECT_TRUE(none.binaries.empty());
}

TEST_F(ClientWithServerTest, AnUnreachableServiceStopsTheBinariesCalls) {
  std::vector<std::string> shas;
  for (int i = 0; i < 10 * kBinariesPerCall; ++i) {
    shas.push_back(absl::StrCat(std::string(60, 'd'), absl::Dec(i, absl::kZeroPad4)));
    server_.answers().binaries[shas.back()] = "cubin";
  }
  server_.answers().get_binaries_answered = 0;
  server_.answers().get_binaries_failure =
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away");
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries received,
                       client_->GetBinariesReceivingCubins(shas, absl::Seconds(30)));
  // No call starts after the first that failed: at most the two in flight.
  EXPECT_LE(server_.calls().get_binaries.size(), static_cast<size_t>(kBinaryCallsInFlight));
  EXPECT_TRUE(received.binaries.empty());
  ASSERT_EQ(received.failed.size(), shas.size());
  for (const auto& [sha, status] : received.failed) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("going away")));
  }
}

TEST_F(ClientWithServerTest, ImportStreamsTheBundleInPartsOfAtMostTwoMegabytes) {
  v1::CacheBundle bundle;
  bundle.set_format_version(1);
  bundle.add_families()->set_content_hash("h1");
  for (int i = 0; i < 50; ++i) {
    v1::Binary* binary = bundle.add_binaries();
    binary->set_sha256(absl::StrCat("sha", i));
    binary->set_cubin(std::string(100 << 10, 'x'));  // 100 KiB
  }
  v1::Binary* big = bundle.add_binaries();
  big->set_sha256("big");
  big->set_cubin(std::string(5 << 20, 'y'));  // one 5 MiB cubin
  for (int i = 0; i < 10; ++i) bundle.add_entries()->set_family(absl::StrCat("f", i));
  server_.answers().import.set_entries(10);

  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response, client_->Import(bundle, /*replace=*/true));
  EXPECT_EQ(response.entries(), 10);

  const std::vector<v1::ImportRequest> parts = server_.calls().import_parts;
  // 5 MB of small binaries in parts of at most 2 MB, plus the big one alone.
  ASSERT_GE(parts.size(), 4u);
  v1::CacheBundle received;
  int parts_with_big = 0;
  for (const v1::ImportRequest& part : parts) {
    EXPECT_TRUE(part.replace());
    bool has_big = false;
    for (const v1::Binary& binary : part.part().binaries()) has_big |= binary.sha256() == "big";
    if (has_big) {
      ++parts_with_big;
      EXPECT_EQ(part.part().binaries_size(), 1) << "the big binary shares its part";
    } else {
      EXPECT_LE(part.part().ByteSizeLong(), kBundlePartBytes + 16);
    }
    received.MergeFrom(part.part());
  }
  EXPECT_EQ(parts_with_big, 1);
  EXPECT_EQ(parts.front().part().format_version(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(received, bundle));
}

TEST_F(ClientWithServerTest, ImportOfAnEmptyBundleIsOneCall) {
  ASSERT_OK(client_->Import(v1::CacheBundle(), /*replace=*/false).status());
  EXPECT_THAT(server_.calls().import_parts, SizeIs(1));
  EXPECT_THAT(server_.calls().methods, ElementsAre("Import"));
}

TEST_F(ClientWithServerTest, ImportRefusedByTheServerReportsItsStatus) {
  server_.answers().status =
      grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "import needs the tuner role");
  v1::CacheBundle bundle;
  bundle.add_entries()->set_family("f");
  EXPECT_THAT(client_->Import(bundle, false),
              StatusIs(absl::StatusCode::kPermissionDenied, "import needs the tuner role"));
}

TEST_F(ClientWithServerTest, ExportCollectsThePartsIntoOneBundle) {
  v1::ExportResponse first;
  first.mutable_part()->set_format_version(1);
  first.mutable_part()->add_families()->set_content_hash("h1");
  first.mutable_part()->add_entries()->set_family("a");
  v1::ExportResponse second;
  second.mutable_part()->add_entries()->set_family("b");
  second.mutable_part()->add_binaries()->set_sha256("s");
  server_.answers().export_parts = {first, second};

  v1::ExportRequest request;
  request.mutable_filter()->set_family("a");
  request.set_include_measurements(true);
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, client_->Export(request));
  EXPECT_EQ(bundle.format_version(), 1);
  ASSERT_EQ(bundle.entries_size(), 2);
  EXPECT_EQ(bundle.entries(0).family(), "a");
  EXPECT_EQ(bundle.entries(1).family(), "b");
  EXPECT_EQ(bundle.binaries_size(), 1);
  EXPECT_EQ(bundle.families_size(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(server_.calls().export_request, request));
}

TEST_F(ClientWithServerTest, SubmitJobReportsEachProgressAndReturnsTheLastJob) {
  for (v1::JobState state : {v1::QUEUED, v1::COMPILING, v1::SUCCEEDED}) {
    v1::JobProgress progress;
    progress.mutable_job()->set_id("job-1");
    progress.mutable_job()->set_state(state);
    server_.answers().progress.push_back(progress);
  }
  std::vector<v1::JobState> seen;
  v1::SubmitJobRequest request;
  request.mutable_spec()->mutable_options()->set_shard_count(4);
  ASSERT_OK_AND_ASSIGN(v1::Job job,
                       client_->SubmitJob(request, [&seen](const v1::JobProgress& progress) {
                         seen.push_back(progress.job().state());
                       }));
  EXPECT_THAT(seen, ElementsAre(v1::QUEUED, v1::COMPILING, v1::SUCCEEDED));
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(server_.calls().submit_job.spec().options().shard_count(), 4);
}

TEST_F(ClientWithServerTest, SubmitJobToAServerWithoutJobsIsUnimplemented) {
  server_.answers().status =
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this server has no GPU tuner");
  EXPECT_THAT(client_->SubmitJob(v1::SubmitJobRequest(), nullptr),
              StatusIs(absl::StatusCode::kUnimplemented, "this server has no GPU tuner"));
}

TEST_F(ClientWithServerTest, SubmitJobStreamErrorAfterProgressIsReported) {
  v1::JobProgress progress;
  progress.mutable_job()->set_id("job-2");
  server_.answers().progress.push_back(progress);
  server_.answers().submit_job_status =
      grpc::Status(grpc::StatusCode::INTERNAL, "scheduler stopped");
  int calls = 0;
  EXPECT_THAT(
      client_->SubmitJob(v1::SubmitJobRequest(), [&calls](const v1::JobProgress&) { ++calls; }),
      StatusIs(absl::StatusCode::kInternal, "scheduler stopped"));
  EXPECT_EQ(calls, 1);
}

TEST_F(ClientWithServerTest, OneClientServesManyThreads) {
  server_.answers().stats.set_entries(7);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        absl::StatusOr<v1::StatsResponse> stats = client_->Stats(v1::StatsRequest());
        if (stats.ok() && stats->entries() == 7) ++ok;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 80);
}

}  // namespace
}  // namespace autotune::client
