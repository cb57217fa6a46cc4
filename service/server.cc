#include "service/server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "base/version.h"
#include "cache/store.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/support/server_interceptor.h"
#include "kernels/builtin/builtin_dir.h"
#include "kernels/family_loader.h"
#include "service/jobs/job_runner.h"
#include "service/lookup/cache_admin.h"
#include "service/lookup/lookup_resolver.h"
#include "service/lookup/predictions.h"
#include "service/pools/compile_pool.h"
#include "service/rpc/admin_api.h"
#include "service/rpc/admission.h"
#include "service/rpc/audit_log.h"
#include "service/rpc/auth.h"
#include "service/rpc/autotune_service.h"
#include "service/rpc/http_server.h"
#include "service/rpc/listen_address.h"
#include "service/rpc/metrics.h"
#include "service/rpc/unix_listener.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
namespace {

// Counts the calls the server is running (all but the long-lived streams
// below). gRPC's Shutdown(deadline) waits,
// after the last call, until every client has closed its connection, which
// an idle inference server does not do: the whole grace period would pass.
// Waiting for the calls here and then shutting down at once ends a stop as
// soon as the last call has.
class CallCounter {
 public:
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> Factory() {
    return std::make_unique<Creator>(this);
  }
  // Waits until no call is running, or `deadline`; true when none is.
  bool WaitIdle(absl::Time deadline) {
    while (in_flight_.load() > 0) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

 private:
  // One per call, destroyed with it.
  class Counted : public grpc::experimental::Interceptor {
   public:
    explicit Counted(std::atomic<int64_t>* in_flight) : in_flight_(in_flight) {
      in_flight_->fetch_add(1);
    }
    ~Counted() override { in_flight_->fetch_sub(1); }
    void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
      methods->Proceed();
    }

   private:
    std::atomic<int64_t>* in_flight_;
  };
  class Creator : public grpc::experimental::ServerInterceptorFactoryInterface {
   public:
    explicit Creator(CallCounter* counter) : counter_(counter) {}
    grpc::experimental::Interceptor* CreateServerInterceptor(
        grpc::experimental::ServerRpcInfo* info) override {
      // Streams that last as long as something outside the call (a health
      // watch, a job being followed) are not waited for: they would hold
      // every stop for the whole grace period.
      const std::string_view method = info->method();
      if (method == "/grpc.health.v1.Health/Watch" || method == "/autotune.v1.Autotune/SubmitJob") {
        return nullptr;
      }
      return new Counted(&counter_->in_flight_);
    }

   private:
    CallCounter* counter_;
  };

  std::atomic<int64_t> in_flight_{0};
};

constexpr char kServiceName[] = "autotune.v1.Autotune";
constexpr int kMaxReceiveBytes = 64 << 20;

// Makes `path` free for a new socket: refuses when a live server answers
// there or when it is something other than a socket; removes a stale one.
absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return PosixError(absl::StrCat("cannot inspect socket path ", path), errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
  }
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return PosixError("socket()", errno);
  const int connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int connect_errno = errno;
  close(fd);
  if (connected == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another server is already listening on unix://", path));
  }
  if (connect_errno != ECONNREFUSED) {
    return PosixError(absl::StrCat("cannot check socket ", path), connect_errno);
  }
  if (unlink(path.c_str()) != 0) {
    return PosixError(absl::StrCat("cannot remove stale socket ", path), errno);
  }
  spdlog::info("removed stale socket {}", path);
  return absl::OkStatus();
}

// Each HTTP connection, idle or not, is a descriptor (http_server.h holds up
// to kThreads of them before a request waits): the soft limit of 1024 that
// systemd and shells give would fail accept() on gRPC too under an HTTP
// flood. The hard limit is the operator's.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    spdlog::info("open files: soft limit raised from {} to {} for the HTTP port", before,
                 limit.rlim_max);
  }
}

}  // namespace

std::string DaemonSettingHint(absl::string_view setting) {
  return absl::StrCat("autotuned --", absl::StrReplaceAll(setting, {{"_", "-"}}));
}

class Server::Impl {
 public:
  absl::Status Start(const ServerOptions& options);
  void Wait() { done_.WaitForNotification(); }
  void Shutdown();
  ~Impl() { Shutdown(); }
  absl::StatusOr<int> ReloadTokens() { return auth_->Reload(); }
  const std::string& audit_path() const { return audit_path_; }
  const std::string& http_address() const {
    static const std::string kNone;
    return http_ != nullptr ? http_->address() : kNone;
  }

  std::vector<std::string> addresses_;
  std::string db_path_;

