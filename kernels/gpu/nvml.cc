#include "kernels/gpu/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/gpu/nvml_api.h"

namespace autotune::kernels {
namespace {

// Processes start between two queries; a few rounds of growing the array
// settle it, more mean something is wrong.
constexpr unsigned int kFirstProcessCapacity = 8;
constexpr int kProcessQueryAttempts = 5;

// Open()'s errors.
absl::Status Unavailable(const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("NVML unavailable: ", why, "; foreign processes on the GPU cannot be seen"));
}

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dlerror";
}

}  // namespace

struct Nvml::Api {
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlErrorString) error_string = nullptr;
  decltype(&::nvmlDeviceGetHandleByUUID) get_handle_by_uuid = nullptr;
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) get_compute_processes = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) get_utilization = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) get_memory_info = nullptr;
  decltype(&::nvmlDeviceGetClockInfo) get_clock_info = nullptr;
  decltype(&::nvmlDeviceGetDefaultApplicationsClock) get_default_applications_clock = nullptr;
  decltype(&::nvmlDeviceGetMaxClockInfo) get_max_clock_info = nullptr;
  decltype(&::nvmlDeviceGetPowerUsage) get_power_usage = nullptr;  // optional, as below
  decltype(&::nvmlDeviceGetEnforcedPowerLimit) get_power_limit = nullptr;
  decltype(&::nvmlDeviceGetTemperature) get_temperature = nullptr;
  decltype(&::nvmlDeviceGetCurrentClocksEventReasons) get_clocks_event_reasons = nullptr;
  nvmlDevice_t device = nullptr;

  // "<function>: <NVML's string> (NVML error <rc>)".
  std::string Describe(nvmlReturn_t rc, const std::string& function) const {
    const char* text = error_string != nullptr ? error_string(rc) : nullptr;
    return absl::StrCat(function, ": ", text != nullptr ? text : "unknown error", " (NVML error ",
                        rc, ")");
  }

  // The status of a failed query (the header lists the codes).
  absl::Status QueryError(nvmlReturn_t rc, const std::string& function) const {
    switch (rc) {
      case NVML_ERROR_TIMEOUT:
      case NVML_ERROR_GPU_IS_LOST:
      case NVML_ERROR_RESET_REQUIRED:
      case NVML_ERROR_IN_USE:
      case NVML_ERROR_NOT_READY:
        return absl::UnavailableError(Describe(rc, function));
      default:
        return absl::InternalError(Describe(rc, function));
    }
  }

  // nvmlDeviceGetComputeRunningProcesses_v3 into an array grown until every
  // process fits.
  absl::StatusOr<std::vector<NvmlProcess>> ComputeProcesses() const {
    std::vector<nvmlProcessInfo_t> infos(kFirstProcessCapacity);
    for (int attempt = 1;; ++attempt) {
      unsigned int count = static_cast<unsigned int>(infos.size());
      const nvmlReturn_t rc = get_compute_processes(device, &count, infos.data());
      if (rc == NVML_SUCCESS) {
        infos.resize(std::min<size_t>(count, infos.size()));
        break;
      }
      if (rc != NVML_ERROR_INSUFFICIENT_SIZE || attempt == kProcessQueryAttempts) {
        return QueryError(rc, "nvmlDeviceGetComputeRunningProcesses_v3");
      }
      // count is what NVML needs now; leave room for processes that start
      // before the next call.
      infos.resize(std::max<size_t>(count, infos.size()) * 2);
    }
    std::vector<NvmlProcess> processes;
    processes.reserve(infos.size());
    for (const nvmlProcessInfo_t& info : infos) {
      processes.push_back(
          NvmlProcess{.pid = info.pid,
                      .used_memory_bytes =
                          info.usedGpuMemory == kNvmlValueNotAvailable ? 0 : info.usedGpuMemory});
    }
    return processes;
  }
};

Nvml::Nvml() : api_(std::make_unique<Api>()) {}

