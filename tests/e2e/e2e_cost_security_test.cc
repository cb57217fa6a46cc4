// What one call may cost a real daemon: a manifest is refused by its count
// before any problem is built, a BatchLookup stops at its CPU budget, and
// every time a job asks for is bounded. Each test names the finding it
// guards (found on 2bc4d71); each failed there.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The CPU time `pid` has used, user and system.
absl::Duration CpuTimeOf(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t name_end = text.rfind(')');
  if (name_end == std::string::npos) return absl::ZeroDuration();
  // utime and stime: the 12th and 13th fields after the command name.
  const std::vector<std::string> fields =
      absl::StrSplit(text.substr(name_end + 2), ' ', absl::SkipEmpty());
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::ZeroDuration();
  }
  return absl::Seconds(static_cast<double>(utime + stime) /
                       static_cast<double>(sysconf(_SC_CLK_TCK)));
}

// A field of /proc/`pid`/status in kB ("VmHWM": the peak resident set,
// "VmRSS": the resident set now); -1 when it cannot be read.
int64_t StatusKbOf(pid_t pid, absl::string_view field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, absl::StrCat(field, ":"))) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kb = 0;
    if (words.size() >= 2 && absl::SimpleAtoi(words[1], &kb)) return kb;
  }
  return -1;
}

class CostSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(
        dir_.path(), std::vector<std::string>{"--kernels", "none", "--gpus", "none"});
    ASSERT_OK(daemon_->Start());
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    args.SetMaxReceiveMessageSize(64 << 20);
    stub_ = v1::Autotune::NewStub(
        grpc::CreateCustomChannel(daemon_->address(), grpc::InsecureChannelCredentials(), args));
    v1::RegisterKernelRequest request;
    *request.mutable_family() = VectorScaleFamily();
    grpc::ClientContext context;
    v1::RegisterKernelResponse response;
    ASSERT_TRUE(stub_->RegisterKernel(&context, request, &response).ok());
  }

  void TearDown() override {
    // Still answering, and no job was stored by what was refused.
    grpc::ClientContext context;
    v1::ListJobsResponse jobs;
    ASSERT_TRUE(stub_->ListJobs(&context, v1::ListJobsRequest(), &jobs).ok());
    EXPECT_EQ(jobs.jobs_size(), 0);
    EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Stderr();
  }

  grpc::Status Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
        stub_->SubmitJob(&context, request);
    v1::JobProgress progress;
    while (reader->Read(&progress)) {
    }
    return reader->Finish();
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::Autotune::Stub> stub_;
};

// Finding: a manifest of 2^20 one-problem items was expanded, and its plan
// grown to the variant limit, before it was refused: 6.5 min of CPU and
// 3.7 GB, 2.4 GB kept. Then it was refused on its count, after gRPC had
// parsed its 48 MB into messages (3.2 s and 634 MB). Now its items are
// counted on the wire before any message is built.
TEST_F(CostSecurityTest, AManifestOfAMillionProblemsIsRefusedByItsCount) {
  v1::JobSpec spec;
  spec.mutable_options()->set_compile_only(true);
  for (int64_t n = 1; n <= (int64_t{1} << 20); ++n) {
    v1::ManifestItem* item = spec.mutable_manifest()->add_items();
    item->set_family("vector_scale");
    item->add_dtypes(v1::BFLOAT16);
    v1::ManifestItem::DimValues* batch = item->add_dims();
    batch->set_name("batch");
    batch->add_values(1);
    v1::ManifestItem::DimValues* size = item->add_dims();
    size->set_name("n");
    size->add_values(n);
  }
  const int64_t rss_before_kb = StatusKbOf(daemon_->pid(), "VmRSS");
  const int64_t peak_before_kb = StatusKbOf(daemon_->pid(), "VmHWM");
  ASSERT_GT(rss_before_kb, 0);
  const absl::Duration cpu_before = CpuTimeOf(daemon_->pid());
  const grpc::Status status = Submit(spec);
  const absl::Duration cpu = CpuTimeOf(daemon_->pid()) - cpu_before;
  const int64_t peak_after_kb = StatusKbOf(daemon_->pid(), "VmHWM");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              StartsWith("manifest.items: 1048576 problems, more than the 100000 one job may "
                         "hold"));
  std::cout << "refusing 2^20 items cost the daemon " << absl::FormatDuration(cpu)
            << " of CPU; its peak resident set " << peak_before_kb / 1024 << " -> "
            << peak_after_kb / 1024 << " MiB (resident before: " << rss_before_kb / 1024
            << " MiB)\n";
  // The goals of the finding: under 1 s and 100 MB more than it held. The
  // sanitized builds leave this test out (their allocator's own cost).
  EXPECT_LT(cpu, absl::Seconds(1));
  EXPECT_LT(peak_after_kb - rss_before_kb, 100 * 1024);

  // Sharded alike: each shard's job reads the whole manifest.
  spec.mutable_options()->set_shard_count(64);
  const grpc::Status sharded = Submit(spec);
  EXPECT_EQ(sharded.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(sharded.error_message(), HasSubstr("1048576 problems, more than the 100000"));
}

