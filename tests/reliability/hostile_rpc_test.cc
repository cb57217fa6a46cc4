// Hostile requests to the real daemon, beyond the size limits that
// tests/e2e/e2e_operations_test.cc covers: huge parameter spaces and problem
// lists, deep protobuf nesting, long expressions. Each must be refused with
// an error that names what was wrong, promptly (a check that scans pairwise
// would take hours on these), and change nothing: the daemon answers the
// next call, and no family or job is left behind.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "proto/problem.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;

class HostileRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{"--kernels", "none"});
    ASSERT_OK(daemon_->Start());
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(256 << 20);
    channel_ =
        grpc::CreateCustomChannel(daemon_->address(), grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Autotune::NewStub(channel_);
    v1::RegisterKernelRequest request;
    *request.mutable_family() = VectorScaleFamily();
    grpc::ClientContext context;
    v1::RegisterKernelResponse response;
    ASSERT_TRUE(stub_->RegisterKernel(&context, request, &response).ok());
  }

  void TearDown() override {
    // Still answering, and nothing was added by what was refused.
    grpc::ClientContext context;
    v1::ListKernelsResponse kernels;
    ASSERT_TRUE(stub_->ListKernels(&context, v1::ListKernelsRequest(), &kernels).ok());
    EXPECT_EQ(kernels.kernels_size(), 1);
    grpc::ClientContext jobs_context;
    v1::ListJobsResponse jobs;
    ASSERT_TRUE(stub_->ListJobs(&jobs_context, v1::ListJobsRequest(), &jobs).ok());
    EXPECT_EQ(jobs.jobs_size(), 0);
    EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Stderr();
  }

  // RegisterKernel of `family`; the status, and how long it took.
  grpc::Status Register(const v1::KernelFamily& family, absl::Duration* took) {
    v1::RegisterKernelRequest request;
    *request.mutable_family() = family;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    v1::RegisterKernelResponse response;
    const absl::Time start = absl::Now();
    grpc::Status status = stub_->RegisterKernel(&context, request, &response);
    *took = absl::Now() - start;
    return status;
  }

  static v1::KernelFamily Renamed(const std::string& name) {
    v1::KernelFamily family = VectorScaleFamily();
    family.set_name(name);
    return family;
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Autotune::Stub> stub_;
};

// The deadlines below are generous for a fast check and far too short for a
// pairwise scan of millions of values.

TEST_F(HostileRpcTest, AParameterWithMillionsOfValuesIsRefusedAtOnce) {
  v1::KernelFamily family = Renamed("huge_param");
  v1::TunableParameter* param = family.mutable_params(0);
  param->clear_values();
  for (int64_t v = 1; v <= (int64_t{1} << 22); ++v) param->add_values(v);
  absl::Duration took;
  const grpc::Status status = Register(family, &took);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("configs, more than the limit of 1048576"));
  EXPECT_LT(took, absl::Seconds(20));
}

TEST_F(HostileRpcTest, AMillionDistinctValuesAreCheckedInLinearTime) {
  // Up to the limit: every value is looked at for duplicates.
  v1::KernelFamily family = Renamed("million_values");
  const int64_t others = ConfigCount(family) / family.params(0).values_size();
  v1::TunableParameter* param = family.mutable_params(0);
  param->clear_values();
  for (int64_t v = 1; v < (int64_t{1} << 20) / others; ++v) param->add_values(v);
  param->add_values(7);  // one duplicate, at the end
  absl::Duration took;
  const grpc::Status status = Register(family, &took);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("7 is listed twice"));
  EXPECT_LT(took, absl::Seconds(20));
}

TEST_F(HostileRpcTest, ASpaceBeyondTwoToTheSixtyThreeIsRefused) {
  v1::KernelFamily family = Renamed("wide_space");
  for (int i = 0; i < 70; ++i) {
    v1::TunableParameter* param = family.add_params();
    param->set_name(absl::StrCat("P", i));
    param->add_values(1);
    param->add_values(2);
  }
  absl::Duration took;
  const grpc::Status status = Register(family, &took);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("more than 2^63 configs"));
}