 private:
  void FillStats(v1::StatsResponse* response) const;
  // Checks the database every `interval` until Shutdown(); sets health.
  void WatchDatabase(absl::Duration interval);
  absl::Status RegisterStartupFamilies(const std::vector<std::string>& dirs);
  // The admin page's address with a new login token of `caller`'s role.
  absl::StatusOr<v1::CreateLoginLinkResponse> CreateLoginLink(const Caller& caller);

  absl::Duration shutdown_grace_;
  absl::Time started_ = absl::Now();
  std::vector<std::string> socket_paths_;
  std::unique_ptr<cache::Store> store_;
  // Learns in the background from store_; what resolver_ asks.
  std::unique_ptr<Predictions> predictions_;
  std::unique_ptr<LookupResolver> resolver_;
  std::unique_ptr<CacheAdmin> admin_;
  std::unique_ptr<CompilePool> compile_pool_;
  std::unique_ptr<JobRunner> jobs_;
  std::unique_ptr<TuneOnMiss> tune_on_miss_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Admission> admission_;  // over auth_
  std::unique_ptr<AuditLog> audit_;
  std::string audit_path_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AdminApi> admin_api_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<AutotuneService> service_;
  std::vector<std::unique_ptr<UnixListener>> unix_listeners_;
  // Outlives server_, whose interceptors point to it.
  std::unique_ptr<CallCounter> calls_ = std::make_unique<CallCounter>();
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification stop_watching_;
  std::thread database_watch_;
  absl::Notification done_;
};

