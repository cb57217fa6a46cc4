// The driver wrapper over a fake entry-point table: how a CUresult becomes
// a status, and what the owner types call (or, once abandoned, do not).
// No GPU and no libcuda needed.
#include "kernels/gpu/cuda_driver.h"

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// What the fake driver was asked to do. The table holds plain function
// pointers, so the fake reaches its state through this global, set by the
// fixture for the length of one test.
struct FakeCalls {
  uintptr_t next_handle = 0x1000;
  std::vector<uintptr_t> destroyed;  // streams, buffers, modules, in order
  std::vector<CUdevice> released;    // primary contexts
  CUresult alloc_result = CUDA_SUCCESS;
  std::string load_log;  // written by module_load_data_ex, which then fails
};
FakeCalls* fake = nullptr;

CUresult FakeErrorName(CUresult rc, const char** name) {
  switch (rc) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *name = "CUDA_ERROR_ILLEGAL_ADDRESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_PTX:
      *name = "CUDA_ERROR_INVALID_PTX";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *name = "CUDA_ERROR_NOT_FOUND";
      return CUDA_SUCCESS;
    default:
      *name = nullptr;
      return CUDA_ERROR_INVALID_VALUE;  // what the driver says of a code it does not know
  }
}

CUresult FakeErrorString(CUresult rc, const char** text) {
  if (rc == CUDA_ERROR_ILLEGAL_ADDRESS) {
    *text = "an illegal memory access was encountered";
    return CUDA_SUCCESS;
  }
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult FakeStreamCreate(CUstream* stream, unsigned int) {
  *stream = reinterpret_cast<CUstream>(fake->next_handle++);
  return CUDA_SUCCESS;
}

CUresult FakeStreamDestroy(CUstream stream) {
  fake->destroyed.push_back(reinterpret_cast<uintptr_t>(stream));
  return CUDA_SUCCESS;
}

CUresult FakeMemAlloc(CUdeviceptr* pointer, size_t) {
  if (fake->alloc_result != CUDA_SUCCESS) return fake->alloc_result;
  *pointer = fake->next_handle++;
  return CUDA_SUCCESS;
}

CUresult FakeMemFree(CUdeviceptr pointer) {
  fake->destroyed.push_back(pointer);
  return CUDA_SUCCESS;
}

CUresult FakeRetain(CUcontext* context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(fake->next_handle++);
  return CUDA_SUCCESS;
}

CUresult FakeRelease(CUdevice device) {
  fake->released.push_back(device);
  return CUDA_SUCCESS;
}

CUresult FakeModuleLoad(CUmodule* module, const void*, unsigned int count, CUjit_option* options,
                        void** values) {
  if (fake->load_log.empty()) {
    *module = reinterpret_cast<CUmodule>(fake->next_handle++);
    return CUDA_SUCCESS;
  }
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) {
      std::strcpy(static_cast<char*>(values[i]), fake->load_log.c_str());
    }
  }
  return CUDA_ERROR_INVALID_PTX;
}

CUresult FakeModuleUnload(CUmodule module) {
  fake->destroyed.push_back(reinterpret_cast<uintptr_t>(module));
  return CUDA_SUCCESS;
}

CUresult FakeGetFunction(CUfunction*, CUmodule, const char*) { return CUDA_ERROR_NOT_FOUND; }

CudaDriver::Api FakeApi() {
  CudaDriver::Api api;
  api.get_error_name = &FakeErrorName;
  api.get_error_string = &FakeErrorString;
  api.stream_create = &FakeStreamCreate;
  api.stream_destroy = &FakeStreamDestroy;
  api.mem_alloc = &FakeMemAlloc;
  api.mem_free = &FakeMemFree;
  api.primary_ctx_retain = &FakeRetain;
  api.primary_ctx_release = &FakeRelease;
  api.module_load_data_ex = &FakeModuleLoad;
  api.module_unload = &FakeModuleUnload;
  api.module_get_function = &FakeGetFunction;
  return api;
}