TEST_F(HostileRpcTest, AJobOfMillionsOfProblemsOrValuesIsRefusedAtOnce) {
  struct Case {
    const char* name;
    v1::Manifest manifest;
    const char* expected;
  };
  std::vector<Case> cases;
  {
    Case c{"problems", {}, "more than 1048576 problems"};
    v1::ManifestItem* item = c.manifest.add_items();
    item->set_family("vector_scale");
    item->add_dtypes(v1::BFLOAT16);
    for (const char* dim : {"batch", "n"}) {
      v1::ManifestItem::DimValues* values = item->add_dims();
      values->set_name(dim);
      for (int64_t v = 1; v <= 2048; ++v) values->add_values(v);
    }
    cases.push_back(std::move(c));
  }
  {
    Case c{"values", {}, "is listed twice"};
    v1::ManifestItem* item = c.manifest.add_items();
    item->set_family("vector_scale");
    item->add_dtypes(v1::BFLOAT16);
    v1::ManifestItem::DimValues* values = item->add_dims();
    values->set_name("n");
    for (int64_t v = 1; v <= 4000000; ++v) values->add_values(v);
    values->add_values(3);
    cases.push_back(std::move(c));
  }
  {
    Case c{"dims", {}, "is also dims[0]"};
    v1::ManifestItem* item = c.manifest.add_items();
    item->set_family("vector_scale");
    for (int i = 0; i < 1000000; ++i) {
      v1::ManifestItem::DimValues* values = item->add_dims();
      values->set_name(absl::StrCat("d", i));
      values->add_values(1);
    }
    v1::ManifestItem::DimValues* again = item->add_dims();
    again->set_name("d0");
    again->add_values(1);
    cases.push_back(std::move(c));
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::SubmitJobRequest request;
    *request.mutable_spec()->mutable_manifest() = c.manifest;
    request.mutable_spec()->mutable_options()->set_compile_only(true);  // no GPU needed
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    const absl::Time start = absl::Now();
    std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
        stub_->SubmitJob(&context, request);
    v1::JobProgress progress;
    while (reader->Read(&progress)) {
    }
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.expected));
    EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  }
}

TEST_F(HostileRpcTest, AHundredThousandFoldNestedExpressionIsRefused) {
  v1::KernelFamily family = Renamed("deep_expression");
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "(";
  deep += "1";
  for (int i = 0; i < 100000; ++i) deep += ")";
  family.add_constraints(deep + " > 0");
  absl::Duration took;
  const grpc::Status status = Register(family, &took);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("constraints[0]"));
  EXPECT_THAT(status.error_message(), HasSubstr("characters long, at most 4096"));
  EXPECT_LT(took, absl::Seconds(20));
}

// Raw bytes, as no generated client would send them: a LookupRequest that
// would be answered (a MISS), with an unknown field 99 that is a group
// nested 100,000 deep. Answered at all, the nesting was accepted.
TEST_F(HostileRpcTest, DeepProtobufNestingIsRefusedAndTheDaemonGoesOn) {
  v1::LookupRequest valid;
  valid.set_family("vector_scale");
  (*valid.mutable_problem()->mutable_dims())["batch"] = 1;
  (*valid.mutable_problem()->mutable_dims())["n"] = 4096;
  valid.mutable_problem()->set_dtype(v1::BFLOAT16);
  valid.mutable_device()->set_name("NVIDIA H200");
  {
    grpc::ClientContext context;
    v1::LookupResponse answer;
    ASSERT_TRUE(stub_->Lookup(&context, valid, &answer).ok()) << "the request itself is valid";
  }
  std::string bytes = valid.SerializeAsString();
  const char start_group = static_cast<char>(0x9b), end_group = static_cast<char>(0x9c);
  // Field 99: varint tag (99 << 3) | 3 = 795 = 0x9b 0x06; end (99 << 3) | 4 = 0x9c 0x06.
  for (int i = 0; i < 100000; ++i) bytes += std::string{start_group, '\x06'};
  for (int i = 0; i < 100000; ++i) bytes += std::string{end_group, '\x06'};
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  const grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel_.get(),
      grpc::internal::RpcMethod("/autotune.v1.Autotune/Lookup",
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &context, request, &response);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
}

}  // namespace
}  // namespace autotune::testing
