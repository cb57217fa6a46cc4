// C++ client of the autotune daemon (service autotune.v1.Autotune).
//
// An inference server asks, at start-up, for the tuned config of every kernel
// and shape it will run; admin tools list, inspect and edit the cache.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<autotune::client::Client> client,
//                    autotune::client::Client::Connect({}));
//   autotune::v1::LookupRequest request;
//   request.set_family("flash_attn");
//   (*request.mutable_problem()->mutable_dims())["batch"] = 8;
//   request.mutable_problem()->set_dtype(autotune::v1::BFLOAT16);
//   ASSIGN_OR_RETURN(autotune::v1::LookupResponse answer, client->Lookup(request));
//   if (answer.match() == autotune::v1::MISS) { /* run the default config */ }
//
// Thread safety: a Client is thread-safe; every method may be called from many
// threads at once. Create one per process and share it: calls multiplex over
// one channel.
//
// Errors: every method returns the server's status code and message as an
// absl::Status (NOT_FOUND for an unknown family, UNIMPLEMENTED for a call the
// server does not offer, ...). UNAVAILABLE means the daemon could not be
// reached; its message names the address. Calls fail fast instead of waiting
// for the daemon to come up, so a start-up path never blocks on it longer than
// one connection attempt.
#ifndef AUTOTUNE_CLIENT_CLIENT_H_
#define AUTOTUNE_CLIENT_CLIENT_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/received_binaries.h"
#include "grpcpp/security/credentials.h"
#include "proto/autotune.grpc.pb.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

struct TlsOptions {
  // PEM files. An empty root_certs_file trusts the system's roots.
  std::string root_certs_file;
  // Client certificate and its key, both or neither (mutual TLS).
  std::string cert_chain_file;
  std::string private_key_file;
};

// GetBinariesReceivingCubins: digests asked per call (about a MB of cubins
// of 16 KB) and calls at once.
inline constexpr int kBinariesPerCall = 64;
inline constexpr int kBinaryCallsInFlight = 2;

// The least deadline of RegisterKernel, which compiles on the daemon.
inline constexpr absl::Duration kRegisterKernelTimeout = absl::Minutes(5);

struct ClientOptions {
  ClientOptions();

  // "unix:///path/to.sock" or "host:port". Default: autotune::ClientServerAddress()
  // (AUTOTUNE_SERVER, else the daemon's default socket).
  std::string address;
  // Deadline of each unary call.
  absl::Duration timeout = absl::Seconds(10);
  // Deadline of an Export or Import stream as a whole.
  absl::Duration transfer_timeout = absl::Minutes(10);
  // Deadline of a SubmitJob stream, which lasts as long as the job.
  absl::Duration job_timeout = absl::InfiniteDuration();
  // Unset: plaintext, which is what a unix socket or a loopback daemon
  // started with --insecure expects.
  std::optional<TlsOptions> tls;
  // A bearer token (service/rpc/auth.h): sent as "authorization: Bearer <token>"
  // on every call. Empty = none (a Unix socket's owner needs none).
  std::string token;
  // Largest response accepted. A BatchLookup with cubins of a thousand
  // kernels is tens of MB; gRPC's default (4 MiB) is far too small.
  int max_receive_message_bytes = 512 << 20;
  // A unix:// socket must belong to you, root or this uid (the daemon's
  // user where it runs as another one), else Connect refuses it before
  // anything is sent (base/paths.h, CheckSocketOwner). Default:
  // AUTOTUNE_SOCKET_OWNER (a user name or uid), else none.
  std::optional<uid_t> socket_owner;
};

// The token a token file holds (surrounding white space dropped). Errors
// name the file: missing, unreadable, empty, more than one word.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

class Client {
 public:
  // Called once per progress message of a job, on the caller's thread.
  using ProgressCallback = std::function<void(const v1::JobProgress&)>;

  // Checks the options and reads the TLS files. Starts nothing of gRPC:
  // the first call that may be answered makes the channel and connects, and
  // an unreachable daemon is reported by that call. While the address is a
  // unix:// socket that nothing listens on (no such file, or the connection
  // refused: the daemon is down), calls fail UNAVAILABLE at once without
  // starting gRPC, whose start costs a new process several ms and threads;
  // each such call looks again, so a daemon that comes up is found.
  // INVALID_ARGUMENT for bad options, NOT_FOUND / PERMISSION_DENIED naming an
  // unreadable TLS file.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  const std::string& address() const { return options_.address; }