class FakeDriverTest : public ::testing::Test {
 protected:
  FakeDriverTest() : driver_(FakeApi(), CUDA_VERSION) { fake = &calls_; }
  ~FakeDriverTest() override { fake = nullptr; }

  FakeCalls calls_;
  CudaDriver driver_;  // a fresh one per test: Abandon() is irreversible
};

struct CodeCase {
  CUresult result;
  absl::StatusCode code;
};

class CudaStatusCodeTest : public ::testing::TestWithParam<CodeCase> {};

TEST_P(CudaStatusCodeTest, MapsTheResultAndAttachesIt) {
  const CudaDriver driver(CudaDriver::Api{}, CUDA_VERSION);
  const absl::Status status = CudaStatus(driver, GetParam().result, "cuCall");
  EXPECT_EQ(status.code(), GetParam().code) << status;
  EXPECT_EQ(CudaResultOf(status), GetParam().result);
  EXPECT_EQ(driver.Check(GetParam().result, "cuCall"), status);
}

INSTANTIATE_TEST_SUITE_P(
    Codes, CudaStatusCodeTest,
    ::testing::Values(
        CodeCase{CUDA_ERROR_OUT_OF_MEMORY, absl::StatusCode::kResourceExhausted},
        CodeCase{CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, absl::StatusCode::kResourceExhausted},
        CodeCase{CUDA_ERROR_INVALID_VALUE, absl::StatusCode::kInvalidArgument},
        CodeCase{CUDA_ERROR_NOT_FOUND, absl::StatusCode::kNotFound},
        CodeCase{CUDA_ERROR_NOT_SUPPORTED, absl::StatusCode::kUnimplemented},
        CodeCase{CUDA_ERROR_NO_DEVICE, absl::StatusCode::kFailedPrecondition},
        CodeCase{CUDA_ERROR_NOT_INITIALIZED, absl::StatusCode::kFailedPrecondition},
        CodeCase{CUDA_ERROR_STUB_LIBRARY, absl::StatusCode::kFailedPrecondition},
        CodeCase{CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, absl::StatusCode::kFailedPrecondition},
        // Image errors: the kernel cannot run on this device.
        CodeCase{CUDA_ERROR_NO_BINARY_FOR_GPU, absl::StatusCode::kFailedPrecondition},
        CodeCase{CUDA_ERROR_INVALID_PTX, absl::StatusCode::kFailedPrecondition},
        CodeCase{CUDA_ERROR_UNSUPPORTED_PTX_VERSION, absl::StatusCode::kFailedPrecondition},
        CodeCase{CUDA_ERROR_ILLEGAL_ADDRESS, absl::StatusCode::kInternal},
        CodeCase{CUDA_ERROR_INVALID_HANDLE, absl::StatusCode::kInternal},
        CodeCase{CUDA_ERROR_UNKNOWN, absl::StatusCode::kInternal},
        CodeCase{static_cast<CUresult>(1000), absl::StatusCode::kInternal}));