Nvml::~Nvml() {
  if (initialized_) (void)api_->shutdown();
  if (library_ != nullptr) dlclose(library_);
}

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Open(const std::string& uuid,
                                                 const std::string& library) {
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->library_ == nullptr) return Unavailable(DlError());

  Api& api = *nvml->api_;
  std::vector<std::string> missing;
  auto resolve = [&](const char* name, auto* fn) {
    dlerror();
    void* symbol = dlsym(nvml->library_, name);
    if (symbol == nullptr) {
      missing.push_back(name);
      return;
    }
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(symbol);
  };
  resolve("nvmlInit_v2", &api.init);
  resolve("nvmlShutdown", &api.shutdown);
  resolve("nvmlErrorString", &api.error_string);
  resolve("nvmlDeviceGetHandleByUUID", &api.get_handle_by_uuid);
  resolve("nvmlDeviceGetComputeRunningProcesses_v3", &api.get_compute_processes);
  resolve("nvmlDeviceGetUtilizationRates", &api.get_utilization);
  resolve("nvmlDeviceGetMemoryInfo", &api.get_memory_info);
  resolve("nvmlDeviceGetClockInfo", &api.get_clock_info);
  resolve("nvmlDeviceGetDefaultApplicationsClock", &api.get_default_applications_clock);
  resolve("nvmlDeviceGetMaxClockInfo", &api.get_max_clock_info);
  if (!missing.empty()) {
    return Unavailable(absl::StrCat(library, " lacks ", absl::StrJoin(missing, ", ")));
  }
  // The power state is evidence, not a requirement: absent entry points
  // leave it unknown.
  auto optional = [&](const char* name, auto* fn) {
    if (void* symbol = dlsym(nvml->library_, name); symbol != nullptr) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(symbol);
    }
  };
  optional("nvmlDeviceGetPowerUsage", &api.get_power_usage);
  optional("nvmlDeviceGetEnforcedPowerLimit", &api.get_power_limit);
  optional("nvmlDeviceGetTemperature", &api.get_temperature);
  optional("nvmlDeviceGetCurrentClocksEventReasons", &api.get_clocks_event_reasons);

  if (const nvmlReturn_t rc = api.init(); rc != NVML_SUCCESS) {
    return Unavailable(api.Describe(rc, "nvmlInit_v2"));
  }
  nvml->initialized_ = true;
  if (const nvmlReturn_t rc = api.get_handle_by_uuid(uuid.c_str(), &api.device);
      rc != NVML_SUCCESS) {
    return Unavailable(api.Describe(rc, absl::StrCat("nvmlDeviceGetHandleByUUID(", uuid, ")")));
  }

  unsigned int clock_mhz = 0;
  if (api.get_default_applications_clock(api.device, NVML_CLOCK_SM, &clock_mhz) != NVML_SUCCESS ||
      clock_mhz == 0) {
    clock_mhz = 0;
    if (api.get_max_clock_info(api.device, NVML_CLOCK_SM, &clock_mhz) != NVML_SUCCESS) {
      clock_mhz = 0;
    }
  }
  nvml->default_sm_clock_mhz_ = static_cast<int>(clock_mhz);
  return nvml;
}

absl::StatusOr<NvmlSnapshot> Nvml::Snapshot() const {
  const Api& api = *api_;
  NvmlSnapshot snapshot;

  ASSIGN_OR_RETURN(snapshot.processes, api.ComputeProcesses());

  nvmlUtilization_t utilization{};
  if (const nvmlReturn_t rc = api.get_utilization(api.device, &utilization); rc == NVML_SUCCESS) {
    snapshot.utilization_percent = static_cast<int>(utilization.gpu);
  } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
    return api.QueryError(rc, "nvmlDeviceGetUtilizationRates");
  }

  nvmlMemory_t memory{};
  if (const nvmlReturn_t rc = api.get_memory_info(api.device, &memory); rc != NVML_SUCCESS) {
    return api.QueryError(rc, "nvmlDeviceGetMemoryInfo");
  }
  snapshot.memory_used_bytes = static_cast<int64_t>(memory.used);

  unsigned int clock_mhz = 0;
  if (const nvmlReturn_t rc = api.get_clock_info(api.device, NVML_CLOCK_SM, &clock_mhz);
      rc == NVML_SUCCESS) {
    snapshot.sm_clock_mhz = static_cast<int>(clock_mhz);
  } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
    return api.QueryError(rc, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)");
  }

  unsigned int value = 0;
  if (api.get_power_usage != nullptr && api.get_power_usage(api.device, &value) == NVML_SUCCESS) {
    snapshot.power_mw = static_cast<int>(value);
  }
  if (api.get_power_limit != nullptr && api.get_power_limit(api.device, &value) == NVML_SUCCESS) {
    snapshot.power_limit_mw = static_cast<int>(value);
  }
  if (api.get_temperature != nullptr &&
      api.get_temperature(api.device, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
    snapshot.temperature_c = static_cast<int>(value);
  }
  unsigned long long reasons = 0;
  if (api.get_clocks_event_reasons != nullptr &&
      api.get_clocks_event_reasons(api.device, &reasons) == NVML_SUCCESS) {
    snapshot.clocks_event_reasons = reasons;
  }
  return snapshot;
}

std::string DescribeClocksEvents(uint64_t reasons) {
  std::vector<std::string> names;
  if (reasons & NVML_CLOCKS_EVENT_REASON_SW_POWER_CAP) names.push_back("power cap");
  if (reasons & NVML_CLOCKS_EVENT_REASON_HW_SLOWDOWN) names.push_back("hardware slowdown");
  if (reasons & (NVML_CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN |
                 NVML_CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN)) {
    names.push_back("thermal slowdown");
  }
  if (reasons & NVML_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN) names.push_back("power brake");
  return absl::StrJoin(names, ", ");
}

}  // namespace autotune::kernels
