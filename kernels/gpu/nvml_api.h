// The few NVML types and entry points that kernels/gpu/nvml.cc uses, declared
// here because the CUDA toolkit ships no nvml.h. Layouts and signatures are
// NVML's own (nvml.h of the R450+ drivers); nothing links libnvidia-ml, the
// functions are only named (decltype) and resolved with dlsym.
//
// Include only from kernels/gpu/nvml.cc and the fake library of its test, which
// defines these functions: a signature that drifts from the one here is a
// compile error there.
#ifndef AUTOTUNE_KERNELS_GPU_NVML_API_H_
#define AUTOTUNE_KERNELS_GPU_NVML_API_H_

extern "C" {

typedef int nvmlReturn_t;
enum : nvmlReturn_t {
  NVML_SUCCESS = 0,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef int nvmlClockType_t;
enum : nvmlClockType_t { NVML_CLOCK_SM = 1 };

// nvmlProcessInfo_v2_t, which the _v3 process queries fill.
typedef int nvmlTemperatureSensors_t;
enum : nvmlTemperatureSensors_t { NVML_TEMPERATURE_GPU = 0 };

// nvmlClocksEventReason* bits that mean the GPU is held below its clocks
// (not idle, not an application setting).
enum : unsigned long long {
  NVML_CLOCKS_EVENT_REASON_SW_POWER_CAP = 0x4ull,
  NVML_CLOCKS_EVENT_REASON_HW_SLOWDOWN = 0x8ull,
  NVML_CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN = 0x20ull,
  NVML_CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN = 0x40ull,
  NVML_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 0x80ull,
};

typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // NVML_VALUE_NOT_AVAILABLE when not known
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;     // percent of the last sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
} nvmlUtilization_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t type,
                                                   unsigned int* clock_mhz);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* clock);
// The power state: optional entry points (a library without them leaves the
// values unknown).
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power_mw);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit_mw);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int* temperature_c);
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long* reasons);

}  // extern "C"

// NVML's "the driver does not know" for 64-bit values.
inline constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_v2_t is 24 bytes");

#endif  // AUTOTUNE_KERNELS_GPU_NVML_API_H_