TEST(CudaStatus, SuccessIsOkWithNoResult) {
  const CudaDriver driver(CudaDriver::Api{}, CUDA_VERSION);
  EXPECT_TRUE(CudaStatus(driver, CUDA_SUCCESS, "cuCall").ok());
  EXPECT_TRUE(driver.Check(CUDA_SUCCESS, "cuCall").ok());
  EXPECT_EQ(CudaResultOf(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(CudaResultOf(absl::InternalError("CUDA_ERROR_ILLEGAL_ADDRESS")), std::nullopt);
}

TEST_F(FakeDriverTest, MessageNamesTheResultAndSaysWhatItMeans) {
  EXPECT_EQ(CudaStatus(driver_, CUDA_ERROR_ILLEGAL_ADDRESS, "cuEventQuery").message(),
            "cuEventQuery: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was "
            "encountered");
  EXPECT_EQ(CudaStatus(driver_, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc").message(),
            "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)");
  // A code this driver does not name (newer than it). 1000 is within the
  // enum's range (codes go up to 999): a value beyond it cannot even be
  // held in a CUresult.
  EXPECT_EQ(driver_.ErrorName(static_cast<CUresult>(1000)), "CUresult 1000");
  EXPECT_EQ(CudaStatus(driver_, static_cast<CUresult>(1000), "cuCall").message(),
            "cuCall: CUresult 1000 (1000)");
}

TEST_F(FakeDriverTest, OwnersDestroyTheirHandleOnce) {
  {
    ASSERT_OK_AND_ASSIGN(Stream first, Stream::Create(driver_));
    ASSERT_OK_AND_ASSIGN(Stream second, Stream::Create(driver_));
    const uintptr_t first_handle = reinterpret_cast<uintptr_t>(first.get());
    const uintptr_t second_handle = reinterpret_cast<uintptr_t>(second.get());
    Stream moved(std::move(first));
    EXPECT_FALSE(first);
    EXPECT_THAT(calls_.destroyed, IsEmpty());
    moved = std::move(second);  // lets go of what it held
    EXPECT_THAT(calls_.destroyed, ElementsAre(first_handle));
    moved.Reset();
    moved.Reset();
    EXPECT_THAT(calls_.destroyed, ElementsAre(first_handle, second_handle));
  }
  EXPECT_EQ(calls_.destroyed.size(), 2u);  // moved-from owners destroyed nothing

  {
    ASSERT_OK_AND_ASSIGN(PrimaryContext context, PrimaryContext::Retain(driver_, 3));
    PrimaryContext moved(std::move(context));
  }
  EXPECT_THAT(calls_.released, ElementsAre(3));
}

TEST_F(FakeDriverTest, AbandonedDriverIsNotCalledAgain) {
  ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create(driver_));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer buffer, DeviceBuffer::Allocate(driver_, 256));
  ASSERT_OK_AND_ASSIGN(PrimaryContext context, PrimaryContext::Retain(driver_, 0));
  EXPECT_FALSE(driver_.abandoned());
  driver_.Abandon();
  EXPECT_TRUE(driver_.abandoned());
  stream.Reset();
  buffer.Reset();
  context = PrimaryContext();
  EXPECT_FALSE(stream);
  EXPECT_FALSE(buffer);
  EXPECT_THAT(calls_.destroyed, IsEmpty());
  EXPECT_THAT(calls_.released, IsEmpty());
}

TEST_F(FakeDriverTest, AllocateKeepsTheResult) {
  EXPECT_THAT(DeviceBuffer::Allocate(driver_, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 bytes")));
  calls_.alloc_result = CUDA_ERROR_OUT_OF_MEMORY;
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(driver_, 1 << 20);
  EXPECT_THAT(buffer, StatusIs(absl::StatusCode::kResourceExhausted,
                               HasSubstr("cuMemAlloc(1048576 bytes): CUDA_ERROR_OUT_OF_MEMORY")));
  EXPECT_EQ(CudaResultOf(buffer.status()), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(FakeDriverTest, ModuleErrorsCarryTheLoaderLog) {
  calls_.load_log = "ptxas fatal   : Unresolved extern function 'f'\n\n";
  absl::StatusOr<Module> failed = Module::Load(driver_, "not ptx");
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("cuModuleLoadDataEx (log: ptxas fatal   : Unresolved "
                                         "extern function 'f'): CUDA_ERROR_INVALID_PTX")));
  EXPECT_EQ(CudaResultOf(failed.status()), CUDA_ERROR_INVALID_PTX);

  calls_.load_log.clear();
  ASSERT_OK_AND_ASSIGN(Module module, Module::Load(driver_, "ptx"));
  EXPECT_THAT(module.Function("missing"), StatusIs(absl::StatusCode::kNotFound,
                                                   HasSubstr("no kernel 'missing' in the module")));
}

}  // namespace
}  // namespace autotune::kernels
