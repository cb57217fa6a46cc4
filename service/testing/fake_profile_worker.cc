// A stand-in for `autotune-worker profile` (and, as `compile`, for a compile
// worker whose every compile gives an ELF cubin of FAKE_WORKER_CUBIN_BYTES
// bytes, default 1024, named by the task's name expression), for the
// daemon's unit tests on machines without a GPU or NVRTC. It speaks the worker protocol and acts
// out what a variant's label asks for, so the supervision code can be tested against every way a
// real worker ends a variant:
//   MODE=0  OK, median 10 us        MODE=1  OK, median 20 us
//   MODE=2  WRONG_RESULT            MODE=3  hangs (never answers)
//   MODE=4  the process dies        MODE=5  FAULT, then the process exits
//   MODE=6  UNSUPPORTED             MODE=7  TIMEOUT reported, then exits
//   MODE=8  OK in the screen, WRONG_RESULT in a serial task (a racy kernel)
//   MODE=9  OK, but faults in the serial rounds (then the process exits)
// Serial tasks (ProfileTask.serial) validate as above, then report every
// OK candidate's serial timing (the screen's median, MODE=1 at 20 us even
// under FAKE_WORKER_SCREEN_LIES) over 6 rounds, each round's median within
// +-0.1% of it (the k-th candidate's wobble shifted by k rounds, so equal
// medians are a tie within the band and 10 against 20 us is no tie).
// Environment: FAKE_WORKER_NO_DEVICE=1 says hello with an error;
// FAKE_WORKER_REFERENCE_FAULT=1 ends every task with a reference FAULT;
// FAKE_WORKER_LOG=<file> appends one line per task received;
// FAKE_WORKER_FAST_MODE0=1 makes MODE=0 take 4 us instead of 10;
// FAKE_WORKER_SLEEP_MS=<ms> waits that long before each variant's outcome
// and before a serial task's report (a job long enough to interrupt);
// FAKE_WORKER_MIXED=1 reports two GPUs, the second with fewer SMs;
// FAKE_WORKER_GPUS=<n> reports n GPUs of one model (GPU-fake-0...);
// FAKE_WORKER_SPANS=<file> appends "<uuid> <start us> <end us> screen|serial"
// for each task that ends OK (wall-clock microseconds, comparable across
// workers);
// FAKE_WORKER_SCREEN_LIES=1 makes MODE=1 screen at 5 us (serially 20 us);
// FAKE_WORKER_NOISY=1 makes the rounds' medians wobble +-3% instead (equal
// medians are then never resolved);
// FAKE_WORKER_THROTTLED=1 reports every serial task's rounds throttled (SM
// clock 990 of 1980 MHz, power cap and thermal slowdown);
// FAKE_WORKER_FOREIGN=<pid>:<bytes> puts another compute process on the GPU
// for the first FAKE_WORKER_FOREIGN_PROBES probes (default: all), and into
// the rounds of the first FAKE_WORKER_FOREIGN_SERIALS serial tasks
// (default: none), only on the GPU of ordinal FAKE_WORKER_FOREIGN_GPU when
// that is set; FAKE_WORKER_NO_NVML=1 answers probes with an NVML error;
// FAKE_WORKER_HOLD=<dir>:<screen|serial>:<n>[:<ordinal>] holds the phase open
// for a test: before the n-th variant outcome of that phase (counted from 1
// in this process), in the worker of GPU <ordinal> only when that is given,
// the worker writes <dir>/held (the task's context) and answers nothing
// until <dir>/go exists (it exits if its parent dies meanwhile), so a test
// acts at a known point of a phase instead of racing a poll against it.
// Several holds, comma-separated and each with a dir of its own, hold in
// turn at their points; one whose go exists passes at once (a replaced
// worker counts from 1 again).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "proto/worker.pb.h"
#include "service/worker/worker_pipe.h"

