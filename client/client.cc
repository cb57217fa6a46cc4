#include "client/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/status_macros.h"
#include "base/token.h"
#include "client/bundle.h"
#include "client/grpc_status.h"
#include "client/received_binaries.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"

namespace autotune::client {
namespace {

// The TLS files' contents, read now so that Connect reports a bad one
// (nullopt: plaintext). Credentials are made from them with the channel.
absl::StatusOr<std::optional<grpc::SslCredentialsOptions>> ReadTlsFiles(
    const ClientOptions& options) {
  if (!options.tls.has_value()) return std::nullopt;
  const TlsOptions& tls = *options.tls;
  if (tls.cert_chain_file.empty() != tls.private_key_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS client certificate needs its private key, and a key its certificate");
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls.root_certs_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(tls.root_certs_file, "TLS root certificates"));
  }
  if (!tls.cert_chain_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFile(tls.cert_chain_file, "TLS client certificate"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile(tls.private_key_file, "TLS private key"));
  }
  return ssl;
}

// Why nothing can answer at `address`, when it is a unix:// socket that
// nothing listens on: the file is absent, or a connection to it is refused
// (a socket left by a daemon that is gone). Empty when something may
// answer, or when this cannot tell (other addresses, other errors), which
// gRPC then finds out. One connect(); a daemon that listens sees a
// connection closed at once, as a client that gave up would leave.
std::string NothingListensAt(const std::string& address) {
  absl::string_view path = address;
  if (!absl::ConsumePrefix(&path, "unix://")) return "";
  sockaddr_un socket_address{};
  socket_address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(socket_address.sun_path)) return "";
  std::copy(path.begin(), path.end(), socket_address.sun_path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return "";
  const int connected =
      connect(fd, reinterpret_cast<const sockaddr*>(&socket_address), sizeof(socket_address));
  const int error = errno;
  close(fd);
  if (connected == 0 || (error != ENOENT && error != ECONNREFUSED)) return "";
  return absl::StrCat("nothing listens there (connect: ", std::strerror(error), ")");
}

}  // namespace

ClientOptions::ClientOptions() : address(ClientServerAddress()) {
  // A name that is no user trusts no one more; Connect says so.
  absl::StatusOr<std::optional<uid_t>> owner = SocketOwnerFromEnvironment();
  if (owner.ok()) socket_owner = *owner;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, "token file"));
  const std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  if (!IsTokenText(token)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, " holds more than one word; it should hold the token only"));
  }
  return token;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("empty server address");
  if (options.timeout <= absl::ZeroDuration() || options.transfer_timeout <= absl::ZeroDuration() ||
      options.job_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeouts must be positive");
  }
  if (!options.token.empty() && !IsTokenText(options.token)) {
    return absl::InvalidArgumentError("the token holds white space (read it with ReadTokenFile)");
  }
  if (options.max_receive_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_receive_message_bytes must be positive");
  }
  if (absl::string_view path = options.address; absl::ConsumePrefix(&path, "unix://")) {
    RETURN_IF_ERROR(SocketOwnerFromEnvironment().status());
    RETURN_IF_ERROR(CheckSocketOwner(std::string(path), options.socket_owner));
  }
  ASSIGN_OR_RETURN(std::optional<grpc::SslCredentialsOptions> ssl, ReadTlsFiles(options));
  return std::unique_ptr<Client>(new Client(options, std::move(ssl)));
}

Client::Client(ClientOptions options, std::optional<grpc::SslCredentialsOptions> ssl)
    : options_(std::move(options)), ssl_(std::move(ssl)) {}

Client::~Client() = default;

