// End to end: who may call what on the real autotuned (service/rpc/auth.h):
// every RPC against every kind of caller, the token file read again on
// SIGHUP, the Unix peer's uid mapped to a role, a tuner cancelling only its
// own jobs, and the audit log's line for each mutating call.
#include <signal.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/token.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;

using Stub = v1::Autotune::Stub;
// One call of a method with a minimal request; its status.
using Call = std::function<grpc::Status(Stub&, grpc::ClientContext&)>;

// A call for every method of autotune.v1.Autotune. Its requests are the
// smallest that reach the handler; most are then refused for what they
// lack, which is past authorization.
std::map<std::string, Call> EveryMethod() {
  std::map<std::string, Call> calls;
  calls["Lookup"] = [](Stub& s, grpc::ClientContext& c) {
    v1::LookupRequest request;
    request.set_family("vector_scale");
    v1::LookupResponse response;
    return s.Lookup(&c, request, &response);
  };
  calls["BatchLookup"] = [](Stub& s, grpc::ClientContext& c) {
    v1::BatchLookupResponse response;
    return s.BatchLookup(&c, {}, &response);
  };
  calls["RequestTuning"] = [](Stub& s, grpc::ClientContext& c) {
    v1::RequestTuningResponse response;
    return s.RequestTuning(&c, {}, &response);
  };
  calls["RegisterKernel"] = [](Stub& s, grpc::ClientContext& c) {
    v1::RegisterKernelResponse response;
    return s.RegisterKernel(&c, {}, &response);
  };
  calls["GetBinaries"] = [](Stub& s, grpc::ClientContext& c) {
    v1::GetBinariesResponse response;
    return s.GetBinaries(&c, {}, &response);
  };
  calls["ListKernels"] = [](Stub& s, grpc::ClientContext& c) {
    v1::ListKernelsResponse response;
    return s.ListKernels(&c, {}, &response);
  };
  calls["SubmitJob"] = [](Stub& s, grpc::ClientContext& c) {
    std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader = s.SubmitJob(&c, {});
    v1::JobProgress progress;
    while (reader->Read(&progress)) {
    }
    return reader->Finish();
  };
  calls["GetJob"] = [](Stub& s, grpc::ClientContext& c) {
    v1::GetJobRequest request;
    request.set_id("0000000000000000");
    v1::Job response;
    return s.GetJob(&c, request, &response);
  };
  calls["ListJobs"] = [](Stub& s, grpc::ClientContext& c) {
    v1::ListJobsResponse response;
    return s.ListJobs(&c, {}, &response);
  };
  calls["CancelJob"] = [](Stub& s, grpc::ClientContext& c) {
    v1::CancelJobRequest request;
    request.set_id("0000000000000000");
    v1::Job response;
    return s.CancelJob(&c, request, &response);
  };
  calls["ListEntries"] = [](Stub& s, grpc::ClientContext& c) {
    v1::ListEntriesResponse response;
    return s.ListEntries(&c, {}, &response);
  };
  calls["GetEntry"] = [](Stub& s, grpc::ClientContext& c) {
    v1::GetEntryResponse response;
    return s.GetEntry(&c, {}, &response);
  };
  calls["Invalidate"] = [](Stub& s, grpc::ClientContext& c) {
    v1::InvalidateRequest request;
    request.set_all(true);
    request.set_dry_run(true);
    v1::InvalidateResponse response;
    return s.Invalidate(&c, request, &response);
  };
  calls["Stats"] = [](Stub& s, grpc::ClientContext& c) {
    v1::StatsResponse response;
    return s.Stats(&c, {}, &response);
  };
  calls["Export"] = [](Stub& s, grpc::ClientContext& c) {
    std::unique_ptr<grpc::ClientReader<v1::ExportResponse>> reader = s.Export(&c, {});
    v1::ExportResponse part;
    while (reader->Read(&part)) {
    }
    return reader->Finish();
  };
  calls["Import"] = [](Stub& s, grpc::ClientContext& c) {
    v1::ImportResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::ImportRequest>> writer = s.Import(&c, &response);
    writer->WritesDone();
    return writer->Finish();
  };
  calls["Backup"] = [](Stub& s, grpc::ClientContext& c) {
    v1::BackupRequest request;  // a relative path: refused once authorized
    request.set_path("not-absolute.db");
    v1::BackupResponse response;
    return s.Backup(&c, request, &response);
  };
  calls["UnregisterKernel"] = [](Stub& s, grpc::ClientContext& c) {
    v1::UnregisterKernelRequest request;  // no such family: refused once authorized
    request.set_name("nope");
    v1::UnregisterKernelResponse response;
    return s.UnregisterKernel(&c, request, &response);
  };
  calls["CreateLoginLink"] = [](Stub& s, grpc::ClientContext& c) {
    v1::CreateLoginLinkResponse response;  // no admin page here: refused once authorized
    return s.CreateLoginLink(&c, {}, &response);
  };
  calls["GarbageCollect"] = [](Stub& s, grpc::ClientContext& c) {
    v1::GarbageCollectRequest request;
    request.set_dry_run(true);
    v1::GarbageCollectResponse response;
    return s.GarbageCollect(&c, request, &response);
  };
  return calls;
}