namespace {

namespace v1 = ::autotune::v1;
namespace wv1 = ::autotune::worker::v1;
using ::autotune::kernel_worker::ReadDelimited;
using ::autotune::kernel_worker::WriteDelimited;

int Mode(const std::string& label) {
  const size_t at = label.find("MODE=");
  return at == std::string::npos ? 0 : std::atoi(label.c_str() + at + 5);
}

bool Send(const wv1::WorkerResponse& response) {
  return WriteDelimited(STDOUT_FILENO, response).ok();
}

int EnvInt(const char* name, int otherwise) {
  const char* value = std::getenv(name);
  return value == nullptr ? otherwise : std::atoi(value);
}

// FAKE_WORKER_FOREIGN as a process, or false.
// The ordinal this worker reports, for FAKE_WORKER_FOREIGN_GPU.
int g_ordinal = 0;

bool Foreign(wv1::ForeignProcess* process) {
  const char* value = std::getenv("FAKE_WORKER_FOREIGN");
  if (value == nullptr) return false;
  if (const char* gpu = std::getenv("FAKE_WORKER_FOREIGN_GPU"); gpu != nullptr) {
    if (std::atoi(gpu) != g_ordinal) return false;
  }
  const char* colon = std::strchr(value, ':');
  process->set_pid(std::atoi(value));
  process->set_used_memory_bytes(colon == nullptr ? 0 : std::atoll(colon + 1));
  return true;
}

wv1::DeviceState Probe(int probes) {
  wv1::DeviceState state;
  if (std::getenv("FAKE_WORKER_NO_NVML") != nullptr) {
    state.set_nvml_error("NVML unavailable: libnvidia-ml.so.1: cannot open shared object file");
    return state;
  }
  wv1::ForeignProcess process;
  if (Foreign(&process) && probes < EnvInt("FAKE_WORKER_FOREIGN_PROBES", 1 << 30)) {
    *state.add_foreign() = process;
    state.set_utilization_percent(97);
  } else {
    state.set_utilization_percent(0);
  }
  state.set_sm_clock_mhz(1980);
  state.set_default_sm_clock_mhz(1980);
  return state;
}

// One point of FAKE_WORKER_HOLD: where and when to hold.
struct Hold {
  std::string dir;
  bool serial = false;
  int at = 0;        // the outcome of the phase, from 1
  int ordinal = -1;  // -1: on every GPU
};

// FAKE_WORKER_HOLD's points; those of malformed items are left out.
std::vector<Hold> ParseHolds() {
  std::vector<Hold> holds;
  const char* value = std::getenv("FAKE_WORKER_HOLD");
  if (value == nullptr) return holds;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    // From the right: the dir is what is left.
    std::vector<absl::string_view> fields = absl::StrSplit(item, ':');
    Hold hold;
    if (fields.size() >= 4 &&
        (fields[fields.size() - 3] == "screen" || fields[fields.size() - 3] == "serial")) {
      if (!absl::SimpleAtoi(fields.back(), &hold.ordinal)) continue;
      fields.pop_back();
    }
    if (fields.size() < 3 || !absl::SimpleAtoi(fields.back(), &hold.at)) continue;
    fields.pop_back();
    hold.serial = fields.back() == "serial";
    fields.pop_back();
    hold.dir = absl::StrJoin(fields, ":");
    holds.push_back(hold);
  }
  return holds;
}