absl::StatusOr<Client::Channel*> Client::OpenChannel() {
  absl::MutexLock lock(&mu_);
  if (channel_ != nullptr) return channel_.get();
  if (const std::string why = NothingListensAt(options_.address); !why.empty()) {
    return StatusFromGrpc(grpc::Status(grpc::StatusCode::UNAVAILABLE, why), options_.address);
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  arguments.SetUserAgentPrefix("autotune-client");
  auto channel = std::make_unique<Channel>();
  channel->channel = grpc::CreateCustomChannel(
      options_.address,
      ssl_.has_value() ? grpc::SslCredentials(*ssl_) : grpc::InsecureChannelCredentials(),
      arguments);
  channel->stub = v1::Autotune::NewStub(channel->channel);
  channel_ = std::move(channel);
  return channel_.get();
}

void Client::PrepareContext(grpc::ClientContext& context, absl::Duration timeout) const {
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
}

template <typename Request, typename Response>
absl::StatusOr<Response> Client::Unary(
    grpc::Status (v1::Autotune::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, absl::Duration timeout) {
  ASSIGN_OR_RETURN(Channel * channel, OpenChannel());
  grpc::ClientContext context;
  PrepareContext(context, timeout > absl::ZeroDuration() ? timeout : options_.timeout);
  Response response;
  const grpc::Status status = ((*channel->stub).*method)(&context, request, &response);
  if (!status.ok()) return StatusFromGrpc(status, options_.address);
  return response;
}

absl::StatusOr<v1::LookupResponse> Client::Lookup(const v1::LookupRequest& request) {
  return Unary(&v1::Autotune::Stub::Lookup, request);
}

absl::StatusOr<v1::BatchLookupResponse> Client::BatchLookup(const v1::BatchLookupRequest& request) {
  return Unary(&v1::Autotune::Stub::BatchLookup, request);
}

absl::StatusOr<v1::GetBinariesResponse> Client::GetBinaries(const v1::GetBinariesRequest& request,
                                                            absl::Duration timeout) {
  return Unary(&v1::Autotune::Stub::GetBinaries, request, timeout);
}

absl::StatusOr<v1::BatchLookupResponse> Client::BatchLookup(const v1::BatchLookupRequest& request,
                                                            absl::Duration timeout) {
  return Unary(&v1::Autotune::Stub::BatchLookup, request, timeout);
}

absl::StatusOr<ReceivedBinaries> Client::GetBinariesReceivingCubins(
    const std::vector<std::string>& sha256s, absl::Duration timeout) {
  ReceivedBinaries received;
  if (sha256s.empty()) return received;
  ASSIGN_OR_RETURN(Channel * channel, OpenChannel());
  const absl::Time deadline =
      absl::Now() + (timeout > absl::ZeroDuration() ? timeout : options_.timeout);
  constexpr size_t kPerCall = kBinariesPerCall;
  const size_t calls = (sha256s.size() + kPerCall - 1) / kPerCall;
  // Call i asks for sha256s[first(i), first(i + 1)).
  const auto first = [&](size_t i) { return std::min(sha256s.size(), i * kPerCall); };
  const auto fail = [&](size_t i, const absl::Status& status) {
    for (size_t k = first(i); k < first(i + 1); ++k) received.failed.emplace(sha256s[k], status);
  };
  // The blocks are sized for all the cubins at the first answer's size
  // per cubin, with a quarter more, as address space (base/shared_bytes.h:
  // what is not written is not backed); when one fills, another follows.
  constexpr size_t kMinBlockBytes = size_t{4} << 20;
  constexpr size_t kMaxBlockBytes = size_t{1} << 30;
  std::optional<CubinBlocks> blocks;
  grpc::TemplatedGenericStub<v1::GetBinariesRequest, grpc::ByteBuffer> stub(channel->channel);
  const std::string method = absl::StrCat("/", v1::Autotune::service_full_name(), "/GetBinaries");
  grpc::CompletionQueue queue;
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer answer;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
  };
  std::vector<std::unique_ptr<Call>> in_flight(calls);
  size_t started = 0;
  size_t ended = 0;
  const auto start = [&] {
    const size_t i = started++;
    v1::GetBinariesRequest request;
    for (size_t k = first(i); k < first(i + 1); ++k) request.add_sha256(sha256s[k]);
    auto call = std::make_unique<Call>();
    PrepareContext(call->context, std::max(absl::Milliseconds(1), deadline - absl::Now()));
    call->reader = stub.PrepareUnaryCall(&call->context, method, request, &queue);
    call->reader->StartCall();
    call->reader->Finish(&call->answer, &call->status, reinterpret_cast<void*>(i + 1));
    in_flight[i] = std::move(call);
  };
  while (started < calls && started < static_cast<size_t>(kBinaryCallsInFlight)) start();
  // Set when asking further is of no use: the deadline has passed, or the
  // service cannot be reached.
  absl::Status stopped;
  while (ended < started) {
    void* tag = nullptr;
    bool ok = false;
    // Every call ends by itself at the deadline at the latest.
    if (!queue.Next(&tag, &ok)) break;
    ++ended;
    const size_t i = reinterpret_cast<size_t>(tag) - 1;
    std::unique_ptr<Call> call = std::move(in_flight[i]);
    if (!stopped.ok()) {
      fail(i, stopped);
    } else if (!call->status.ok()) {
      const absl::Status status = StatusFromGrpc(call->status, options_.address);
      fail(i, status);
      if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) stopped = status;
    } else {
      if (!blocks.has_value()) {
        const size_t per_cubin = call->answer.Length() / (first(i + 1) - first(i));
        blocks.emplace(
            std::clamp(per_cubin * sha256s.size() / 4 * 5, kMinBlockBytes, kMaxBlockBytes));
      }
      if (absl::Status parsed = ParseGetBinariesResponse(call->answer, *blocks, &received);
          !parsed.ok()) {
        fail(i, parsed);
      }
    }
    call.reset();  // gRPC's copy of the answer goes now
    if (stopped.ok() && started < calls) {
      start();
    } else if (!stopped.ok()) {
      for (std::unique_ptr<Call>& other : in_flight) {
        if (other != nullptr) other->context.TryCancel();
      }
    }
  }
  queue.Shutdown();
  bool drained_ok = false;
  for (void* drained; queue.Next(&drained, &drained_ok);) {
  }
  if (ended < started) return absl::InternalError("a GetBinaries call never ended");
  for (size_t i = started; i < calls; ++i) fail(i, stopped);
  return received;
}