// The role each method needs, as the operations guide states it.
int NeededLevel(const std::string& method) {
  static const std::map<std::string, int> levels = {
      {"Lookup", 1},         {"BatchLookup", 1},   {"GetBinaries", 1},      {"ListKernels", 1},
      {"GetJob", 1},         {"ListJobs", 1},      {"ListEntries", 1},      {"GetEntry", 1},
      {"Stats", 1},          {"Export", 1},        {"SubmitJob", 2},        {"CancelJob", 2},
      {"Import", 2},         {"RequestTuning", 2}, {"RegisterKernel", 3},   {"Invalidate", 3},
      {"GarbageCollect", 3}, {"Backup", 3},        {"UnregisterKernel", 3}, {"CreateLoginLink", 1}};
  auto it = levels.find(method);
  return it == levels.end() ? 99 : it->second;
}

class AuthEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = dir_.File("tokens");
    audit_ = dir_.File("audit.log");
    for (const char* role : {"reader", "tuner", "admin"}) {
      ASSERT_OK_AND_ASSIGN(std::string token, NewToken());
      token_of_[role] = token;
    }
    ASSERT_OK_AND_ASSIGN(token_of_["tuner2"], NewToken());
    ASSERT_OK_AND_ASSIGN(token_of_["expired"], NewToken());
    ASSERT_OK(WriteTokens(true));
  }
  void TearDown() override {
    stub_.reset();  // an open connection holds the daemon's shutdown up
    if (daemon_ != nullptr) daemon_->Stop();
  }

  absl::Status WriteTokens(bool with_tuner) {
    std::string text = "# test tokens\n";
    absl::StrAppend(&text, "reader dash ", TokenHash(token_of_["reader"]), "\n");
    if (with_tuner) absl::StrAppend(&text, "tuner ci ", TokenHash(token_of_["tuner"]), "\n");
    absl::StrAppend(&text, "tuner ci2 ", TokenHash(token_of_["tuner2"]), "\n");
    absl::StrAppend(&text, "admin ops ", TokenHash(token_of_["admin"]), "\n");
    absl::StrAppend(&text, "admin old ", TokenHash(token_of_["expired"]),
                    " expires=2020-01-01T00:00:00Z\n");
    return WriteFileAtomically(tokens_, text, "tokens");
  }

  void StartDaemon(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--token-file", tokens_,  "--audit-log",
                                     audit_,         "--gpus", "none"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = std::make_unique<Daemon>(dir_.path(), args);
    ASSERT_OK(daemon_->Start());
    stub_ = v1::Autotune::NewStub(
        grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Run(const Call& call, const std::string& token) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    return call(*stub_, context);
  }

  TempDir dir_;
  std::string tokens_;
  std::string audit_;
  std::map<std::string, std::string> token_of_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<Stub> stub_;
};

