// End to end on a GPU: the real daemon runs a warmup job over the
// fault-injection families (tests/faults/) while a client keeps asking for
// lookups. Every variant must end in its status with its context, the job
// must pick a correct config per problem, and not one lookup may fail or
// wait on the job. Skips, saying why, where no GPU can be used.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "client/client.h"
#include "client/kernel_loader.h"
#include "client/startup_lookup.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "kernels/gpu/cuda_driver.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/pools/profile_pool.h"
#include "tests/faults/fault_cases.h"
#include "tests/gpu/gpu_test_env.h"
#include "tests/support/process.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;

// Why no GPU can be used here, or empty.
std::string NoGpuReason() {
  service::ProfilePoolOptions options;
  options.worker_path = WorkerPath();
  options.devices = {0};
  absl::StatusOr<std::unique_ptr<service::ProfilePool>> pool = service::ProfilePool::Start(options);
  return pool.ok() ? "" : std::string(pool.status().message());
}

TEST(GpuEndToEndTest, FaultsEndInTheirStatusWhileLookupsKeepAnswering) {
  if (const std::string why = NoGpuReason(); !why.empty()) {
    // Where a GPU is known to be present (tests/gpu/run.sh), not finding it
    // is a failure, not a reason to skip.
    if (GpuRequired()) FAIL() << "no GPU: " << why;
    GTEST_SKIP() << "no GPU: " << why;
  }
  TempDir dir;
  Daemon daemon(dir.path(), {"--kernels", "none", "--variant-timeout", "2"});
  ASSERT_OK(daemon.Start());
  auto cli = [&](std::vector<std::string> args, absl::Duration timeout = absl::Seconds(60)) {
    args.insert(args.begin(), {AutotuneCliPath(), "--server", daemon.address()});
    return RunCommand(args, timeout);
  };

  const std::string faults_dir = FaultsDir();
  std::string manifest_text;
  for (const FaultFamily& family : FaultFamilies()) {
    CommandResult registered = cli({"register", faults_dir + "/" + family.name + ".textproto"});
    ASSERT_EQ(registered.exit_code, 0) << registered.err;
    absl::StrAppend(&manifest_text, "items { family: \"", family.name,
                    "\" dims { name: \"n\" values: ", kFaultProblemElements, " } ");
    for (v1::DType dtype : family.dtypes) {
      absl::StrAppend(&manifest_text, "dtypes: ", v1::DType_Name(dtype), " ");
    }
    absl::StrAppend(&manifest_text, "}\n");
  }
  const std::string manifest = dir.path() + "/faults.manifest";
  std::ofstream(manifest) << manifest_text;

  // A client asking for lookups the whole time.
  client::ClientOptions options;
  options.address = daemon.address();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::Client> client, client::Client::Connect(options));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> answered{0}, failed{0};
  std::atomic<int64_t> slowest_us{0};
  std::string first_failure;
  std::thread lookups([&] {
    v1::LookupRequest request;
    request.set_family("fault_oob");
    *request.mutable_problem() = FaultProblem(v1::FLOAT32);
    while (!stop) {
      const absl::Time start = absl::Now();
      absl::StatusOr<v1::LookupResponse> response = client->Lookup(request);
      const int64_t us = absl::ToInt64Microseconds(absl::Now() - start);
      if (us > slowest_us) slowest_us = us;
      if (response.ok()) {
        ++answered;
      } else if (failed++ == 0) {
        first_failure = response.status().ToString();
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  CommandResult warmup = cli({"warmup", manifest, "--json"}, absl::Minutes(8));
  stop = true;
  lookups.join();

  ASSERT_EQ(warmup.exit_code, 0) << warmup.err << "\n" << daemon.Stderr();
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(warmup.out, &job).ok()) << warmup.out;
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  Summary("e2e", absl::StrFormat("%d lookups answered during the warmup job, %d failed, "
                                 "slowest %.1f ms; job: %s",
                                 answered.load(), failed.load(), slowest_us.load() / 1000.0,
                                 job.counts().ShortDebugString()));
  EXPECT_EQ(failed.load(), 0) << first_failure;
  EXPECT_GT(answered.load(), 20);
  EXPECT_LT(slowest_us.load(), 1000000) << "a lookup waited on the job";
  EXPECT_GT(job.counts().timeout(), 0);
  EXPECT_GT(job.counts().fault(), 0);
  EXPECT_GT(job.counts().wrong_result(), 0);
  EXPECT_GT(job.counts().unsupported(), 0);
  EXPECT_EQ(job.results_size(), job.counts().problems());

  // Each problem: the chosen config is a correct one, and every variant's
  // stored measurement is in the status its config must end in, with the
  // context.
  for (const v1::Entry& entry : job.results()) {
    SCOPED_TRACE(absl::StrCat(entry.family(), " ", v1::DType_Name(entry.problem().dtype())));
    const FaultFamily* family = nullptr;
    for (const FaultFamily& candidate : FaultFamilies()) {
      if (candidate.name == entry.family()) family = &candidate;
    }
    ASSERT_NE(family, nullptr);
    EXPECT_EQ(ExpectedStatus(*family, entry.config()), v1::OK);
    CommandResult show =
        cli({"show", entry.family(), "--dims", absl::StrCat("n=", kFaultProblemElements), "--dtype",
             std::string(DTypeName(entry.problem().dtype())), "--json"});
    ASSERT_EQ(show.exit_code, 0) << show.err;
    v1::GetEntryResponse detail;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(show.out, &detail).ok()) << show.out;
    EXPECT_GT(detail.measurements_size(), 0);
    const std::string context = ProblemContext(entry.family(), entry.problem());
    // Chosen in the serial phase, among candidates timed there.
    EXPECT_EQ(entry.phase(), v1::SERIAL_VALIDATION);
    EXPECT_GE(entry.rounds(), 1);
    EXPECT_FALSE(entry.choice().empty());
    EXPECT_GE(entry.worker_processes(), 1);
    int serial = 0;
    for (const v1::Measurement& m : detail.measurements()) {
      SCOPED_TRACE(m.detail());
      EXPECT_EQ(m.status(), ExpectedStatus(*family, m.config()));
      EXPECT_THAT(m.phase(), ::testing::AnyOf(v1::SCREEN, v1::SERIAL_VALIDATION));
      serial += m.phase() == v1::SERIAL_VALIDATION ? 1 : 0;
      if (m.status() != v1::OK) {
        EXPECT_THAT(m.detail(), HasSubstr(context));
        EXPECT_THAT(m.detail(),
                    HasSubstr(absl::StrCat(family->fault_param, "=",
                                           m.config().params().at(family->fault_param))));
      } else {
        EXPECT_GT(m.timing().median_us(), 0);
      }
    }
    EXPECT_GE(serial, entry.candidates());
  }

  // The tuned kernels as an inference server gets them at start-up: one
  // StartupLookup for every problem, each answer loaded by KernelLoader on
  // this GPU, and the fault_race fp32 one launched and its output checked
  // (y[i] = 2 * x[i ^ 31]; with every x equal, y = 2 x everywhere).
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::KernelLoader> gpu, client::KernelLoader::Open(0));
  client::StartupOptions startup;
  startup.client.address = daemon.address();
  startup.local_cache_dir = dir.path() + "/local";
  startup.device = gpu->device();
  startup.driver_version = gpu->driver_version();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::StartupLookup> lookup,
                       client::StartupLookup::Create(startup));
  std::vector<v1::LookupRequest> requests;
  for (const v1::Entry& entry : job.results()) {
    v1::LookupRequest request;
    request.set_family(entry.family());
    *request.mutable_problem() = entry.problem();
    requests.push_back(request);
  }
  // fault_race over n elements: y[i] = 2 * x[i ^ 31]; with every x equal,
  // y = 2 x everywhere. Returns the elements that are not.
  auto run_fault_race = [&](const client::LoadedKernel& kernel, int64_t n) -> int64_t {
    absl::StatusOr<const kernels::CudaDriver*> driver = kernels::CudaDriver::Load();
    EXPECT_OK(driver.status());
    if (!driver.ok()) return n;
    absl::StatusOr<kernels::DeviceBuffer> x =
        kernels::DeviceBuffer::Allocate(**driver, n * sizeof(float));
    absl::StatusOr<kernels::DeviceBuffer> y =
        kernels::DeviceBuffer::Allocate(**driver, n * sizeof(float));
    EXPECT_OK(x.status());
    EXPECT_OK(y.status());
    if (!x.ok() || !y.ok()) return n;
    const kernels::CudaDriver::Api& cu = (*driver)->api();
    EXPECT_OK((*driver)->Check(cu.memset_d8_async(x->get(), 0x3f, n * sizeof(float), nullptr),
                               "cuMemsetD8Async"));
    EXPECT_OK((*driver)->Check(cu.memset_d8_async(y->get(), 0, n * sizeof(float), nullptr),
                               "cuMemsetD8Async"));
    CUdeviceptr x_ptr = x->get();
    CUdeviceptr y_ptr = y->get();
    long long count = n;
    void* args[] = {&x_ptr, &y_ptr, &count};
    EXPECT_OK(gpu->Launch(kernel, args));
    std::vector<float> out(static_cast<size_t>(n));
    // To pageable memory: returns once the copy, and the kernel before it, are done.
    EXPECT_OK(
        (*driver)->Check(cu.memcpy_dtoh_async(out.data(), y->get(), n * sizeof(float), nullptr),
                         "cuMemcpyDtoHAsync"));
    float one_x = 0;
    const unsigned int pattern = 0x3f3f3f3fu;
    std::memcpy(&one_x, &pattern, sizeof(one_x));
    int64_t wrong = 0;
    for (float value : out) wrong += value == 2 * one_x ? 0 : 1;
    return wrong;
  };

  // Besides the tuned problems: fault_race fp32 at half the elements, which
  // nothing was tuned for (a MISS: its default config is compiled here).
  const int64_t untuned_n = kFaultProblemElements / 2;
  {
    v1::LookupRequest request;
    request.set_family("fault_race");
    *request.mutable_problem() = FaultProblem(v1::FLOAT32, untuned_n);
    requests.push_back(request);
  }
  const std::vector<client::StartupAnswer> answers = lookup->LookupAll(requests);
  int loaded = 0;
  int launched = 0;
  int compiled_here = 0;
  for (const client::StartupAnswer& answer : answers) {
    SCOPED_TRACE(ProblemContext(answer.request.family(), answer.request.problem()));
    ASSERT_OK(answer.error);
    const bool fault_race_fp32 =
        answer.request.family() == "fault_race" && answer.request.problem().dtype() == v1::FLOAT32;
    const int64_t n = answer.request.problem().dims().at("n");
    if (fault_race_fp32 && n == untuned_n) {
      EXPECT_EQ(answer.response.match(), v1::MISS);
      ASSERT_OK_AND_ASSIGN(client::LoadedKernel kernel, gpu->Load(answer, "fault_race"));
      EXPECT_EQ(kernel.origin(), client::KernelOrigin::kCompiledHere);
      EXPECT_THAT(kernel.note(), HasSubstr("the default config compiled here"));
      EXPECT_EQ(kernel.config().params().at("SYNC"), 1);
      EXPECT_EQ(run_fault_race(kernel, n), 0) << "of " << n << " elements";
      ++compiled_here;
      ++launched;
      continue;
    }
    EXPECT_EQ(answer.response.match(), v1::EXACT) << answer.note;
    absl::StatusOr<client::LoadedKernel> kernel = gpu->Load(answer, answer.request.family());
    ASSERT_OK(kernel.status());
    EXPECT_EQ(kernel->origin(), client::KernelOrigin::kServedBinary);
    ++loaded;
    if (!fault_race_fp32) continue;
    EXPECT_EQ(run_fault_race(*kernel, n), 0) << "of " << n << " elements";
    ++launched;

    // The same answer with bytes that are no cubin: the loader refuses them
    // before the driver sees them, compiles the recipe here, and that
    // computes the same.
    client::StartupAnswer refused = answer;
    refused.cubin = client::ShareBytes("not a cubin");
    ASSERT_OK_AND_ASSIGN(client::LoadedKernel rebuilt, gpu->Load(refused, "fault_race"));
    EXPECT_EQ(rebuilt.origin(), client::KernelOrigin::kCompiledHere);
    EXPECT_THAT(rebuilt.note(), HasSubstr("its cubin is refused: not a cubin"));
    EXPECT_EQ(run_fault_race(rebuilt, n), 0) << "of " << n << " elements";
    ++compiled_here;
    ++launched;
  }
  EXPECT_EQ(loaded, job.results_size());
  EXPECT_EQ(launched, 3);
  EXPECT_EQ(compiled_here, 2);
  ASSERT_OK(lookup->FlushLocalCache());
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();

  // A restart with the service down and the cubin files gone: every binary
  // comes from the batch's pack, a read-only mapping of the local cache,
  // and is loaded and launched from there.
  std::filesystem::remove_all(startup.local_cache_dir + "/cubins");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::StartupLookup> offline,
                       client::StartupLookup::Create(startup));
  int from_pack = 0;
  for (const client::StartupAnswer& answer : offline->LookupAll(requests)) {
    SCOPED_TRACE(ProblemContext(answer.request.family(), answer.request.problem()));
    ASSERT_OK(answer.error);
    EXPECT_EQ(answer.source, client::AnswerSource::kLocalCache);
    if (answer.response.match() == v1::MISS) continue;
    ASSERT_NE(answer.cubin, nullptr) << answer.note;
    ASSERT_OK_AND_ASSIGN(client::LoadedKernel kernel, gpu->Load(answer, answer.request.family()));
    EXPECT_EQ(kernel.origin(), client::KernelOrigin::kServedBinary);
    ++from_pack;
    if (answer.request.family() == "fault_race" &&
        answer.request.problem().dtype() == v1::FLOAT32) {
      const int64_t n = answer.request.problem().dims().at("n");
      EXPECT_EQ(run_fault_race(kernel, n), 0) << "of " << n << " elements";
      ++launched;
    }
  }
  EXPECT_EQ(from_pack, job.results_size());
  Summary("loader", absl::StrFormat("%d entries loaded by KernelLoader on %s (CUDA %s); %d "
                                    "compiled here (a MISS, a refused cubin); with the service "
                                    "down, %d loaded from the local cache's pack; %d launched "
                                    "and checked",
                                    loaded, gpu->device().name(), gpu->driver_version(),
                                    compiled_here, from_pack, launched));
}

}  // namespace
}  // namespace autotune::testing