absl::StatusOr<v1::RequestTuningResponse> Client::RequestTuning(
    const v1::RequestTuningRequest& request, absl::Duration timeout) {
  return Unary(&v1::Autotune::Stub::RequestTuning, request, timeout);
}

absl::StatusOr<v1::ListKernelsResponse> Client::ListKernels(const v1::ListKernelsRequest& request) {
  return Unary(&v1::Autotune::Stub::ListKernels, request);
}

absl::StatusOr<v1::RegisterKernelResponse> Client::RegisterKernel(
    const v1::RegisterKernelRequest& request) {
  return Unary(&v1::Autotune::Stub::RegisterKernel, request,
               std::max(options_.timeout, kRegisterKernelTimeout));
}

absl::StatusOr<v1::CreateLoginLinkResponse> Client::CreateLoginLink(
    const v1::CreateLoginLinkRequest& request) {
  return Unary(&v1::Autotune::Stub::CreateLoginLink, request);
}

absl::StatusOr<v1::UnregisterKernelResponse> Client::UnregisterKernel(
    const v1::UnregisterKernelRequest& request) {
  return Unary(&v1::Autotune::Stub::UnregisterKernel, request);
}

absl::StatusOr<v1::Job> Client::GetJob(const v1::GetJobRequest& request) {
  return Unary(&v1::Autotune::Stub::GetJob, request);
}

absl::StatusOr<v1::ListJobsResponse> Client::ListJobs(const v1::ListJobsRequest& request) {
  return Unary(&v1::Autotune::Stub::ListJobs, request);
}

absl::StatusOr<v1::Job> Client::CancelJob(const v1::CancelJobRequest& request) {
  return Unary(&v1::Autotune::Stub::CancelJob, request);
}

absl::StatusOr<v1::ListEntriesResponse> Client::ListEntries(const v1::ListEntriesRequest& request) {
  return Unary(&v1::Autotune::Stub::ListEntries, request);
}

absl::StatusOr<v1::GetEntryResponse> Client::GetEntry(const v1::GetEntryRequest& request) {
  return Unary(&v1::Autotune::Stub::GetEntry, request);
}

absl::StatusOr<v1::InvalidateResponse> Client::Invalidate(const v1::InvalidateRequest& request) {
  return Unary(&v1::Autotune::Stub::Invalidate, request);
}

absl::StatusOr<v1::StatsResponse> Client::Stats(const v1::StatsRequest& request) {
  return Unary(&v1::Autotune::Stub::Stats, request);
}

absl::StatusOr<v1::GarbageCollectResponse> Client::GarbageCollect(
    const v1::GarbageCollectRequest& request) {
  return Unary(&v1::Autotune::Stub::GarbageCollect, request);
}

absl::StatusOr<v1::Job> Client::SubmitJob(const v1::SubmitJobRequest& request,
                                          const ProgressCallback& on_progress) {
  ASSIGN_OR_RETURN(Channel * channel, OpenChannel());
  grpc::ClientContext context;
  PrepareContext(context, options_.job_timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
      channel->stub->SubmitJob(&context, request);
  v1::JobProgress progress;
  std::optional<v1::Job> job;
  while (reader->Read(&progress)) {
    job = progress.job();
    if (on_progress) on_progress(progress);
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return StatusFromGrpc(status, options_.address);
  if (!job.has_value()) {
    return absl::UnknownError("the server ended the job stream without reporting the job");
  }
  return *std::move(job);
}

absl::StatusOr<v1::CacheBundle> Client::Export(const v1::ExportRequest& request) {
  ASSIGN_OR_RETURN(Channel * channel, OpenChannel());
  grpc::ClientContext context;
  PrepareContext(context, options_.transfer_timeout);
  std::unique_ptr<grpc::ClientReader<v1::ExportResponse>> reader =
      channel->stub->Export(&context, request);
  v1::CacheBundle bundle;
  v1::ExportResponse response;
  while (reader->Read(&response)) bundle.MergeFrom(response.part());
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return StatusFromGrpc(status, options_.address);
  if (bundle.format_version() == 0) bundle.set_format_version(kBundleFormatVersion);
  return bundle;
}

absl::StatusOr<v1::BackupResponse> Client::Backup(const v1::BackupRequest& request) {
  return Unary(&v1::Autotune::Stub::Backup, request, options_.transfer_timeout);
}

absl::StatusOr<v1::ImportResponse> Client::Import(const v1::CacheBundle& bundle, bool replace,
                                                  bool keep_better) {
  ASSIGN_OR_RETURN(Channel * channel, OpenChannel());
  grpc::ClientContext context;
  PrepareContext(context, options_.transfer_timeout);
  v1::ImportResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ImportRequest>> writer =
      channel->stub->Import(&context, &response);
  for (v1::CacheBundle& part : SplitBundle(bundle)) {
    v1::ImportRequest request;
    *request.mutable_part() = std::move(part);
    request.set_replace(replace);
    request.set_keep_better(keep_better);
    // A failed write means the server has ended the call; Finish says why.
    if (!writer->Write(request)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return StatusFromGrpc(status, options_.address);
  return response;
}

}  // namespace autotune::client
