// Nvml over a fake libnvidia-ml (kernels/gpu/testing/fake_nvml.cc) that answers
// from FAKE_NVML_* environment variables; no GPU and no driver needed.
#include "kernels/gpu/nvml.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kFake[] = AUTOTUNE_FAKE_NVML;
constexpr char kUuid[] = "GPU-5f3c2a1e-0b7d-4c9e-8a61-2d4f6e8b9c01";

auto Process(uint32_t pid, uint64_t bytes) {
  return AllOf(Field(&NvmlProcess::pid, pid), Field(&NvmlProcess::used_memory_bytes, bytes));
}

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"FAKE_NVML_INIT_FAIL", "FAKE_NVML_PROCESSES", "FAKE_NVML_UTILIZATION",
          "FAKE_NVML_MEMORY_USED", "FAKE_NVML_SM_CLOCK", "FAKE_NVML_DEFAULT_CLOCK",
          "FAKE_NVML_MAX_CLOCK", "FAKE_NVML_FAIL", "FAKE_NVML_POWER", "FAKE_NVML_POWER_LIMIT",
          "FAKE_NVML_TEMPERATURE", "FAKE_NVML_EVENTS"}) {
      unsetenv(name);
    }
    setenv("FAKE_NVML_UUID", kUuid, 1);
    // Held for the whole test so the fake's counters outlive each Nvml's
    // dlclose.
    fake_ = dlopen(kFake, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(fake_, nullptr) << dlerror();
    live_inits_ = reinterpret_cast<int (*)()>(dlsym(fake_, "FakeNvmlLiveInits"));
    process_queries_ = reinterpret_cast<int (*)()>(dlsym(fake_, "FakeNvmlProcessQueries"));
    ASSERT_NE(live_inits_, nullptr);
    ASSERT_NE(process_queries_, nullptr);
  }
  void TearDown() override {
    if (fake_ != nullptr) dlclose(fake_);
  }

  void* fake_ = nullptr;
  int (*live_inits_)() = nullptr;
  int (*process_queries_)() = nullptr;
};

TEST_F(NvmlTest, MissingLibraryIsFailedPreconditionNamingIt) {
  const std::string missing = "/nonexistent/libnvidia-ml.so.1";
  EXPECT_THAT(Nvml::Open(kUuid, missing),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("NVML unavailable: /nonexistent/libnvidia-ml.so.1"),
                             HasSubstr("cannot open shared object file"),
                             HasSubstr("foreign processes on the GPU cannot be seen"))));
}

TEST_F(NvmlTest, LibraryWithoutTheEntryPointsNamesThem) {
  // libm is everywhere and has none of NVML's functions.
  EXPECT_THAT(Nvml::Open(kUuid, "libm.so.6"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("libm.so.6 lacks nvmlInit_v2"),
                             HasSubstr("nvmlDeviceGetComputeRunningProcesses_v3"))));
}

TEST_F(NvmlTest, FailedInitIsFailedPreconditionWithNvmlsMessage) {
  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  EXPECT_THAT(Nvml::Open(kUuid, kFake),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("nvmlInit_v2: Driver Not Loaded (NVML error 9)")));
  EXPECT_EQ(live_inits_(), 0);
}

TEST_F(NvmlTest, UnknownUuidNamesItAndShutsNvmlDown) {
  const std::string other = "GPU-00000000-1111-2222-3333-444444444444";
  EXPECT_THAT(Nvml::Open(other, kFake),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("nvmlDeviceGetHandleByUUID(", other,
                                              "): Not Found (NVML error 6)"))));
  EXPECT_EQ(live_inits_(), 0);
}

TEST_F(NvmlTest, DestructorShutsNvmlDown) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
    EXPECT_EQ(live_inits_(), 1);
  }
  EXPECT_EQ(live_inits_(), 0);
}

TEST_F(NvmlTest, SnapshotListsProcessesWithTheirMemory) {
  setenv("FAKE_NVML_PROCESSES", "4121:2147483648,77:0,9000:-", 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  ASSERT_OK_AND_ASSIGN(NvmlSnapshot snapshot, nvml->Snapshot());
  EXPECT_THAT(snapshot.processes,
              ElementsAre(Process(4121, 2147483648ull), Process(77, 0), Process(9000, 0)));
}

TEST_F(NvmlTest, NoProcessesIsAnEmptyList) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  ASSERT_OK_AND_ASSIGN(NvmlSnapshot snapshot, nvml->Snapshot());
  EXPECT_THAT(snapshot.processes, IsEmpty());
}

