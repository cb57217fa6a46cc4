// What NVML says about one GPU: the compute processes on it (ours and
// everyone else's), its utilisation, memory in use and SM clock. The
// profiler reads it around its rounds to see foreign work that would skew a
// measurement, and which clock the rounds should run at.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Nvml> nvml, Nvml::Open(device_uuid));
//   ASSIGN_OR_RETURN(NvmlSnapshot now, nvml->Snapshot());
//   for (const NvmlProcess& p : now.processes) if (p.pid != getpid()) ...
//
// libnvidia-ml.so.1 is loaded at run time with dlopen, like libcuda
// (kernels/gpu/cuda_driver.h): programs that include this module start on
// machines without it, and Open() says what is missing. NVML counts its
// nvmlInit/nvmlShutdown pairs, so several Nvml objects (and other NVML users
// in the process) can live side by side.
//
// Thread-safety: NVML is thread-safe and an Nvml object keeps no state that
// its calls change, so the const methods may be called from any thread at
// once. Destroying it must not race with them.
#ifndef AUTOTUNE_KERNELS_GPU_NVML_H_
#define AUTOTUNE_KERNELS_GPU_NVML_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace autotune::kernels {

struct NvmlProcess {
  uint32_t pid = 0;
  uint64_t used_memory_bytes = 0;  // 0 when NVML does not say
};

struct NvmlSnapshot {
  // Every compute process on the device, the caller's own included.
  std::vector<NvmlProcess> processes;
  int utilization_percent = -1;    // nvmlDeviceGetUtilizationRates().gpu; -1 = unknown
  int64_t memory_used_bytes = -1;  // nvmlDeviceGetMemoryInfo().used; -1 = unknown
  int sm_clock_mhz = 0;            // nvmlDeviceGetClockInfo(NVML_CLOCK_SM); 0 = unknown
  // The power state; 0 = unknown (the query unsupported, failed or absent
  // from the library: these never fail a snapshot).
  int power_mw = 0;                   // nvmlDeviceGetPowerUsage
  int power_limit_mw = 0;             // nvmlDeviceGetEnforcedPowerLimit
  int temperature_c = 0;              // nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
  uint64_t clocks_event_reasons = 0;  // nvmlDeviceGetCurrentClocksEventReasons
};

// The clocks event reasons that hold the GPU below its clocks, named
// ("power cap", "hardware slowdown", "thermal slowdown", "power brake"),
// comma-separated; empty when none of them is set.
std::string DescribeClocksEvents(uint64_t reasons);

class Nvml {
 public:
  static constexpr const char* kLibrary = "libnvidia-ml.so.1";

  // Loads `library` (a path or a name for dlopen; tests pass a fake), calls
  // nvmlInit_v2 and finds the device whose UUID is `uuid`, written as NVML
  // and cuDeviceGetUuid-based code write it:
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". Every failure is
  // FAILED_PRECONDITION "NVML unavailable: <why>; foreign processes on the
  // GPU cannot be seen", where <why> is dlopen's error (library absent), the
  // entry points the library lacks, or the failed call with NVML's error
  // string (init failed, no device with that UUID).
  static absl::StatusOr<std::unique_ptr<Nvml>> Open(const std::string& uuid,
                                                    const std::string& library = kLibrary);

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  // nvmlShutdown, then dlclose. Never throws.
  ~Nvml();

  // The device now: its compute processes
  // (nvmlDeviceGetComputeRunningProcesses_v3, retried with a larger array
  // while more processes appear than fit), utilisation, memory in use and SM
  // clock. A failed query is an error naming the function with NVML's error
  // string: UNAVAILABLE for a GPU that is lost, needs a reset, is busy or
  // timed out, INTERNAL otherwise. Utilisation and clock queries that NVML
  // does not support on the device leave their fields unknown instead.
  absl::StatusOr<NvmlSnapshot> Snapshot() const;

  // The SM clock that rounds are held against, read once by Open():
  // nvmlDeviceGetDefaultApplicationsClock(NVML_CLOCK_SM), else
  // nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM), else 0 (unknown).
  int default_sm_clock_mhz() const { return default_sm_clock_mhz_; }

 private:
  struct Api;  // the resolved entry points and the device handle
  Nvml();

  void* library_ = nullptr;  // dlopen handle
  std::unique_ptr<Api> api_;
  bool initialized_ = false;  // nvmlInit_v2 succeeded; Shutdown owed
  int default_sm_clock_mhz_ = 0;
};

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_GPU_NVML_H_