// Finding: one 4 MB BatchLookup of 100,000 misses cost 48 s of the daemon's
// CPU. Now it stops at its budget; what it did not answer says so, item by
// item.
TEST_F(CostSecurityTest, ABatchOfAHundredThousandMissesStopsAtItsCpuBudget) {
  v1::BatchLookupRequest request;
  for (int64_t n = 1; n <= 100000; ++n) {
    v1::LookupRequest* lookup = request.add_lookups();
    lookup->set_family("vector_scale");
    (*lookup->mutable_problem()->mutable_dims())["batch"] = 1;
    (*lookup->mutable_problem()->mutable_dims())["n"] = n;
    lookup->mutable_problem()->set_dtype(v1::BFLOAT16);
    lookup->mutable_device()->set_name("NVIDIA H100 80GB HBM3");
  }
  const absl::Duration cpu_before = CpuTimeOf(daemon_->pid());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::BatchLookupResponse response;
  const grpc::Status status = stub_->BatchLookup(&context, request, &response);
  const absl::Duration cpu = CpuTimeOf(daemon_->pid()) - cpu_before;
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 100000);
  int answered = 0;
  for (int i = 0; i < response.results_size(); ++i) {
    const v1::BatchLookupResult& result = response.results(i);
    if (result.has_response()) {
      ASSERT_EQ(i, answered) << "answered after one that was not";
      EXPECT_EQ(result.response().match(), v1::MISS);
      ++answered;
      continue;
    }
    ASSERT_EQ(result.error_code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
    ASSERT_EQ(result.error_message(),
              absl::StrCat("lookups[", i,
                           "]: not answered: this BatchLookup used its 1s of the daemon's CPU "
                           "on its first ",
                           answered, " items; send the rest in another call"));
  }
  std::cout << answered << " of 100000 misses answered; the call cost the daemon "
            << absl::FormatDuration(cpu) << " of CPU\n";
  // A miss cost 0.45 ms on 2bc4d71 (about 2,200 answered in the budget);
  // with the family's expressions parsed once, about 11 us (91,776 answered
  // in 1.33 s of the call's CPU, on a quiet 2-core CI-sized machine). The
  // daemon's CPU time per miss grows with what runs beside it: 55,744-60,816
  // answered beside a compile, 34,512 among CI's parallel tests. The floor
  // tells the regression (2,200) from any of those; what a miss costs is
  // autotune-bench-lookup's to measure.
  EXPECT_GE(answered, 20000);
  // The budget and what the call costs outside it (the 4 MB request parsed,
  // 100,000 results written): 1.3-1.9 s seen, against 48 s before.
  EXPECT_LT(cpu, absl::Seconds(3));
}

// Finding: a job's variant_timeout_s had no upper bound (a launch could hold
// a GPU for a year), nor had its search's max_seconds.
TEST_F(CostSecurityTest, EveryTimeAJobAsksForIsBounded) {
  v1::JobSpec spec;
  v1::ManifestItem* item = spec.mutable_manifest()->add_items();
  item->set_family("vector_scale");
  item->add_dtypes(v1::BFLOAT16);
  for (const char* dim : {"batch", "n"}) {
    v1::ManifestItem::DimValues* values = item->add_dims();
    values->set_name(dim);
    values->add_values(1024);
  }
  spec.mutable_options()->set_variant_timeout_s(1e9);
  grpc::Status status = Submit(spec);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "options.variant_timeout_s is 1000000000, not in 0..60 (0 = the daemon's variant "
            "timeout)");
  spec.mutable_options()->set_variant_timeout_s(0);
  spec.mutable_options()->mutable_search()->set_max_seconds(1e9);
  status = Submit(spec);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "options.search.max_seconds is 1000000000, not in 0..86400 (0 = no limit)");
}

}  // namespace
}  // namespace autotune::testing
