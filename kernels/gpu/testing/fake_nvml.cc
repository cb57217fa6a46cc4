// A stand-in for libnvidia-ml.so.1 that kernels/gpu/nvml_test.cc loads by path.
// It knows one device and answers from environment variables read at each
// call, so a test sets what the "driver" says before it asks:
//
//   FAKE_NVML_INIT_FAIL=1           nvmlInit_v2 fails (Driver Not Loaded)
//   FAKE_NVML_UUID=GPU-...          the one UUID nvmlDeviceGetHandleByUUID finds
//   FAKE_NVML_PROCESSES=pid:bytes,… compute processes; bytes "-" = not available
//   FAKE_NVML_UTILIZATION=97        utilisation.gpu; absent = Not Supported
//   FAKE_NVML_MEMORY_USED=bytes     memory used (0 when absent)
//   FAKE_NVML_SM_CLOCK=1980         nvmlDeviceGetClockInfo; absent = Not Supported
//   FAKE_NVML_DEFAULT_CLOCK=1980    default applications clock; absent = Not Supported
//   FAKE_NVML_MAX_CLOCK=2100        max clock; absent = Not Supported
//   FAKE_NVML_POWER=250000          power draw, mW (also FAKE_NVML_POWER_LIMIT,
//                                   FAKE_NVML_TEMPERATURE °C, FAKE_NVML_EVENTS bits);
//                                   absent = Not Supported
//   FAKE_NVML_FAIL=<function>       that function fails with GPU Is Lost
//
// Like NVML, the process query answers INSUFFICIENT_SIZE with the count it
// needs when the caller's array is smaller. FakeNvmlLiveInits() and
// FakeNvmlProcessQueries() let the test see how it was called.
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "kernels/gpu/nvml_api.h"

struct nvmlDevice_st {};

namespace {

nvmlDevice_st the_device;

int live_inits = 0;
int process_queries = 0;

const char* Env(const char* name) {
  const char* value = getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

bool Fails(const char* function) {
  const char* fail = Env("FAKE_NVML_FAIL");
  return fail != nullptr && strcmp(fail, function) == 0;
}

bool KnowsDevice(nvmlDevice_t device) { return device == &the_device; }

// A number from the environment; false when it is absent.
bool EnvNumber(const char* name, unsigned long long* value) {
  const char* text = Env(name);
  if (text == nullptr) return false;
  *value = strtoull(text, nullptr, 10);
  return true;
}

std::vector<nvmlProcessInfo_t> Processes() {
  std::vector<nvmlProcessInfo_t> processes;
  const char* text = Env("FAKE_NVML_PROCESSES");
  if (text == nullptr) return processes;
  std::string list(text);
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string entry = list.substr(start, end - start);
    const size_t colon = entry.find(':');
    nvmlProcessInfo_t info{};
    info.pid = static_cast<unsigned int>(strtoul(entry.c_str(), nullptr, 10));
    const std::string bytes = colon == std::string::npos ? "-" : entry.substr(colon + 1);
    info.usedGpuMemory =
        bytes == "-" ? kNvmlValueNotAvailable : strtoull(bytes.c_str(), nullptr, 10);
    processes.push_back(info);
    start = end + 1;
  }
  return processes;
}

nvmlReturn_t Clock(const char* function, const char* variable, nvmlDevice_t device,
                   nvmlClockType_t type, unsigned int* clock) {
  if (!KnowsDevice(device) || type != NVML_CLOCK_SM || clock == nullptr)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (Fails(function)) return NVML_ERROR_GPU_IS_LOST;
  unsigned long long value = 0;
  if (!EnvNumber(variable, &value)) return NVML_ERROR_NOT_SUPPORTED;
  *clock = static_cast<unsigned int>(value);
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

int FakeNvmlLiveInits(void) { return live_inits; }
int FakeNvmlProcessQueries(void) { return process_queries; }

nvmlReturn_t nvmlInit_v2(void) {
  if (Env("FAKE_NVML_INIT_FAIL") != nullptr) return NVML_ERROR_DRIVER_NOT_LOADED;
  ++live_inits;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  --live_inits;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  const char* known = Env("FAKE_NVML_UUID");
  if (known == nullptr || uuid == nullptr || strcmp(uuid, known) != 0) return NVML_ERROR_NOT_FOUND;
  *device = &the_device;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  ++process_queries;
  if (!KnowsDevice(device) || infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (Fails("nvmlDeviceGetComputeRunningProcesses_v3")) return NVML_ERROR_GPU_IS_LOST;
  const std::vector<nvmlProcessInfo_t> processes = Processes();
  if (*infoCount < processes.size()) {
    *infoCount = static_cast<unsigned int>(processes.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < processes.size(); ++i) infos[i] = processes[i];
  *infoCount = static_cast<unsigned int>(processes.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  if (!KnowsDevice(device) || utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (Fails("nvmlDeviceGetUtilizationRates")) return NVML_ERROR_GPU_IS_LOST;
  unsigned long long value = 0;
  if (!EnvNumber("FAKE_NVML_UTILIZATION", &value)) return NVML_ERROR_NOT_SUPPORTED;
  utilization->gpu = static_cast<unsigned int>(value);
  utilization->memory = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!KnowsDevice(device) || memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (Fails("nvmlDeviceGetMemoryInfo")) return NVML_ERROR_GPU_IS_LOST;
  unsigned long long used = 0;
  EnvNumber("FAKE_NVML_MEMORY_USED", &used);
  memory->total = 80ull << 30;
  memory->used = used;
  memory->free = memory->total - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int* clock) {
  return Clock("nvmlDeviceGetClockInfo", "FAKE_NVML_SM_CLOCK", device, type, clock);
}

nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t type,
                                                   unsigned int* clock_mhz) {
  return Clock("nvmlDeviceGetDefaultApplicationsClock", "FAKE_NVML_DEFAULT_CLOCK", device, type,
               clock_mhz);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* clock) {
  return Clock("nvmlDeviceGetMaxClockInfo", "FAKE_NVML_MAX_CLOCK", device, type, clock);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power_mw) {
  if (!KnowsDevice(device)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long value = 0;
  if (!EnvNumber("FAKE_NVML_POWER", &value)) return NVML_ERROR_NOT_SUPPORTED;
  *power_mw = static_cast<unsigned int>(value);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit_mw) {
  if (!KnowsDevice(device)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long value = 0;
  if (!EnvNumber("FAKE_NVML_POWER_LIMIT", &value)) return NVML_ERROR_NOT_SUPPORTED;
  *limit_mw = static_cast<unsigned int>(value);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int* temperature_c) {
  if (!KnowsDevice(device) || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long value = 0;
  if (!EnvNumber("FAKE_NVML_TEMPERATURE", &value)) return NVML_ERROR_NOT_SUPPORTED;
  *temperature_c = static_cast<unsigned int>(value);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long* reasons) {
  if (!KnowsDevice(device)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long value = 0;
  if (!EnvNumber("FAKE_NVML_EVENTS", &value)) return NVML_ERROR_NOT_SUPPORTED;
  *reasons = value;
  return NVML_SUCCESS;
}

}  // extern "C"