// Says it holds, then waits for the test's go.
void HoldUntilGo(const Hold& hold, const std::string& context) {
  const std::string held = hold.dir + "/held";
  const std::string partial = held + ".partial";
  if (FILE* file = std::fopen(partial.c_str(), "w"); file != nullptr) {
    std::fprintf(file, "%s\n", context.c_str());
    std::fclose(file);
    std::rename(partial.c_str(), held.c_str());
  }
  // A daemon killed while its worker holds leaves no one to say go.
  const pid_t parent = getppid();
  const std::string go = hold.dir + "/go";
  while (access(go.c_str(), F_OK) != 0) {
    if (getppid() != parent) _exit(0);
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace

// `compile`: OK for every task, with a cubin of the configured size.
int Compile() {
  const char* size_text = std::getenv("FAKE_WORKER_CUBIN_BYTES");
  const size_t size = size_text != nullptr ? std::strtoull(size_text, nullptr, 10) : 1024;
  wv1::WorkerResponse hello;
  hello.mutable_hello()->set_pid(getpid());
  hello.mutable_hello()->set_nvrtc_version("13.0");
  if (!Send(hello)) return 1;
  while (true) {
    wv1::WorkerRequest request;
    if (!ReadDelimited(STDIN_FILENO, absl::InfiniteFuture(), &request).ok()) return 0;
    wv1::WorkerResponse response;
    wv1::CompileOutcome* outcome = response.mutable_compile();
    outcome->set_task_id(request.compile().task_id());
    outcome->set_status(wv1::CompileOutcome::OK);
    std::string cubin(std::max<size_t>(size, 4), '\0');
    cubin.replace(0, 4,
                  "\x7f"
                  "ELF");
    outcome->set_cubin(std::move(cubin));
    outcome->set_lowered_name(request.compile().name_expression());
    if (!Send(response)) return 1;
  }
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "compile") == 0) return Compile();
  if (argc < 2 || std::strcmp(argv[1], "profile") != 0) return 2;
  wv1::WorkerResponse hello;
  hello.mutable_hello()->set_pid(getpid());
  if (std::getenv("FAKE_WORKER_NO_DEVICE") != nullptr) {
    hello.mutable_hello()->set_error(
        "no CUDA driver: libcuda.so.1: cannot open shared object file");
    Send(hello);
    return 1;
  }
  wv1::DeviceInfo* device = hello.mutable_hello()->mutable_device();
  device->set_ordinal(argc >= 4 ? std::atoi(argv[3]) : 0);
  g_ordinal = device->ordinal();
  device->set_name("Fake GPU");
  device->set_compute_capability(90);
  device->set_sm_count(132);
  device->set_l2_bytes(60 << 20);
  device->set_driver_version("13.0");
  device->set_device_count(1);
  device->set_uuid(absl::StrCat("GPU-fake-", device->ordinal()));
  device->set_copy_gbps(4000);
  device->set_default_sm_clock_mhz(1980);
  if (EnvInt("FAKE_WORKER_GPUS", 0) > 1) device->set_device_count(EnvInt("FAKE_WORKER_GPUS", 0));
  if (std::getenv("FAKE_WORKER_MIXED") != nullptr) {
    device->set_device_count(2);
    if (device->ordinal() == 1) device->set_sm_count(114);
  }
  if (!Send(hello)) return 1;
  const char* log_path = std::getenv("FAKE_WORKER_LOG");
  int probes = 0;
  int serials = 0;
  const std::vector<Hold> holds = ParseHolds();
  int screen_outcomes = 0;
  int serial_outcomes = 0;
  while (true) {
    wv1::WorkerRequest request;
    if (!ReadDelimited(STDIN_FILENO, absl::InfiniteFuture(), &request).ok()) return 0;
    if (request.has_probe()) {
      wv1::WorkerResponse response;
      *response.mutable_device_state() = Probe(probes++);
      if (!Send(response)) return 1;
      continue;
    }
    const wv1::ProfileTask& task = request.profile();
    const bool serial = task.has_serial();
    const int64_t started_us = absl::ToUnixMicros(absl::Now());
    if (log_path != nullptr) {
      FILE* log = std::fopen(log_path, "a");
      std::fprintf(log, "%d %s variants=%d%s\n", getpid(), task.context().c_str(),
                   task.variants_size(), serial ? " serial" : "");
      std::fclose(log);
    }
    wv1::SerialReport report;
    wv1::WorkerResponse done;
    done.mutable_profile_done()->set_task_id(task.task_id());
    if (std::getenv("FAKE_WORKER_REFERENCE_FAULT") != nullptr) {
      done.mutable_profile_done()->set_status(v1::FAULT);
      done.mutable_profile_done()->set_phase("reference");
      done.mutable_profile_done()->set_detail(
          absl::StrCat(task.context(), ": reference: CUDA_ERROR_ILLEGAL_ADDRESS"));
      Send(done);
      return 3;
    }
    {
      wv1::WorkerResponse reference;
      reference.mutable_reference_done()->set_task_id(task.task_id());
      if (!Send(reference)) return 1;
    }
    const int sleep_ms = EnvInt("FAKE_WORKER_SLEEP_MS", 0);
    double screen_wall_s = 0;  // the variants' wall_seconds
    for (const wv1::KernelImage& variant : task.variants()) {
      const int outcome_number = serial ? ++serial_outcomes : ++screen_outcomes;
      for (const Hold& hold : holds) {
        if (hold.serial == serial && hold.at == outcome_number &&
            (hold.ordinal < 0 || hold.ordinal == g_ordinal)) {
          HoldUntilGo(hold, task.context());
        }
      }
      if (sleep_ms > 0) absl::SleepFor(absl::Milliseconds(sleep_ms));
      wv1::WorkerResponse response;
      wv1::VariantOutcome* outcome = response.mutable_variant();
      outcome->set_task_id(task.task_id());
      outcome->set_variant_id(variant.id());
      outcome->set_rtol(task.rtol());
      outcome->set_atol(task.atol());
      outcome->set_seeds_checked(3);
      const std::string where = absl::StrCat(task.context(), " [", variant.label(), "]");
      bool exit_after = false;
      int mode = Mode(variant.label());
      if (mode == 8 && serial) {
        mode = 2;
      } else if (mode == 8 || mode == 9) {
        mode = 0;
      }
      switch (mode) {
        case 0:
        case 1: {
          double us = mode == 0 ? 10 : 20;
          if (us == 10 && std::getenv("FAKE_WORKER_FAST_MODE0") != nullptr) us = 4;
          // MODE 1 within the noise of MODE 0: a tie.
          if (us == 20 && std::getenv("FAKE_WORKER_TIE") != nullptr) us = 10.01;
          if (serial) {
            wv1::SerialTiming* timing = report.add_timings();
            timing->set_variant_id(variant.id());
            timing->mutable_timing()->set_median_us(us);
            timing->mutable_timing()->set_min_us(us * 0.995);
            timing->mutable_timing()->set_q3_us(us * 1.002);
            timing->mutable_timing()->set_samples(60);
            timing->set_noise(0.001);
            timing->set_launches_per_sample(40);
            constexpr double kWobble[] = {0.999, 1.001, 1.0, 1.0005, 0.9995, 1.0};
            constexpr double kNoisy[] = {0.97, 1.03, 1.0, 1.02, 0.98, 1.0};
            const bool noisy = std::getenv("FAKE_WORKER_NOISY") != nullptr;
            const int k = report.timings_size() - 1;
            for (int r = 0; r < 6; ++r) {
              timing->add_round_median_us(us * (noisy ? kNoisy : kWobble)[(r + k) % 6]);
            }
            outcome->set_status(v1::OK);
            outcome->set_phase("validate");
            break;
          }
          if (us == 20 && std::getenv("FAKE_WORKER_SCREEN_LIES") != nullptr) us = 5;
          outcome->set_status(v1::OK);
          outcome->set_phase("time");
          outcome->mutable_timing()->set_median_us(us);
          outcome->mutable_timing()->set_min_us(us * 0.98);
          outcome->mutable_timing()->set_q3_us(us * 1.01);
          outcome->mutable_timing()->set_p90_us(us * 1.02);
          outcome->mutable_timing()->set_samples(30);
          outcome->set_pool_sets(4);
          outcome->set_pool_bytes(int64_t{130} << 20);
          outcome->set_launches_per_sample(40);
          // A screen's stages, as a real worker reports them (seconds).
          outcome->set_wall_seconds(0.02);
          outcome->set_gpu_seconds(0.006);
          outcome->mutable_timeline()->set_load_s(0.001);
          outcome->mutable_timeline()->set_validate_s(0.002);
          outcome->mutable_timeline()->set_graph_s(0.004);
          outcome->mutable_timeline()->set_warmup_s(0.003);
          outcome->mutable_timeline()->set_samples_s(0.008);
          screen_wall_s += 0.02;
          break;
        }
        case 2:
          outcome->set_status(v1::WRONG_RESULT);
          outcome->set_phase("validate seed 1");
          outcome->set_max_error(0.5);
          outcome->set_detail(absl::StrCat(where, ": validate seed 1: 12 elements differ"));
          break;
        case 3:
          while (true) pause();
        case 4:
          _exit(1);
        case 5:
          outcome->set_status(v1::FAULT);
          outcome->set_phase("validate seed 1");
          outcome->set_detail(absl::StrCat(where, ": CUDA_ERROR_ILLEGAL_ADDRESS"));
          exit_after = true;
          break;
        case 6:
          outcome->set_status(v1::UNSUPPORTED);
          outcome->set_phase("check");
          outcome->set_detail(
              absl::StrCat(where, ": 1024 threads per block, the function allows 512"));
          break;
        case 7:
          outcome->set_status(v1::TIMEOUT);
          outcome->set_phase("validate seed 1");
          outcome->set_detail(absl::StrCat(where, ": did not finish within 0.1 s"));
          exit_after = true;
          break;
      }
      if (!Send(response)) return 1;
      if (exit_after) return 3;
    }
    if (serial) {
      for (const wv1::KernelImage& variant : task.variants()) {
        if (Mode(variant.label()) != 9) continue;
        done.mutable_profile_done()->set_status(v1::FAULT);
        done.mutable_profile_done()->set_phase(absl::StrCat("serial variant ", variant.id()));
        done.mutable_profile_done()->set_detail(
            absl::StrCat(task.context(), ": serial round 2: CUDA_ERROR_ILLEGAL_ADDRESS"));
        Send(done);
        return 3;
      }
      if (sleep_ms > 0) absl::SleepFor(absl::Milliseconds(sleep_ms));
      report.set_rounds(6);
      report.set_stop(
          "every candidate separated from the fastest or within 0.50% of it after 6 rounds");
      report.set_min_sm_clock_mhz(1980);
      report.set_max_sm_clock_mhz(1980);
      report.set_default_sm_clock_mhz(1980);
      report.set_max_power_mw(612000);
      report.set_power_limit_mw(700000);
      report.set_max_temperature_c(64);
      if (std::getenv("FAKE_WORKER_THROTTLED") != nullptr) {
        report.set_throttled(true);
        report.set_throttled_rounds(9);
        report.set_min_sm_clock_mhz(990);
        report.set_clocks_event_reasons(0x4 | 0x40);
        report.set_clocks_events("power cap, thermal slowdown");
      }
      wv1::ForeignProcess process;
      if (serials++ < EnvInt("FAKE_WORKER_FOREIGN_SERIALS", 0) && Foreign(&process)) {
        report.set_contended_rounds(2);
        *report.add_foreign() = process;
      }
      if (std::getenv("FAKE_WORKER_NO_NVML") != nullptr) {
        report.set_nvml_error(
            "NVML unavailable: libnvidia-ml.so.1: cannot open shared object file");
      }
      *done.mutable_profile_done()->mutable_serial() = report;
    }
    done.mutable_profile_done()->set_status(v1::OK);
    // The task's set-up took 0.05 s besides its variants.
    done.mutable_profile_done()->set_wall_seconds(screen_wall_s + 0.05);
    if (const char* spans = std::getenv("FAKE_WORKER_SPANS")) {
      FILE* file = std::fopen(spans, "a");
      std::fprintf(
          file, "%s %lld %lld %s\n", device->uuid().c_str(), static_cast<long long>(started_us),
          static_cast<long long>(absl::ToUnixMicros(absl::Now())), serial ? "serial" : "screen");
      std::fclose(file);
    }
    if (!Send(done)) return 1;
  }
}
