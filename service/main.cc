// autotuned: the autotune daemon. Parses flags and the config file into
// ServerOptions (service/daemon_flags.h), starts the server and stops it
// cleanly on SIGTERM or SIGINT; SIGHUP reads the token file again.
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/sanitizers.h"
#include "service/daemon_flags.h"
#include "service/logging.h"
#include "service/server.h"
#include "spdlog/spdlog.h"

namespace {

// A BatchLookup or GetBinaries with cubins builds and sends MBs. By default
// glibc maps blocks over 128 KiB afresh and gives freed memory back at
// once, so each such call faulted in every page again (at 1,000 16 KB
// cubins in one call that was most of the call's time). The daemon keeps
// up to 256 MiB of what it freed for the next call instead, and maps afresh
// only blocks of 64 MiB and more.
//
// Its threads keep glibc's heaps (arenas), up to 8 per core. One heap for
// all threads was tried: a large call then never landed on a thread whose
// heap had not served one, but 64 clients on 16 cores got 7 times fewer
// lookups through than with glibc's heaps (bench/RESULTS.md). The
// start-ups' cubins now come in calls of about a MB each.
//
// Then kWarmHeapBytes are touched once, on a thread of their own while the
// daemon starts, and freed: the next thread that needs a heap takes over
// that thread's when it ends, with its pages already there. (Not under a
// sanitizer, whose allocator is its own.)
constexpr size_t kWarmHeapBytes = size_t{60} << 20;

void KeepMemoryForLargeCalls() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (autotune::kSanitizerBuild) return;
  std::thread([] {
    char* block = static_cast<char*>(malloc(kWarmHeapBytes));
    if (block == nullptr) return;
    const long page = sysconf(_SC_PAGESIZE);
    char* first =
        reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(block) + page - 1) / page * page);
    const size_t length = (kWarmHeapBytes - static_cast<size_t>(first - block)) / page * page;
    // The kernel fills the pages in one call where it can (Linux 5.14).
    if (madvise(first, length, MADV_POPULATE_WRITE) != 0) {
      for (size_t i = 0; i < kWarmHeapBytes; i += static_cast<size_t>(page)) {
        static_cast<volatile char*>(block)[i] = 0;
      }
    }
    free(block);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  autotune::service::DaemonFlags flags;
  CLI::App app{"autotuned: autotuning service for CUDA kernels with a persistent config cache"};
  autotune::service::AddDaemonFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help
    std::fprintf(stderr, "autotuned: %s\n",
                 autotune::service::ConfigErrorText(app, error, {argv + 1, argv + argc}).c_str());
    return error.get_exit_code();
  }
  if (flags.print_config) {
    std::fputs(autotune::service::EffectiveConfigText(flags).c_str(), stdout);
    return 0;
  }
  const autotune::service::ServerOptions& options = flags.server;
  // Debian's Abseil is built with deadlock detection on, which keeps a global
  // lock graph up to date on every lock (gRPC's included): about a tenth of
  // a lookup's instructions. A daemon in service does not need it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  KeepMemoryForLargeCalls();
  std::signal(SIGPIPE, SIG_IGN);
  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // After the signal mask: the log's own thread inherits it.
  if (absl::Status logging = autotune::service::ConfigureLogging(
          flags.log_level, flags.log_format == "json" ? autotune::service::LogFormat::kJson
                                                      : autotune::service::LogFormat::kText);
      !logging.ok()) {
    std::fprintf(stderr, "autotuned: %s\n", std::string(logging.message()).c_str());
    return 1;
  }
  auto server = autotune::service::Server::BuildAndStart(options);
  if (!server.ok()) {
    if (flags.log_format == "json") {
      spdlog::critical("{}", std::string(server.status().message()));
    } else {
      std::fprintf(stderr, "autotuned: %s\n", std::string(server.status().message()).c_str());
    }
    return 1;
  }
  spdlog::info("autotuned listening on {} (database {})",
               absl::StrJoin((*server)->addresses(), ", "), (*server)->database_path());

  std::thread stopper([&server, stop_signals] {
    int signal = 0;
    while (sigwait(&stop_signals, &signal) == 0 && signal == SIGHUP) {
      absl::StatusOr<int> tokens = (*server)->ReloadTokens();
      if (tokens.ok()) {
        spdlog::info("received SIGHUP: {} tokens loaded", *tokens);
      } else {
        // Either the file could not be read (the tokens loaded before stay)
        // or some lines were skipped (the others apply); the message says.
        spdlog::error("received SIGHUP: {}", std::string(tokens.status().message()));
      }
    }
    spdlog::info("received {}, finishing in-flight calls",
                 signal == SIGTERM ? "SIGTERM" : "SIGINT");
    (*server)->Shutdown();
  });
  (*server)->Wait();
  stopper.join();
  spdlog::info("autotuned stopped; database closed");
  return 0;
}
