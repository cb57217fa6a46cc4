// autotuned's server: opens the cache, binds every listen address and
// serves autotune.v1.Autotune, grpc.health.v1.Health and server reflection.
//
//   ServerOptions options;             // defaults: DefaultDatabasePath(),
//   ASSIGN_OR_RETURN(auto server,      //   DefaultServerAddress()
//                    Server::BuildAndStart(options));
//   server->Wait();                    // until Shutdown()
//
// Start-up fails (with a one-line reason, nothing left half-started) when
// the database cannot be opened or is held by another daemon, a listen
// address is unsafe or malformed, or another daemon already answers on a
// Unix socket path. A stale socket file from a dead daemon is replaced.
// Without NVRTC (or without the worker executable) the daemon still starts
// and serves lookups and admin calls; compile jobs are refused with the
// reason. While the database is unavailable (removed or replaced under the
// daemon, its write lock held elsewhere, unreadable) health is NOT_SERVING
// and the reason is logged; calls still go on, each with its own error. Files are created
// owner-only: the database 0600 in a 0700 directory, the socket `socket_mode` (owner-only
// unless the operator widens it).
#ifndef AUTOTUNE_SERVICE_SERVER_H_
#define AUTOTUNE_SERVICE_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/gpu_lease.h"
#include "cache/store.h"
#include "kernels/profile_task.h"
#include "service/defaults.h"
#include "service/rpc/auth.h"

namespace autotune::service {

struct ServerOptions {
  std::string db_path;              // empty = DefaultDatabasePath()
  std::vector<std::string> listen;  // empty = {DefaultServerAddress()}
  bool insecure = false;            // allow plaintext TCP on loopback
  std::string tls_cert;             // PEM files; both or neither
  std::string tls_key;
  std::string tls_client_ca;                  // set: clients must present a cert it signed
  int readers = cache::kDefaultReaders;       // pooled database read connections
  unsigned socket_mode = kDefaultSocketMode;  // Unix sockets; 0660 lets a group in
  absl::Duration shutdown_grace = absl::Seconds(10);
  // Folders of kernel families (*.textproto) registered at start-up, in
  // addition to the built-in ones: those in <prefix>/share/autotune/kernels
  // beside this program (installed), else, for a binary in its build tree,
  // the checkout's kernels/ (start-up fails naming both when neither is
  // there). "none" among them leaves the built-in ones out. A name defined
  // twice fails the start, naming both files.
  std::vector<std::string> kernels_dirs;
  // The autotune-worker executable; empty = beside this program.
  std::string worker_path;
  // The program that validates and times kernels on the GPU; empty =
  // worker_path. (A wrapper that runs the worker under a profiler or a
  // sanitizer, say; it must speak the worker protocol.)
  std::string profile_worker_path;
  int compile_workers = 0;  // 0 = one per core
  // Searched jobs compile ahead up to this many times a round's size
  // (service/jobs/search.h); 0 = off.
  int compile_ahead = kDefaultCompileAhead;
  // Each compile worker's data memory in MiB; 0 = no cap.
  int64_t compile_memory_mb = kDefaultCompileMemoryMb;
  // Compile workers confine themselves with Landlock
  // (service/worker/confinement.h); where the kernel cannot, compiling is
  // unavailable, with the reason, unless this is set.
  bool allow_unconfined_compiles = false;
  // GPUs to profile on: empty = all, "none" = no profiling (compile-only
  // jobs), else ordinals "0,2". Workers start with the first job that
  // measures.
  std::string gpus;
  double variant_timeout_s = kernels::kDefaultLaunchTimeoutS;  // per launch, when a job gives none
  // Host-wide GPU leases (base/gpu_lease.h) every GPU task holds; "none" =
  // take none (only when no other autotune process shares the GPUs).
  std::string lease_dir = kDefaultLeaseDir;
  // Serial phase: how long to wait for a quiet GPU, when a job gives none.
  double quiet_wait_s = kDefaultQuietWaitS;
  // Tune-on-miss (service/lookup/tune_on_miss.h): problems accepted per hour; 0 = off.
  int tune_on_miss_per_hour = kDefaultTuneOnMissPerHour;
  // Limits on one job and on one submitter's unfinished jobs; 0 = none.
  int64_t max_job_variants = kDefaultMaxJobVariants;
  int max_jobs_per_submitter = kDefaultMaxJobsPerSubmitter;
  // Who may call what (service/rpc/auth.h); daemon_uid is filled in by the server.
  AuthOptions auth;
  // The HTTP port (service/rpc/http_server.h): Prometheus metrics at /metrics,
  // the admin page at /admin and its API under /api/ (service/rpc/admin_api.h);
  // "host:port", empty = none.
  std::string http_listen;
  // Names the HTTP port answers besides loopback and its listen host (a Host
  // header naming another is 403; service/rpc/http_server.h).
  std::vector<std::string> http_allowed_hosts;
  // The audit log (service/rpc/audit_log.h): empty = audit.log beside the
  // database; "none" = no audit log.
  std::string audit_log;
  // The one folder the Backup call writes into (absolute; created 0700 when
  // missing); empty = Backup is refused (cache::Store::Backup).
  std::string backup_dir;
  // How often the database is checked (cache::Store::CheckAvailable());
  // grpc.health.v1 says NOT_SERVING, for the whole server and for
  // autotune.v1.Autotune, from a failed check until one passes.
  absl::Duration health_interval = absl::Seconds(kDefaultHealthIntervalS);
};

// How an operator changes one of the daemon's settings, for the errors of
// the core that name it (SettingHint, job_options.h): "max_job_variants" ->
// "autotuned --max-job-variants". Each setting is the config file's field
// of the flag of the same name (proto/daemon_config.proto).
std::string DaemonSettingHint(absl::string_view setting);

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> BuildAndStart(const ServerOptions& options);
  ~Server();  // Shutdown() if still running

  // The addresses actually bound (a TCP port 0 is replaced by the real one).
  const std::vector<std::string>& addresses() const;
  const std::string& database_path() const;

  // Reads the token file again (SIGHUP); the tokens now loaded. On error
  // the old tokens stay.
  absl::StatusOr<int> ReloadTokens();
  // Where the HTTP port listens ("127.0.0.1:9464"); empty when it does not.
  const std::string& http_address() const;
  // The audit log's path; empty when there is none.
  const std::string& audit_log_path() const;

  // Blocks until Shutdown() has finished.
  void Wait();
  // Stops accepting calls, lets in-flight calls finish (up to
  // shutdown_grace, then cancels them) and closes the database cleanly.
  // Safe to call from any thread, more than once.
  void Shutdown();

 private:
  class Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_SERVER_H_