bool Denied(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

TEST_F(AuthEndToEndTest, EveryRpcAgainstEveryKindOfCaller) {
  // The socket's owner (this test) is given no role, so only tokens count.
  StartDaemon({"--peer-role", absl::StrCat("uid:", getuid(), "=none")});
  const std::map<std::string, Call> calls = EveryMethod();
  const google::protobuf::ServiceDescriptor* service =
      v1::LookupRequest::descriptor()->file()->FindServiceByName("Autotune");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(static_cast<int>(calls.size()), service->method_count());
  struct Kind {
    std::string name;
    std::string token;
    int level;  // 0: refused as unauthenticated
  };
  const std::vector<Kind> kinds = {{"no token", "", 0},
                                   {"wrong token", "not-a-token", 0},
                                   {"expired token", token_of_["expired"], 0},
                                   {"reader", token_of_["reader"], 1},
                                   {"tuner", token_of_["tuner"], 2},
                                   {"admin", token_of_["admin"], 3}};
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string method = service->method(i)->name();
    ASSERT_TRUE(calls.contains(method)) << method << ": no call in the table";
    for (const Kind& kind : kinds) {
      const grpc::Status status = Run(calls.at(method), kind.token);
      SCOPED_TRACE(absl::StrCat(method, " by ", kind.name, ": ", status.error_code(), " ",
                                status.error_message()));
      if (kind.level == 0) {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      } else if (kind.level < NeededLevel(method)) {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
        EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(method, " needs the")));
      } else {
        EXPECT_FALSE(Denied(status));
      }
    }
  }
  // Health stays open to anyone: grpc.health.v1.Health/Check with an empty
  // HealthCheckRequest (the overall status).
  grpc::GenericStub health(
      grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::CompletionQueue cq;
  grpc::Slice nothing("");  // an empty HealthCheckRequest
  grpc::ByteBuffer request(&nothing, 1);
  grpc::ByteBuffer reply;
  grpc::Status checked;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      health.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  call->Finish(&reply, &checked, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_TRUE(checked.ok()) << checked.error_code() << " " << checked.error_message();
}

TEST_F(AuthEndToEndTest, SighupReadsTheTokenFileAgain) {
  StartDaemon({"--peer-role", absl::StrCat("uid:", getuid(), "=none")});
  const Call stats = EveryMethod().at("Stats");
  ASSERT_TRUE(Run(stats, token_of_["tuner"]).ok());
  ASSERT_OK(WriteTokens(false));
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  grpc::Status refused;
  for (int i = 0; i < 100; ++i) {
    refused = Run(stats, token_of_["tuner"]);
    if (!refused.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Run(stats, token_of_["reader"]).ok());
  EXPECT_THAT(daemon_->Stderr(), HasSubstr("received SIGHUP: 4 tokens loaded"));
  // Found on e01f360: a file with one bad line kept the tokens loaded
  // before, so the revocation it carried silently did not happen. Now the
  // bad line is skipped and said, and every other line applies: the reader
  // token, no longer in the file, is refused.
  ASSERT_OK(WriteFileAtomically(
      tokens_, absl::StrCat("reader broken-line\nadmin ops ", TokenHash(token_of_["admin"]), "\n"),
      "tokens"));
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  for (int i = 0; i < 100 && daemon_->Stderr().find("lines skipped") == std::string::npos; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(daemon_->Stderr(), HasSubstr("1 tokens loaded; 1 lines skipped"));
  EXPECT_THAT(daemon_->Stderr(), HasSubstr("tokens:1:"));
  EXPECT_EQ(Run(stats, token_of_["reader"]).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Run(stats, token_of_["admin"]).ok());
}

TEST_F(AuthEndToEndTest, TheSocketOwnerIsAdminAndOtherPeersAreMappedByUid) {
  StartDaemon({});
  const std::map<std::string, Call> calls = EveryMethod();
  EXPECT_TRUE(Run(calls.at("Invalidate"), "").ok());
  stub_.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  StartDaemon({"--peer-role", absl::StrCat("uid:", getuid(), "=reader")});
  EXPECT_TRUE(Run(calls.at("Stats"), "").ok());
  const grpc::Status invalidate = Run(calls.at("Invalidate"), "");
  EXPECT_EQ(invalidate.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(invalidate.error_message(), HasSubstr(absl::StrCat("uid:", getuid(), " has reader")));
}

TEST_F(AuthEndToEndTest, ATunerCancelsOnlyItsOwnJobsAndEveryMutatingCallIsAudited) {
  StartDaemon({"--peer-role", absl::StrCat("uid:", getuid(), "=none")});
  // A job that cannot plan still is not created; one that compiles only
  // needs a family: register a small one as admin.
  v1::RegisterKernelRequest family_request;
  v1::KernelFamily& family = *family_request.mutable_family();
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "copy_test"
        source: "extern \"C\" __global__ void copy_test(const float* x, float* y, long n) { long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }\nextern \"C\" __global__ void copy_test_reference(const float* x, float* y, long n) { long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }"
        kernel_name: "copy_test"
        params {
          name: "BLOCK"
          values: [ 128, 256 ]
        }
        dims { name: "n" min: 1 }
        dtypes: [ FLOAT32 ]
        buffers {
          name: "x"
          shape: [ "n" ]
          role: IN
          fill { kind: UNIFORM low: -1 high: 1 }
        }
        buffers {
          name: "y"
          shape: [ "n" ]
          role: OUT
        }
        scalars { name: "count" dtype: INT64 value: "n" }
        launch {
          grid: [ "ceil_div(n, BLOCK)" ]
          block: [ "BLOCK" ]
        }
        binding: DEFINES
        reference {
          kernel_name: "copy_test_reference"
          launch {
            grid: [ "ceil_div(n, 256)" ]
            block: [ "256" ]
          }
        }
        tolerances { dtype: FLOAT32 rtol: 0 atol: 0 }
        bytes_per_call: "8 * n"
        flops_per_call: "0"
      )pb",
      &family));
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token_of_["admin"]);
    v1::RegisterKernelResponse response;
    const grpc::Status registered = stub_->RegisterKernel(&context, family_request, &response);
    ASSERT_TRUE(registered.ok()) << registered.error_message();
  }
  v1::SubmitJobRequest submit;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        spec {
          manifest {
            items {
              family: "copy_test"
              dims {
                name: "n"
                values: [ 4096 ]
              }
              dtypes: [ FLOAT32 ]
            }
          }
          options { compile_only: true }
        }
      )pb",
      &submit));
  std::string job_id;
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token_of_["tuner"]);
    std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
        stub_->SubmitJob(&context, submit);
    v1::JobProgress progress;
    while (reader->Read(&progress)) job_id = progress.job().id();
    const grpc::Status finished = reader->Finish();
    ASSERT_TRUE(finished.ok()) << finished.error_message();
  }
  ASSERT_FALSE(job_id.empty());
  v1::CancelJobRequest cancel;
  cancel.set_id(job_id);
  const auto cancel_as = [&](const std::string& who) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token_of_[who]);
    v1::Job job;
    return stub_->CancelJob(&context, cancel, &job);
  };
  const grpc::Status other = cancel_as("tuner2");
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(other.error_message(), HasSubstr("was submitted by token:ci"));
  EXPECT_FALSE(Denied(cancel_as("tuner")));
  EXPECT_FALSE(Denied(cancel_as("admin")));
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token_of_["reader"]);
    v1::GetJobRequest get;
    get.set_id(job_id);
    v1::Job job;
    ASSERT_TRUE(stub_->GetJob(&context, get, &job).ok());
    EXPECT_EQ(job.submitted_by(), "token:ci");
  }
  EXPECT_FALSE(Denied(Run(EveryMethod().at("Invalidate"), token_of_["admin"])));
  EXPECT_FALSE(Denied(Run(EveryMethod().at("GarbageCollect"), token_of_["admin"])));
  EXPECT_FALSE(Denied(Run(EveryMethod().at("Import"), token_of_["tuner"])));
  EXPECT_FALSE(Denied(Run(EveryMethod().at("RequestTuning"), token_of_["tuner"])));
  // A refused call is no mutation: it is not in the log.
  EXPECT_TRUE(Denied(Run(EveryMethod().at("Invalidate"), token_of_["reader"])));

  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(audit_, "audit log"));
  std::vector<google::protobuf::Struct> lines;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    google::protobuf::Struct parsed;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &parsed).ok())
        << line;
    lines.push_back(parsed);
  }
  std::vector<std::string> seen;
  for (const google::protobuf::Struct& line : lines) {
    const auto& f = line.fields();
    for (const char* field : {"time", "caller", "role", "method", "target", "code", "message"}) {
      EXPECT_TRUE(f.contains(field)) << field;
    }
    seen.push_back(absl::StrCat(f.at("method").string_value(), " ", f.at("caller").string_value(),
                                " ", f.at("code").string_value()));
  }
  EXPECT_THAT(seen, ::testing::ElementsAre("RegisterKernel token:ops OK", "SubmitJob token:ci OK",
                                           "CancelJob token:ci2 PERMISSION_DENIED",
                                           ::testing::StartsWith("CancelJob token:ci "),
                                           ::testing::StartsWith("CancelJob token:ops "),
                                           "Invalidate token:ops OK", "GarbageCollect token:ops OK",
                                           "Import token:ci INVALID_ARGUMENT",
                                           ::testing::StartsWith("RequestTuning token:ci ")));
  EXPECT_THAT(lines[1].fields().at("message").string_value(), HasSubstr(job_id));
}