  absl::StatusOr<v1::LookupResponse> Lookup(const v1::LookupRequest& request);
  // One answer per lookup, in order; a per-item error does not fail the call.
  absl::StatusOr<v1::BatchLookupResponse> BatchLookup(const v1::BatchLookupRequest& request);
  // The same with its own deadline instead of options.timeout.
  absl::StatusOr<v1::BatchLookupResponse> BatchLookup(const v1::BatchLookupRequest& request,
                                                      absl::Duration timeout);
  // Stored cubins by sha256 (GetBinariesRequest); the caller checks each
  // against its digest.
  absl::StatusOr<v1::GetBinariesResponse> GetBinaries(const v1::GetBinariesRequest& request,
                                                      absl::Duration timeout);
  // GetBinaries for `sha256s`, asked kBinariesPerCall at a time with up to
  // kBinaryCallsInFlight calls at once, all within `timeout`. The answers'
  // cubins are received into shared blocks of memory
  // (client/received_binaries.h) rather than a string each, and gRPC holds
  // the bytes of the calls in flight only: a start-up's tens of MB of
  // cubins then touch a few MB of new memory, not all of it, which on a
  // virtual machine is most of their cost. Unchecked: the caller checks
  // each cubin against its digest. A call that fails (a damaged cubin on
  // the daemon is DATA_LOSS; an answer that is not a GetBinariesResponse
  // too) puts its digests in `failed` with its status, and the others go
  // on; once one is UNAVAILABLE or past the deadline, the calls in flight
  // are cancelled and every digest not received is `failed` with that
  // status. An error only when no call can be made (UNAVAILABLE).
  absl::StatusOr<ReceivedBinaries> GetBinariesReceivingCubins(
      const std::vector<std::string>& sha256s, absl::Duration timeout);

  // Tune-on-miss: asks the daemon to queue the problems of lookups that
  // missed (service/lookup/tune_on_miss.h says what each result means).
  absl::StatusOr<v1::RequestTuningResponse> RequestTuning(
      const v1::RequestTuningRequest& request, absl::Duration timeout = absl::ZeroDuration());

  absl::StatusOr<v1::ListKernelsResponse> ListKernels(const v1::ListKernelsRequest& request);
  // The daemon compiles a new family version before storing it, so this
  // call's deadline is at least kRegisterKernelTimeout.
  absl::StatusOr<v1::RegisterKernelResponse> RegisterKernel(
      const v1::RegisterKernelRequest& request);
  absl::StatusOr<v1::UnregisterKernelResponse> UnregisterKernel(
      const v1::UnregisterKernelRequest& request);
  // The admin page's address with a short-lived token of this caller's
  // role, for a caller of the daemon's Unix socket.
  absl::StatusOr<v1::CreateLoginLinkResponse> CreateLoginLink(
      const v1::CreateLoginLinkRequest& request);

  // Submits a job and follows it until it ends, calling `on_progress` (may be
  // empty) for each progress message. Returns the job as last reported; a
  // job that ran and FAILED is an OK return with state FAILED: the status
  // only says whether the call went through.
  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request,
                                    const ProgressCallback& on_progress);
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request);

  absl::StatusOr<v1::ListEntriesResponse> ListEntries(const v1::ListEntriesRequest& request);
  absl::StatusOr<v1::GetEntryResponse> GetEntry(const v1::GetEntryRequest& request);
  absl::StatusOr<v1::InvalidateResponse> Invalidate(const v1::InvalidateRequest& request);
  absl::StatusOr<v1::StatsResponse> Stats(const v1::StatsRequest& request);
  absl::StatusOr<v1::GarbageCollectResponse> GarbageCollect(
      const v1::GarbageCollectRequest& request);

  // Collects the streamed parts into one bundle.
  absl::StatusOr<v1::CacheBundle> Export(const v1::ExportRequest& request);
  absl::StatusOr<v1::BackupResponse> Backup(const v1::BackupRequest& request);
  // Streams `bundle` in parts of about 2 MB (SplitBundle). The server applies
  // it all or nothing. `replace` overwrites entries the server already has;
  // `keep_better`: ImportRequest.keep_better (not with `replace`).
  absl::StatusOr<v1::ImportResponse> Import(const v1::CacheBundle& bundle, bool replace,
                                            bool keep_better = false);

 private:
  // gRPC's part, made once by the first call that may be answered.
  struct Channel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Autotune::Stub> stub;
  };

  // `ssl`: the TLS files' contents (nullopt: plaintext).
  Client(ClientOptions options, std::optional<grpc::SslCredentialsOptions> ssl);

  // The channel (made on the first call); UNAVAILABLE, starting nothing,
  // while the address is a unix:// socket nothing listens on.
  absl::StatusOr<Channel*> OpenChannel();

  // Deadline and metadata of one call.
  void PrepareContext(grpc::ClientContext& context, absl::Duration timeout) const;

  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(
      grpc::Status (v1::Autotune::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
      const Request& request, absl::Duration timeout = absl::ZeroDuration());

  const ClientOptions options_;
  const std::optional<grpc::SslCredentialsOptions> ssl_;
  absl::Mutex mu_;
  // Never replaced once made.
  std::unique_ptr<Channel> channel_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLIENT_H_