TEST_F(NvmlTest, MoreProcessesThanTheFirstArrayHoldsAreAllListed) {
  std::string list;
  for (int pid = 1000; pid < 1100; ++pid) {
    absl::StrAppend(&list, list.empty() ? "" : ",", pid, ":", pid * 1024);
  }
  setenv("FAKE_NVML_PROCESSES", list.c_str(), 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  const int queries_before = process_queries_();
  ASSERT_OK_AND_ASSIGN(NvmlSnapshot snapshot, nvml->Snapshot());
  EXPECT_THAT(process_queries_() - queries_before, Ge(2));  // one said INSUFFICIENT_SIZE
  ASSERT_THAT(snapshot.processes, SizeIs(100));
  EXPECT_THAT(snapshot.processes.front(), Process(1000, 1000 * 1024));
  EXPECT_THAT(snapshot.processes.back(), Process(1099, 1099 * 1024));
}

TEST_F(NvmlTest, SnapshotReadsUtilisationMemoryAndClock) {
  setenv("FAKE_NVML_UTILIZATION", "97", 1);
  setenv("FAKE_NVML_MEMORY_USED", "123456789", 1);
  setenv("FAKE_NVML_SM_CLOCK", "1755", 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  ASSERT_OK_AND_ASSIGN(NvmlSnapshot snapshot, nvml->Snapshot());
  EXPECT_EQ(snapshot.utilization_percent, 97);
  EXPECT_EQ(snapshot.memory_used_bytes, 123456789);
  EXPECT_EQ(snapshot.sm_clock_mhz, 1755);
}

TEST_F(NvmlTest, SnapshotReadsThePowerState) {
  setenv("FAKE_NVML_POWER", "612000", 1);
  setenv("FAKE_NVML_POWER_LIMIT", "700000", 1);
  setenv("FAKE_NVML_TEMPERATURE", "71", 1);
  setenv("FAKE_NVML_EVENTS", "68", 1);  // 0x4 power cap | 0x40 hardware thermal
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  ASSERT_OK_AND_ASSIGN(NvmlSnapshot snapshot, nvml->Snapshot());
  EXPECT_EQ(snapshot.power_mw, 612000);
  EXPECT_EQ(snapshot.power_limit_mw, 700000);
  EXPECT_EQ(snapshot.temperature_c, 71);
  EXPECT_EQ(snapshot.clocks_event_reasons, 68u);
  EXPECT_EQ(DescribeClocksEvents(snapshot.clocks_event_reasons), "power cap, thermal slowdown");
  EXPECT_EQ(DescribeClocksEvents(0x1 | 0x2), "");  // idle, application clocks: not held
}

TEST_F(NvmlTest, UnsupportedUtilisationAndClockAreUnknown) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  ASSERT_OK_AND_ASSIGN(NvmlSnapshot snapshot, nvml->Snapshot());
  EXPECT_EQ(snapshot.utilization_percent, -1);
  EXPECT_EQ(snapshot.sm_clock_mhz, 0);
  EXPECT_EQ(snapshot.memory_used_bytes, 0);
  EXPECT_EQ(snapshot.power_mw, 0);
  EXPECT_EQ(snapshot.temperature_c, 0);
  EXPECT_EQ(snapshot.clocks_event_reasons, 0u);
}

TEST_F(NvmlTest, FailedQueryNamesTheFunction) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  for (const char* function :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetClockInfo"}) {
    setenv("FAKE_NVML_FAIL", function, 1);
    EXPECT_THAT(nvml->Snapshot(),
                StatusIs(absl::StatusCode::kUnavailable,
                         AllOf(HasSubstr(function), HasSubstr("GPU is lost (NVML error 15)"))));
  }
}

TEST_F(NvmlTest, DefaultClockIsTheDefaultApplicationsClock) {
  setenv("FAKE_NVML_DEFAULT_CLOCK", "1980", 1);
  setenv("FAKE_NVML_MAX_CLOCK", "2100", 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  EXPECT_EQ(nvml->default_sm_clock_mhz(), 1980);
}

TEST_F(NvmlTest, DefaultClockFallsBackToTheMaxClock) {
  setenv("FAKE_NVML_MAX_CLOCK", "2100", 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  EXPECT_EQ(nvml->default_sm_clock_mhz(), 2100);
}

TEST_F(NvmlTest, DefaultClockIsUnknownWhenNeitherIsSupported) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  EXPECT_EQ(nvml->default_sm_clock_mhz(), 0);
}

TEST_F(NvmlTest, DefaultClockIsReadOnceAtOpen) {
  setenv("FAKE_NVML_DEFAULT_CLOCK", "1980", 1);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvml> nvml, Nvml::Open(kUuid, kFake));
  setenv("FAKE_NVML_DEFAULT_CLOCK", "1410", 1);
  EXPECT_EQ(nvml->default_sm_clock_mhz(), 1980);
}

}  // namespace
}  // namespace autotune::kernels