absl::Status Server::Impl::Start(const ServerOptions& options) {
  shutdown_grace_ = options.shutdown_grace;
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!options.tls_client_ca.empty() && options.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if ((options.socket_mode & ~0770u) != 0) {
    return absl::InvalidArgumentError(
        "--socket-mode: only owner and group bits may be set (at most 0770)");
  }
  const bool tls = !options.tls_cert.empty();
  std::vector<std::string> listen = options.listen;
  if (listen.empty()) listen.push_back(DefaultServerAddress());
  std::vector<ListenAddress> addresses;
  for (const std::string& text : listen) {
    ASSIGN_OR_RETURN(ListenAddress address, ParseListenAddress(text, tls, options.insecure));
    addresses.push_back(std::move(address));
  }

  std::shared_ptr<grpc::ServerCredentials> tcp_credentials = grpc::InsecureServerCredentials();
  if (tls) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    ASSIGN_OR_RETURN(pair.private_key, ReadFile(options.tls_key, "--tls-key"));
    ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(options.tls_cert, "--tls-cert"));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!options.tls_client_ca.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(options.tls_client_ca, "--tls-client-ca"));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    tcp_credentials = grpc::SslServerCredentials(ssl);
  }

  // Everything this process creates is owner-only.
  umask(077);

  db_path_ = options.db_path.empty() ? DefaultDatabasePath() : options.db_path;
  RETURN_IF_ERROR(MakeDirectories(Dirname(db_path_), 0700));
  for (const ListenAddress& address : addresses) {
    if (address.kind != ListenAddress::Kind::kUnix) continue;
    RETURN_IF_ERROR(MakeDirectories(Dirname(address.path), 0700));
    // The default folder in /tmp is one another user could make first.
    if (Dirname(address.path) == FallbackSocketDirectory()) {
      RETURN_IF_ERROR(CheckPrivateDirectory(FallbackSocketDirectory()));
    }
    RETURN_IF_ERROR(ClaimSocketPath(address.path));
  }

  AuthOptions auth_options = options.auth;
  auth_options.daemon_uid = getuid();
  ASSIGN_OR_RETURN(auth_, Authenticator::Create(auth_options));
  admission_ = std::make_unique<Admission>(auth_.get());
  if (options.audit_log != "none") {
    audit_path_ = options.audit_log.empty() ? Dirname(db_path_) + "/audit.log" : options.audit_log;
    ASSIGN_OR_RETURN(audit_, AuditLog::Open(audit_path_));
  }

  cache::StoreOptions store_options;
  store_options.path = db_path_;
  store_options.readers = options.readers;
  if (!options.backup_dir.empty()) {
    if (options.backup_dir[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--backup-dir '", options.backup_dir, "' is not an absolute path"));
    }
    RETURN_IF_ERROR(MakeDirectories(options.backup_dir, 0700));
    store_options.backup_dir = options.backup_dir;
  }
  store_options.warn = [](const std::string& text) { spdlog::warn("database: {}", text); };
  ASSIGN_OR_RETURN(store_, cache::Store::Open(store_options));
  predictions_ = std::make_unique<Predictions>(store_.get());
  resolver_ = std::make_unique<LookupResolver>(store_.get(), predictions_.get());
  // RegisterKernel compiles a new family, and Import the configs of its
  // entries, on the job runner's pool; no call
  // is served before jobs_ exists.
  // Import serves every entry with the daemon's own compile of its config.
  admin_ = std::make_unique<CacheAdmin>(
      store_.get(),
      [this](const v1::KernelFamily& family) { return jobs_->CheckFamilyCompiles(family); },
      [this](const std::vector<ConfigCompile>& configs) { return jobs_->CompileConfigs(configs); });
  RETURN_IF_ERROR(RegisterStartupFamilies(options.kernels_dirs));

  CompilePoolOptions pool_options;
  pool_options.worker_path =
      options.worker_path.empty() ? FindBesideThisProgram("autotune-worker") : options.worker_path;
  pool_options.workers = options.compile_workers;
  pool_options.memory_limit_mb = options.compile_memory_mb;
  pool_options.allow_unconfined = options.allow_unconfined_compiles;
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(pool_options);
  std::string pool_error;
  if (pool.ok()) {
    compile_pool_ = *std::move(pool);
    spdlog::info("compile pool: up to {} workers ({}), NVRTC {}; confinement: {}; memory: {}",
                 compile_pool_->size(), pool_options.worker_path, compile_pool_->nvrtc_version(),
                 compile_pool_->confinement(), compile_pool_->memory_limit());
    if (absl::StartsWith(compile_pool_->confinement(), "none")) {
      spdlog::warn(
          "compiles run unconfined (--allow-unconfined-compiles): a family's source "
          "can read any file this daemon's user can");
    }
  } else {
    pool_error = std::string(pool.status().message());
    spdlog::warn("compiling is unavailable: {} (tried again when a job needs it)", pool_error);
  }
  JobRunnerOptions job_options;
  if (compile_pool_ == nullptr) {
    job_options.start_pool = [pool_options] { return CompilePool::Start(pool_options); };
  }
  job_options.variant_timeout_s = options.variant_timeout_s;
  job_options.quiet_wait = absl::Seconds(options.quiet_wait_s);
  job_options.compile_ahead = options.compile_ahead;
  job_options.max_job_variants = options.max_job_variants;
  job_options.max_unfinished_jobs_per_submitter = options.max_jobs_per_submitter;
  job_options.setting_hint = DaemonSettingHint;
  job_options.profile.lease_dir = options.lease_dir == "none" ? "" : options.lease_dir;
  if (options.gpus == "none") {
    job_options.profile_off_reason = "the daemon runs with --gpus none";
  } else {
    job_options.profile.worker_path = options.profile_worker_path.empty()
                                          ? pool_options.worker_path
                                          : options.profile_worker_path;
    for (absl::string_view ordinal : absl::StrSplit(options.gpus, ',', absl::SkipEmpty())) {
      int value = 0;
      if (!absl::SimpleAtoi(ordinal, &value) || value < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--gpus: '", std::string(ordinal), "' is not a GPU ordinal (use 'none', or '0,1')"));
      }
      job_options.profile.devices.push_back(value);
    }
  }
  jobs_ = std::make_unique<JobRunner>(store_.get(), compile_pool_.get(), pool_error,
                                      std::move(job_options));
  tune_on_miss_ = std::make_unique<TuneOnMiss>(
      store_.get(), jobs_.get(),
      TuneOnMissOptions{.max_problems_per_hour = options.tune_on_miss_per_hour,
                        .setting_hint = DaemonSettingHint});
  if (!options.http_listen.empty()) {
    RaiseOpenFileLimit();
    metrics_ =
        Metrics::Create({.resolver = resolver_.get(), .store = store_.get(), .jobs = jobs_.get()});
    admin_api_ = std::make_unique<AdminApi>(AdminApi::Sources{.admin = admin_.get(),
                                                              .jobs = jobs_.get(),
                                                              .admission = admission_.get(),
                                                              .audit = audit_.get(),
                                                              .auth = auth_.get()});
    const Metrics* metrics = metrics_.get();
    const AdminApi* api = admin_api_.get();
    ASSIGN_OR_RETURN(
        http_, HttpServer::Start(
                   options.http_listen,
                   {{"/metrics",
                     [metrics](const HttpRequest&) {
                       return HttpResponse{.content_type = "text/plain; version=0.0.4",
                                           .body = metrics->TextExposition(),
                                           .headers = {}};
                     }},
                    {"/admin", [api](const HttpRequest& request) { return api->Page(request); }},
                    {"/api", [api](const HttpRequest& request) { return api->Api(request); }}},
                   options.http_allowed_hosts));
    spdlog::info("metrics served on http://{}/metrics, the admin page on http://{}/admin",
                 http_->address(), http_->address());
    const std::string host = options.http_listen.substr(0, options.http_listen.rfind(':'));
    if (!IsLoopbackHost(absl::StripPrefix(absl::StripSuffix(host, "]"), "["))) {
      spdlog::warn(
          "the HTTP port {} is not on a loopback address and speaks plain HTTP: "
          "bearer tokens sent to the admin API cross the network in the clear "
          "(put it behind a TLS proxy, or bind it to 127.0.0.1)",
          http_->address());
    }
  }
  service_ = std::make_unique<AutotuneService>(
      resolver_.get(), admin_.get(), jobs_.get(), tune_on_miss_.get(), admission_.get(),
      audit_.get(), metrics_.get(), [this](v1::StatsResponse* response) { FillStats(response); },
      [this](const Caller& caller) { return CreateLoginLink(caller); });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  builder.RegisterService(service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counting;
  counting.push_back(calls_->Factory());
  builder.experimental().SetInterceptorCreators(std::move(counting));
  std::vector<int> ports(addresses.size(), 0);
  for (size_t i = 0; i < addresses.size(); ++i) {
    const ListenAddress& address = addresses[i];
    if (address.kind == ListenAddress::Kind::kUnix) {
      // Accepted by our own listener, which learns each peer's uid first.
      ASSIGN_OR_RETURN(std::unique_ptr<UnixListener> listener,
                       UnixListener::Bind(address.path, options.socket_mode));
      unix_listeners_.push_back(std::move(listener));
    } else {
      builder.AddListeningPort(address.uri, tcp_credentials, &ports[i]);
    }
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError("could not bind the listen addresses (see the gRPC log above)");
  }
  for (const std::unique_ptr<UnixListener>& listener : unix_listeners_) {
    listener->Start(server_.get(), [auth = auth_.get()](int fd, const PeerCredentials& peer) {
      auth->AddPeer(fd, peer);
    });
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    const ListenAddress& address = addresses[i];
    if (address.kind == ListenAddress::Kind::kUnix) {
      socket_paths_.push_back(address.path);
      addresses_.push_back(address.uri);
    } else {
      if (ports[i] == 0) {
        server_->Shutdown();
        return absl::UnavailableError(absl::StrCat("could not listen on ", address.uri));
      }
      const bool v6 = address.host.find(':') != std::string::npos;
      addresses_.push_back(absl::StrCat(v6 ? "[" : "", address.host, v6 ? "]" : "", ":", ports[i]));
    }
  }
  absl::StatusOr<int> resumed = jobs_->ResumeUnfinished();
  if (!resumed.ok())
    spdlog::warn("cannot resume unfinished jobs: {}", std::string(resumed.status().message()));
  server_->GetHealthCheckService()->SetServingStatus(kServiceName, true);
  server_->GetHealthCheckService()->SetServingStatus(true);
  started_ = absl::Now();
  database_watch_ =
      std::thread([this, interval = options.health_interval] { WatchDatabase(interval); });
  return absl::OkStatus();
}

void Server::Impl::WatchDatabase(absl::Duration interval) {
  bool serving = true;
  while (!stop_watching_.WaitForNotificationWithTimeout(interval)) {
    const absl::Status available = store_->CheckAvailable();
    if (available.ok() == serving) continue;
    serving = available.ok();
    server_->GetHealthCheckService()->SetServingStatus(kServiceName, serving);
    server_->GetHealthCheckService()->SetServingStatus(serving);
    if (serving) {
      spdlog::info("health: SERVING again; the database {} answers", db_path_);
    } else {
      spdlog::error("health: NOT_SERVING: {}", std::string(available.message()));
    }
  }
}

absl::Status Server::Impl::RegisterStartupFamilies(const std::vector<std::string>& dirs) {
  struct Folder {
    kernels::BuiltinFamiliesDir where;
    bool builtin = false;
  };
  std::vector<Folder> folders;
  if (!absl::c_linear_search(dirs, "none")) {
    ASSIGN_OR_RETURN(kernels::BuiltinFamiliesDir builtin,
                     kernels::FindBuiltinFamilies("pass --kernels DIR, or --kernels none"));
    folders.push_back({builtin, true});
  }
  for (const std::string& dir : dirs) {
    if (dir != "none") folders.push_back({kernels::BuiltinFamiliesDir{dir, "--kernels"}, false});
  }
  std::map<std::string, std::string> defined_in;  // family name -> folder
  for (const Folder& folder : folders) {
    const std::string& dir = folder.where.path;
    absl::StatusOr<std::vector<v1::KernelFamily>> families = kernels::LoadFamilyDirectory(dir);
    if (!families.ok()) {
      return absl::Status(
          families.status().code(),
          absl::StrCat(folder.builtin ? "built-in kernel families: " : "--kernels: ",
                       families.status().message()));
    }
    for (const v1::KernelFamily& family : *families) {
      const auto [it, inserted] = defined_in.emplace(family.name(), dir);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("--kernels: family '", family.name(),
                                                       "' is defined both in ", it->second,
                                                       " and in ", dir));
      }
      bool changed = false;
      RETURN_IF_ERROR(store_->PutFamily(family, folder.builtin, &changed).status());
      if (changed) spdlog::info("kernel family {}: new version registered", family.name());
    }
    spdlog::info("{} {} kernel families from {} ({})", families->size(),
                 folder.builtin ? "built-in" : "more", dir, folder.where.origin);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CreateLoginLinkResponse> Server::Impl::CreateLoginLink(const Caller& caller) {
  if (http_ == nullptr) {
    return absl::FailedPreconditionError(
        "this daemon serves no admin page: start it with --http-listen 127.0.0.1:PORT");
  }
  ASSIGN_OR_RETURN(const std::string token,
                   auth_->AddLoginToken(caller.role, caller.id, kLoginLinkLifetime));
  // A wildcard address is reached on loopback.
  std::string address = http_->address();
  if (absl::StartsWith(address, "0.0.0.0:")) {
    address = absl::StrCat("127.0.0.1", address.substr(7));
  } else if (absl::StartsWith(address, "[::]:")) {
    address = absl::StrCat("[::1]", address.substr(4));
  }
  v1::CreateLoginLinkResponse response;
  // In the fragment, which no request carries; the page swaps it for a
  // session cookie (admin_api.h) and drops it.
  response.set_url(absl::StrCat("http://", address, "/admin#login=", token));
  response.set_expires_at(
      absl::FormatTime(absl::RFC3339_sec, absl::Now() + kLoginLinkLifetime, absl::UTCTimeZone()));
  return response;
}

void Server::Impl::FillStats(v1::StatsResponse* response) const {
  response->set_database_path(db_path_);
  response->set_uptime_s(absl::ToDoubleSeconds(absl::Now() - started_));
  response->set_server_version(kVersion);
  for (const std::string& address : addresses_) response->add_listen_addresses(address);
}

void Server::Impl::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  stop_watching_.Notify();
  if (database_watch_.joinable()) database_watch_.join();
  for (const std::unique_ptr<UnixListener>& listener : unix_listeners_) listener->Stop();
  // From here every new call, gRPC or HTTP, is refused with UNAVAILABLE
  // (admission.h); the calls in flight finish.
  if (admission_ != nullptr) admission_->Drain();
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    // New calls are refused (UNAVAILABLE), the calls running finish (up to
    // the grace period), then the connections close at once (CallCounter).
    const absl::Time deadline = absl::Now() + shutdown_grace_;
    server_->Shutdown(absl::ToChronoTime(calls_->WaitIdle(deadline) ? absl::Now() : deadline));
    server_->Wait();
    server_.reset();
  }
  service_.reset();
  http_.reset();  // waits for the requests in flight
  admin_api_.reset();
  metrics_.reset();
  tune_on_miss_.reset();
  jobs_.reset();  // cancels running jobs and waits for them
  compile_pool_.reset();
  admin_.reset();
  resolver_.reset();
  store_.reset();  // checkpoints the WAL and closes the file
  for (const std::string& path : socket_paths_) unlink(path.c_str());
  done_.Notify();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::BuildAndStart(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  absl::Status started = impl->Start(options);
  if (!started.ok()) {
    impl->Shutdown();
    return started;
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const std::vector<std::string>& Server::addresses() const { return impl_->addresses_; }
const std::string& Server::database_path() const { return impl_->db_path_; }
void Server::Wait() { impl_->Wait(); }
void Server::Shutdown() { impl_->Shutdown(); }
absl::StatusOr<int> Server::ReloadTokens() { return impl_->ReloadTokens(); }
const std::string& Server::audit_log_path() const { return impl_->audit_path(); }
const std::string& Server::http_address() const { return impl_->http_address(); }

}  // namespace autotune::service