// The CLI's side: `autotune token new` makes a token and the line for the
// daemon's file; `--token-file` presents it.
TEST_F(AuthEndToEndTest, TheCliMakesAndPresentsTokens) {
  StartDaemon({"--peer-role", absl::StrCat("uid:", getuid(), "=none")});
  const std::string token_path = dir_.File("cli.token");
  CommandResult made = RunCommand(
      {AutotuneCliPath(), "token", "new", "--role", "reader", "--id", "cli", "--out", token_path});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_THAT(made.out, ::testing::StartsWith("reader cli sha256:"));
  ASSERT_OK_AND_ASSIGN(std::string tokens, ReadFile(tokens_, "tokens"));
  ASSERT_OK(WriteFileAtomically(tokens_, tokens + made.out, "tokens"));
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  CommandResult stats;
  for (int i = 0; i < 100; ++i) {
    stats = RunCommand(
        {AutotuneCliPath(), "--server", daemon_->address(), "--token-file", token_path, "stats"});
    if (stats.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  CommandResult invalidate =
      RunCommand({AutotuneCliPath(), "--server", daemon_->address(), "--token-file", token_path,
                  "invalidate", "--all", "--dry-run"});
  EXPECT_NE(invalidate.exit_code, 0);
  EXPECT_THAT(invalidate.err, HasSubstr("Invalidate needs the admin role; token:cli has reader"));
  CommandResult without = RunCommand({AutotuneCliPath(), "--server", daemon_->address(), "stats"});
  EXPECT_NE(without.exit_code, 0);
  EXPECT_THAT(without.err, HasSubstr("--token-file"));
}

}  // namespace
}  // namespace autotune::testing
