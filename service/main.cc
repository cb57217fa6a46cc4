// autotuned: the autotune daemon. Parses flags into ServerOptions, starts
// the server and stops it cleanly on SIGTERM or SIGINT.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/paths.h"
#include "service/server.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  autotune::service::ServerOptions options;
  std::string log_level = "info";
  CLI::App app{"autotuned: autotuning service for CUDA kernels with a persistent config cache"};
  app.add_option("--db", options.db_path,
                 "SQLite database file (default " + autotune::DefaultDatabasePath() + ")");
  app.add_option("--listen", options.listen,
                 "address to serve, repeatable: unix:///path or host:port (default " +
                     autotune::DefaultServerAddress() + ")");
  app.add_flag("--insecure", options.insecure, "allow plaintext TCP on a loopback address");
  app.add_option("--tls-cert", options.tls_cert, "PEM certificate chain for TCP")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key, "PEM private key for TCP")->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", options.tls_client_ca,
                 "PEM CA: require client certificates signed by it")
      ->check(CLI::ExistingFile);
  app.add_option("--readers", options.readers, "pooled database read connections")
      ->check(CLI::Range(1, 64));
  app.add_option("--kernels", options.kernels_dir,
                 "directory of built-in kernel families (*.textproto); 'none' to skip (default: "
                 "../share/autotune/kernels beside autotuned, or the checkout's kernels/ for a "
                 "build-tree binary)");
  app.add_option("--worker", options.worker_path,
                 "the autotune-worker executable (default: beside autotuned)");
  app.add_option("--profile-worker", options.profile_worker_path,
                 "the program that validates and times kernels on the GPU, speaking the "
                 "worker protocol (default: --worker; a wrapper that runs it under a profiler, "
                 "say)")
      ->check(CLI::ExistingFile);
  app.add_option("--compile-workers", options.compile_workers,
                 "compile worker processes (default: one per core)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--gpus", options.gpus,
                 "GPUs to validate and time kernels on: ordinals like 0,1; 'none' for "
                 "compile-only service (default: all)");
  app.add_option("--variant-timeout", options.variant_timeout_s,
                 absl::StrCat("seconds one kernel launch may run before its variant is TIMEOUT "
                              "(default ",
                              options.variant_timeout_s, "; a job may set its own)"))
      ->check(CLI::PositiveNumber);
  app.add_option("--lease-dir", options.lease_dir,
                 "directory of the host-wide GPU leases every autotune daemon and benchmark "
                 "honours; 'none' to take none")
      ->capture_default_str();
  app.add_option("--quiet-wait", options.quiet_wait_s,
                 "seconds the serial phase waits for a GPU without other compute processes "
                 "before the problem fails (a job may set its own; --force measures anyway)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tune-on-miss-per-hour", options.tune_on_miss_per_hour,
                 "problems a RequestTuning call (tune-on-miss) may queue per hour, over all "
                 "clients; 0 turns it off")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-job-variants", options.max_job_variants,
                 "most variants one job may plan; a larger one is refused (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-jobs-per-submitter", options.max_jobs_per_submitter,
                 "most unfinished jobs one caller (token, uid, certificate) may have "
                 "(0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--token-file", options.auth.token_file,
                 "bearer tokens, one '<role> <id> sha256:<hex> [expires=<RFC 3339>]' per line "
                 "(`autotune token new` makes one); read again on SIGHUP")
      ->check(CLI::ExistingFile);
  app.add_option("--peer-role", options.auth.peer_roles,
                 "a role for Unix-socket peers: uid:N=ROLE or gid:N=ROLE (repeatable; the "
                 "daemon's own uid is admin unless named)");
  app.add_option("--cert-role", options.auth.cert_roles,
                 "a role for TLS client certificates by common name: NAME=ROLE (repeatable)");
  app.add_option("--anonymous-role", options.auth.anonymous_role,
                 "the role of callers with no token, mapped peer or mapped certificate")
      ->check(CLI::IsMember({"none", "reader", "tuner", "admin"}))
      ->capture_default_str();
  app.add_option("--metrics-listen", options.metrics_listen,
                 "serve Prometheus metrics over HTTP at host:port (GET /metrics); off by default");
  app.add_option("--audit-log", options.audit_log,
                 "JSON lines, one per mutating call (default: audit.log beside the database; "
                 "'none' for no audit log)");
  std::string socket_mode = "0600";
  app.add_option("--socket-mode", socket_mode,
                 "permissions of Unix sockets, octal (0600; 0660 lets the group connect)")
      ->check([](const std::string& text) -> std::string {
        if (text.empty() || text.size() > 4 ||
            text.find_first_not_of("01234567") != std::string::npos) {
          return "expected an octal mode such as 0600 or 0660";
        }
        return "";
      });
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  CLI11_PARSE(app, argc, argv);

  options.socket_mode = static_cast<unsigned>(std::stoul(socket_mode, nullptr, 8));
  spdlog::set_level(spdlog::level::from_str(log_level));
  // Debian's Abseil is built with deadlock detection on, which keeps a global
  // lock graph up to date on every lock (gRPC's included): about a tenth of
  // a lookup's instructions. A daemon in service does not need it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::signal(SIGPIPE, SIG_IGN);
  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = autotune::service::Server::BuildAndStart(options);
  if (!server.ok()) {
    std::fprintf(stderr, "autotuned: %s\n", std::string(server.status().message()).c_str());
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
        spdlog::error(
            "received SIGHUP: the token file was not reloaded ({}); the tokens "
            "loaded before stay",
            std::string(tokens.status().message()));
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
