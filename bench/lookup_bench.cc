// autotune-bench-lookup: what a Lookup costs next to a bare gRPC call, and
// how long the start-up BatchLookup of a thousand cubins takes.
//
// All in one process and one run, so both sides see the same machine:
// - a bare echo service (bench/echo.proto, callback API, payloads the size of
//   a real lookup request and response) on a Unix socket;
// - the real daemon (service::Server) on a Unix socket, over a temp database
//   filled by cache::Store before it starts; EXACT lookups without cubins,
//   spread over every imported key.
// Each of 1 and 16 clients has its own thread and its own channel (as
// separate inference servers would) and calls in a closed loop. Echo and
// lookup runs alternate, round after round, and the median of the rounds is
// reported so drift affects both sides alike.
// Then a BatchLookup of 1,000 entries with distinct 16 KB cubins, against a
// second server with its own database; every answer is checked, so a broken
// answer cannot pass as a fast one.
// To show where the time goes, the same reads are also timed in this process
// without gRPC (store, resolver, protobuf serialisation), on each database
// once its server has shut down.
//
// Exit status: 0 when every call succeeded and every answer was right;
// 1 on a failed call or a wrong answer; 2 on bad flags; 3 with
// --require-goals when a goal was missed.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/posix_error.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "bench/echo.grpc.pb.h"
#include "cache/store.h"
#include "client/client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/autotune.grpc.pb.h"
#include "proto/problem.h"
#include "service/lookup/lookup_resolver.h"
#include "service/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/support/sample_bundle.h"

namespace autotune::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Goals of the lookup path, relative to the echo floor, and of the start-up
// batch.
constexpr double kMaxP99Ratio = 1.5;
constexpr double kMinThroughputRatio = 0.7;
constexpr double kMaxBatchMs = 100;

constexpr absl::Duration kCallDeadline = absl::Seconds(10);

struct BenchOptions {
  double duration_s = 3.0;
  double warmup_s = 0.5;
  int rounds = 3;
  std::vector<int> clients = {1, 16};
  int64_t entries = 4000;
  int64_t cubin_bytes = 512;
  int64_t batch_entries = 1000;
  int64_t batch_cubin_bytes = 16384;
  int batch_reps = 20;
  std::string json;  // "-" = stdout instead of the table; empty = none
  bool require_goals = false;
  // Abseil's default; Debian's libabsl is built without NDEBUG, where the
  // default is to track every lock order. gRPC locks absl::Mutex too.
  bool mutex_deadlock_detection = true;
};

struct MachineFacts {
  long nproc = 0;
  std::string cpu_model;
  std::string kernel;
  std::string date;
  std::string load_average;  // 1, 5 and 15 minutes, at start
  std::string grpc_version;
};

MachineFacts GetMachineFacts() {
  MachineFacts facts;
  facts.nproc = sysconf(_SC_NPROCESSORS_ONLN);
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) facts.cpu_model = line.substr(colon + 2);
    break;
  }
  if (facts.cpu_model.empty()) facts.cpu_model = "unknown";
  utsname uts;
  if (uname(&uts) == 0) facts.kernel = absl::StrCat(uts.sysname, " ", uts.release);
  facts.date = absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::LocalTimeZone());
  std::ifstream loadavg("/proc/loadavg");
  std::string one, five, fifteen;
  if (loadavg >> one >> five >> fifteen) {
    facts.load_average = absl::StrCat(one, " ", five, " ", fifteen);
  }
  facts.grpc_version = grpc::Version();
  return facts;
}

// Nearest-rank percentile of `values`, which it reorders. 0 when empty.
double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One client: its own channel and stub, one call at a time.
class LoopClient {
 public:
  virtual ~LoopClient() = default;
  // Blocks until the channel is connected, then makes one call whose answer
  // is checked, outside any timing.
  virtual absl::Status Connect() = 0;
  // One call; a failed call or a wrong answer is an error.
  virtual absl::Status CallOnce() = 0;
};

// A channel of its own: a distinct argument keeps gRPC from sharing one
// connection between clients in this process.
std::shared_ptr<grpc::Channel> MakeOwnChannel(const std::string& address, int client) {
  grpc::ChannelArguments arguments;
  arguments.SetInt("autotune.bench.client", client);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
}

absl::Status WaitConnected(grpc::Channel& channel, const std::string& address) {
  if (!channel.WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
    return absl::UnavailableError(absl::StrCat("could not connect to ", address));
  }
  return absl::OkStatus();
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view call) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(call, ": ", status.error_message()));
}

class EchoLoopClient final : public LoopClient {
 public:
  EchoLoopClient(std::string address, int client, const EchoRequest& request)
      : address_(std::move(address)),
        channel_(MakeOwnChannel(address_, client)),
        stub_(Echo::NewStub(channel_)),
        request_(request) {}

  absl::Status Connect() override {
    RETURN_IF_ERROR(WaitConnected(*channel_, address_));
    return CallOnce();
  }

  absl::Status CallOnce() override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
    EchoResponse response;
    const grpc::Status status = stub_->Echo(&context, request_, &response);
    if (!status.ok()) return FromGrpc(status, "Echo");
    if (static_cast<int64_t>(response.payload().size()) != request_.response_bytes()) {
      return absl::InternalError(absl::StrCat("Echo answered ", response.payload().size(),
                                              " bytes, asked for ", request_.response_bytes()));
    }
    return absl::OkStatus();
  }

 private:
  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<Echo::Stub> stub_;
  const EchoRequest request_;
};

class LookupLoopClient final : public LoopClient {
 public:
  // Walks `keys` from a start that differs per client.
  LookupLoopClient(std::string address, int client, const std::vector<v1::LookupRequest>* keys)
      : address_(std::move(address)),
        channel_(MakeOwnChannel(address_, client)),
        stub_(v1::Autotune::NewStub(channel_)),
        keys_(keys),
        next_(static_cast<size_t>(client) * 7919 % keys->size()) {}

  absl::Status Connect() override {
    RETURN_IF_ERROR(WaitConnected(*channel_, address_));
    return CallOnce();
  }

  absl::Status CallOnce() override {
    const v1::LookupRequest& request = (*keys_)[next_];
    next_ = next_ + 1 == keys_->size() ? 0 : next_ + 1;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
    v1::LookupResponse response;
    const grpc::Status status = stub_->Lookup(&context, request, &response);
    if (!status.ok()) return FromGrpc(status, "Lookup");
    if (response.match() != v1::EXACT) {
      return absl::InternalError(absl::StrCat("Lookup answered ",
                                              v1::MatchKind_Name(response.match()),
                                              " for an imported key: ", response.miss_reason()));
    }
    return absl::OkStatus();
  }

 private:
  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Autotune::Stub> stub_;
  const std::vector<v1::LookupRequest>* keys_;
  size_t next_;
};

struct LoadResult {
  int clients = 0;
  int64_t calls = 0;
  int64_t errors = 0;
  std::string first_error;
  double p50_us = 0;
  double p99_us = 0;
  double calls_per_s = 0;
};

using ClientFactory = std::function<std::unique_ptr<LoopClient>(int client)>;

// Runs `clients` closed loops at once: every client connects, then all start
// together, call for warmup_s unrecorded, then record every call that starts
// within the next duration_s. Throughput is the recorded calls over
// duration_s.
absl::StatusOr<LoadResult> RunLoad(int clients, const BenchOptions& options,
                                   const ClientFactory& make_client) {
  struct PerClient {
    std::vector<double> latencies_us;
    int64_t errors = 0;
    std::string first_error;
    absl::Status connect_status;
  };
  std::vector<PerClient> per_client(static_cast<size_t>(clients));
  std::latch ready(clients);
  std::latch go(1);
  std::atomic<bool> cancelled{false};
  Clock::time_point measure_start;
  Clock::time_point measure_end;
  const auto warmup =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.warmup_s));
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.duration_s));

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      PerClient& mine = per_client[static_cast<size_t>(i)];
      std::unique_ptr<LoopClient> client = make_client(i);
      mine.connect_status = client->Connect();
      ready.count_down();
      go.wait();
      if (!mine.connect_status.ok() || cancelled.load()) return;
      mine.latencies_us.reserve(1 << 16);
      for (;;) {
        const Clock::time_point t0 = Clock::now();
        if (t0 >= measure_end) break;
        const absl::Status status = client->CallOnce();
        const Clock::time_point t1 = Clock::now();
        if (!status.ok()) {
          if (mine.errors++ == 0) mine.first_error = status.ToString();
          continue;
        }
        if (t0 >= measure_start) {
          mine.latencies_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
      }
    });
  }
  ready.wait();
  for (const PerClient& c : per_client) {
    if (!c.connect_status.ok()) cancelled = true;
  }
  const Clock::time_point start = Clock::now();
  measure_start = start + warmup;
  measure_end = measure_start + duration;
  go.count_down();  // publishes measure_start / measure_end to the threads
  for (std::thread& t : threads) t.join();

  LoadResult result;
  result.clients = clients;
  std::vector<double> all;
  for (PerClient& c : per_client) {
    if (!c.connect_status.ok()) return c.connect_status;
    result.errors += c.errors;
    if (result.first_error.empty()) result.first_error = c.first_error;
    all.insert(all.end(), c.latencies_us.begin(), c.latencies_us.end());
  }
  result.calls = static_cast<int64_t>(all.size());
  result.calls_per_s = static_cast<double>(all.size()) / options.duration_s;
  result.p50_us = Percentile(all, 0.50);
  result.p99_us = Percentile(all, 0.99);
  return result;
}

// A directory removed with everything in it when this goes away.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "autotune-bench-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return PosixError(absl::StrCat("mkdtemp ", pattern), errno);
    }
    return TempDir(std::move(pattern));
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

class EchoService final : public Echo::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context, const EchoRequest* request,
                                 EchoResponse* response) override {
    std::string* payload = response->mutable_payload();
    *payload = request->payload();
    payload->resize(static_cast<size_t>(std::max(0, request->response_bytes())), 'e');
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// The echo server, built the way the daemon builds its own. Once the daemon
// has started, every server in this process also carries the health and
// reflection services (both are switched on process-wide); neither is called.
class EchoServer {
 public:
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(const std::string& address) {
    auto server = std::unique_ptr<EchoServer>(new EchoServer());
    grpc::ServerBuilder builder;
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.RegisterService(&server->service_);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    server->server_ = builder.BuildAndStart();
    if (server->server_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("echo server could not listen on ", address));
    }
    return server;
  }
  ~EchoServer() {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_->Wait();
  }

 private:
  EchoServer() = default;
  EchoService service_;
  std::unique_ptr<grpc::Server> server_;
};

absl::StatusOr<std::unique_ptr<service::Server>> StartDaemon(const std::string& dir,
                                                             const std::string& name) {
  service::ServerOptions options;
  options.db_path = absl::StrCat(dir, "/", name, ".db");
  options.listen = {absl::StrCat("unix://", dir, "/", name, ".sock")};
  options.shutdown_grace = absl::Seconds(1);
  // Lookups only: the families come from the imported bundles.
  options.kernels_dirs = {"none"};
  return service::Server::BuildAndStart(options);
}

absl::StatusOr<std::unique_ptr<client::Client>> ConnectClient(const std::string& address) {
  client::ClientOptions options;
  options.address = address;
  options.timeout = absl::Seconds(60);
  return client::Client::Connect(options);
}

// Writes `bundle` into the database the daemon `name` will open, before it
// starts, and checks that every entry and binary went in. The bench's subject
// is lookups of what a store holds: the daemon's Import would keep its own
// compile of each entry (one binary per config, not the bundle's one per
// entry), so the store is filled the way an operator restores one.
absl::StatusOr<double> SeedDatabase(const std::string& dir, const std::string& name,
                                    const v1::CacheBundle& bundle) {
  const absl::Time start = absl::Now();
  cache::StoreOptions store_options;
  store_options.path = absl::StrCat(dir, "/", name, ".db");
  ASSIGN_OR_RETURN(std::unique_ptr<cache::Store> store, cache::Store::Open(store_options));
  ASSIGN_OR_RETURN(v1::ImportResponse imported, store->Import(bundle, /*replace=*/false));
  store.reset();  // checkpoints and closes before the daemon opens the file
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (imported.entries() != bundle.entries_size() ||
      imported.binaries() != bundle.binaries_size()) {
    return absl::InternalError(
        absl::StrCat("the store took ", imported.entries(), " entries and ", imported.binaries(),
                     " binaries of ", bundle.entries_size(), " and ", bundle.binaries_size()));
  }
  return seconds;
}

v1::LookupRequest KeyOf(const v1::Entry& entry) {
  v1::LookupRequest request;
  request.set_family(entry.family());
  *request.mutable_problem() = entry.problem();
  *request.mutable_device() = entry.device();
  return request;
}

// A request whose serialised size is about `bytes`, asking for an answer of
// about `response_bytes`.
EchoRequest SizedEchoRequest(size_t bytes, size_t response_bytes) {
  EchoRequest request;
  // The response carries only the payload: one tag byte and its length.
  const size_t response_overhead = response_bytes < 128 ? 2 : 3;
  request.set_response_bytes(static_cast<int32_t>(
      response_bytes > response_overhead ? response_bytes - response_overhead : 0));
  request.set_payload(std::string(bytes, 'r'));
  const size_t overshoot = request.ByteSizeLong() - bytes;
  request.mutable_payload()->resize(bytes > overshoot ? bytes - overshoot : 0);
  return request;
}

// Per-call latency of the store reads a Lookup may make and of the whole
// resolver, on one thread, over every key once, against the database the
// daemon served (after it has shut down).
struct InProcessResult {
  int64_t calls = 0;  // per part
  double get_family_us = 0;
  double find_entry_us = 0;
  double resolve_us = 0;
};

template <typename Call>
absl::StatusOr<double> MedianCallUs(const std::vector<v1::LookupRequest>& keys, Call call) {
  std::vector<double> us;
  us.reserve(keys.size());
  for (const v1::LookupRequest& key : keys) {
    const Clock::time_point start = Clock::now();
    absl::Status status = call(key);
    const Clock::time_point end = Clock::now();
    RETURN_IF_ERROR(status);
    us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  return Percentile(us, 0.5);
}

absl::StatusOr<std::unique_ptr<cache::Store>> OpenStore(const std::string& path) {
  cache::StoreOptions options;
  options.path = path;
  options.readers = 1;
  return cache::Store::Open(options);
}

absl::StatusOr<InProcessResult> RunInProcess(const std::string& db_path,
                                             const std::vector<v1::LookupRequest>& keys) {
  ASSIGN_OR_RETURN(std::unique_ptr<cache::Store> store, OpenStore(db_path));
  service::LookupResolver resolver(store.get());
  InProcessResult result;
  result.calls = static_cast<int64_t>(keys.size());
  ASSIGN_OR_RETURN(const cache::FamilyRecord family, store->GetFamily(keys.front().family()));

  ASSIGN_OR_RETURN(result.get_family_us, MedianCallUs(keys, [&](const v1::LookupRequest& key) {
                     return store->GetFamily(key.family()).status();
                   }));
  ASSIGN_OR_RETURN(
      result.find_entry_us, MedianCallUs(keys, [&](const v1::LookupRequest& key) -> absl::Status {
        ASSIGN_OR_RETURN(std::optional<v1::Entry> entry,
                         store->FindEntry(cache::EntryKey{key.family(), family.content_hash,
                                                          key.problem(), key.device().name()}));
        if (!entry.has_value()) return absl::InternalError("FindEntry found no imported key");
        return absl::OkStatus();
      }));
  ASSIGN_OR_RETURN(result.resolve_us,
                   MedianCallUs(keys, [&](const v1::LookupRequest& key) -> absl::Status {
                     ASSIGN_OR_RETURN(v1::LookupResponse answer, resolver.Lookup(key));
                     if (answer.match() != v1::EXACT)
                       return absl::InternalError("resolver missed a key");
                     return absl::OkStatus();
                   }));
  return result;
}

struct BatchResult {
  int entries = 0;
  int64_t cubin_bytes = 0;
  int64_t response_bytes = 0;
  double import_s = 0;
  std::vector<double> ms;  // per repetition, in order
  double median_ms = 0;
  double max_ms = 0;
  // The parts, in this process after the server has shut down (medians):
  double resolve_ms = 0;     // LookupResolver::BatchLookup
  double get_binary_ms = 0;  // Store::GetBinary of every binary, one by one
  double sha256_ms = 0;      // of which: checking every binary's sha256
  double serialize_ms = 0;   // the answer to bytes
  double parse_ms = 0;       // bytes to the answer
};

// Every item EXACT with the entry's binary, and every binary present once,
// byte for byte as stored.
absl::Status CheckBatchAnswer(const v1::BatchLookupResponse& answer, const v1::CacheBundle& bundle,
                              const std::map<std::string, const std::string*>& cubins) {
  if (answer.results_size() != bundle.entries_size()) {
    return absl::InternalError(absl::StrCat("BatchLookup answered ", answer.results_size(),
                                            " items of ", bundle.entries_size()));
  }
  for (int i = 0; i < answer.results_size(); ++i) {
    const v1::BatchLookupResult& result = answer.results(i);
    if (result.error_code() != 0) {
      return absl::InternalError(absl::StrCat("results[", i, "]: error ", result.error_code(), ": ",
                                              result.error_message()));
    }
    if (result.response().match() != v1::EXACT) {
      return absl::InternalError(absl::StrCat(
          "results[", i, "]: ", v1::MatchKind_Name(result.response().match()), ", expected EXACT"));
    }
    if (result.response().entry().binary_sha256() != bundle.entries(i).binary_sha256()) {
      return absl::InternalError(absl::StrCat("results[", i, "]: binary ",
                                              result.response().entry().binary_sha256(),
                                              ", stored ", bundle.entries(i).binary_sha256()));
    }
  }
  if (answer.binaries_size() != static_cast<int>(cubins.size())) {
    return absl::InternalError(absl::StrCat("BatchLookup returned ", answer.binaries_size(),
                                            " binaries, expected ", cubins.size()));
  }
  for (const auto& [sha, cubin] : cubins) {
    auto it = answer.binaries().find(sha);
    if (it == answer.binaries().end()) {
      return absl::InternalError(absl::StrCat("binary ", sha, " missing from the answer"));
    }
    if (it->second != *cubin) {
      return absl::InternalError(absl::StrCat("binary ", sha, ": ", it->second.size(),
                                              " bytes that differ from the ", cubin->size(),
                                              " stored"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchResult> RunBatch(const std::string& dir, const BenchOptions& options) {
  BatchResult result;
  result.entries = static_cast<int>(options.batch_entries);
  result.cubin_bytes = options.batch_cubin_bytes;
  ASSIGN_OR_RETURN(v1::CacheBundle bundle,
                   testing::MakeSyntheticBundle(options.batch_entries, options.batch_cubin_bytes));
  std::map<std::string, const std::string*> cubins;
  for (const v1::Binary& binary : bundle.binaries()) cubins[binary.sha256()] = &binary.cubin();
  if (static_cast<int64_t>(cubins.size()) != options.batch_entries) {
    return absl::InternalError(absl::StrCat("the bundle has ", cubins.size(),
                                            " distinct binaries for ", options.batch_entries,
                                            " entries"));
  }

  ASSIGN_OR_RETURN(result.import_s, SeedDatabase(dir, "batch", bundle));
  ASSIGN_OR_RETURN(std::unique_ptr<service::Server> server, StartDaemon(dir, "batch"));
  ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client,
                   ConnectClient(server->addresses().front()));

  v1::BatchLookupRequest request;
  request.set_include_cubin(true);
  for (const v1::Entry& entry : bundle.entries()) *request.add_lookups() = KeyOf(entry);

  for (int rep = 0; rep < options.batch_reps; ++rep) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<v1::BatchLookupResponse> answer = client->BatchLookup(request);
    const Clock::time_point end = Clock::now();
    if (!answer.ok()) return answer.status();
    RETURN_IF_ERROR(CheckBatchAnswer(*answer, bundle, cubins));
    result.response_bytes = static_cast<int64_t>(answer->ByteSizeLong());
    result.ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  result.median_ms = Median(result.ms);
  result.max_ms = *std::max_element(result.ms.begin(), result.ms.end());

  // The same request without gRPC: what is left is transport and copies.
  const std::string db_path = server->database_path();
  client.reset();
  server->Shutdown();
  ASSIGN_OR_RETURN(std::unique_ptr<cache::Store> store, OpenStore(db_path));
  service::LookupResolver resolver(store.get());
  std::vector<double> resolve_ms, get_binary_ms, sha256_ms, serialize_ms, parse_ms;
  const int parts_reps = std::clamp(options.batch_reps, 1, 5);
  for (int rep = 0; rep < parts_reps; ++rep) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<v1::BatchLookupResponse> answer = resolver.BatchLookup(request);
    const Clock::time_point t1 = Clock::now();
    if (!answer.ok()) return answer.status();
    std::string bytes;
    if (!answer->SerializeToString(&bytes)) return absl::InternalError("serialize failed");
    const Clock::time_point t2 = Clock::now();
    v1::BatchLookupResponse parsed;
    if (!parsed.ParseFromString(bytes)) return absl::InternalError("parse failed");
    const Clock::time_point t3 = Clock::now();
    RETURN_IF_ERROR(CheckBatchAnswer(parsed, bundle, cubins));
    resolve_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    serialize_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    parse_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());

    const Clock::time_point t4 = Clock::now();
    for (const auto& [sha, cubin] : cubins) RETURN_IF_ERROR(store->GetBinary(sha).status());
    const Clock::time_point t5 = Clock::now();
    size_t digests = 0;
    for (const auto& [sha, cubin] : cubins) digests += Sha256Hex(*cubin) == sha;
    const Clock::time_point t6 = Clock::now();
    if (digests != cubins.size()) return absl::InternalError("sha256 of a binary differs");
    get_binary_ms.push_back(std::chrono::duration<double, std::milli>(t5 - t4).count());
    sha256_ms.push_back(std::chrono::duration<double, std::milli>(t6 - t5).count());
  }
  result.resolve_ms = Median(resolve_ms);
  result.get_binary_ms = Median(get_binary_ms);
  result.sha256_ms = Median(sha256_ms);
  result.serialize_ms = Median(serialize_ms);
  result.parse_ms = Median(parse_ms);
  return result;
}

// Median over rounds of one service at one client count.
struct Summary {
  int clients = 0;
  double p50_us = 0;
  double p99_us = 0;
  double calls_per_s = 0;
  int64_t calls = 0;  // all rounds
};

Summary Summarize(const std::vector<LoadResult>& rounds) {
  Summary s;
  std::vector<double> p50, p99, rate;
  for (const LoadResult& r : rounds) {
    s.clients = r.clients;
    p50.push_back(r.p50_us);
    p99.push_back(r.p99_us);
    rate.push_back(r.calls_per_s);
    s.calls += r.calls;
  }
  s.p50_us = Median(p50);
  s.p99_us = Median(p99);
  s.calls_per_s = Median(rate);
  return s;
}

struct Comparison {
  Summary echo;
  Summary lookup;
  double p99_ratio() const { return lookup.p99_us / echo.p99_us; }
  double throughput_ratio() const { return lookup.calls_per_s / echo.calls_per_s; }
  bool p99_met() const { return p99_ratio() <= kMaxP99Ratio; }
  bool throughput_met() const { return throughput_ratio() >= kMinThroughputRatio; }
};

const char* Verdict(bool met) { return met ? "met" : "MISSED"; }

void PrintTable(const MachineFacts& facts, const BenchOptions& options, size_t request_bytes,
                size_t response_bytes, double lookup_import_s,
                const std::vector<Comparison>& comparisons, const InProcessResult& in_process,
                const BatchResult& batch) {
  std::cout << absl::StrFormat(
      "autotune-bench-lookup  %s\n"
      "machine: nproc %d, %s, %s, load average %s, gRPC %s%s\n"
      "load: closed loop, %.2f s warm-up + %.2f s recorded per run, %d round(s), "
      "median of rounds\n"
      "echo: callback API, unix socket, request %d B, response %d B\n"
      "lookup: autotune server, unix socket, %d entries (stored in %.2f s), EXACT, no cubin\n\n",
      facts.date, facts.nproc, facts.cpu_model, facts.kernel, facts.load_average,
      facts.grpc_version,
      options.mutex_deadlock_detection ? "" : ", Abseil mutex deadlock detection off",
      options.warmup_s, options.duration_s, options.rounds, request_bytes, response_bytes,
      options.entries, lookup_import_s);
  std::cout << absl::StrFormat("%-8s %-8s %10s %10s %12s\n", "clients", "service", "p50 us",
                               "p99 us", "calls/s");
  for (const Comparison& c : comparisons) {
    for (const auto& [name, s] : {std::pair<const char*, const Summary&>{"echo", c.echo},
                                  std::pair<const char*, const Summary&>{"lookup", c.lookup}}) {
      std::cout << absl::StrFormat("%-8d %-8s %10.1f %10.1f %12.0f\n", s.clients, name, s.p50_us,
                                   s.p99_us, s.calls_per_s);
    }
    std::cout << absl::StrFormat(
        "%-8d %-8s %10.2f %10.2f %12.2f   p99 ratio <= %.1f: %s; throughput ratio >= %.1f: %s\n",
        c.echo.clients, "ratio", c.lookup.p50_us / c.echo.p50_us, c.p99_ratio(),
        c.throughput_ratio(), kMaxP99Ratio, Verdict(c.p99_met()), kMinThroughputRatio,
        Verdict(c.throughput_met()));
  }
  std::cout << absl::StrFormat(
      "\nthe same reads in this process, 1 thread, no gRPC (p50 of %d calls each):\n"
      "  Store::GetFamily %.1f us, Store::FindEntry %.1f us, LookupResolver::Lookup %.1f us\n",
      in_process.calls, in_process.get_family_us, in_process.find_entry_us, in_process.resolve_us);
  if (batch.ms.empty()) return;
  std::cout << absl::StrFormat(
      "\nBatchLookup: %d entries x %d B distinct cubins, include_cubin, answer %.1f MB checked "
      "(stored in %.2f s)\n"
      "  %d calls: median %.1f ms, max %.1f ms, first %.1f ms, min %.1f ms   "
      "median < %.0f ms: %s; max < %.0f ms: %s\n",
      batch.entries, batch.cubin_bytes, static_cast<double>(batch.response_bytes) / 1e6,
      batch.import_s, batch.ms.size(), batch.median_ms, batch.max_ms, batch.ms.front(),
      *std::min_element(batch.ms.begin(), batch.ms.end()), kMaxBatchMs,
      Verdict(batch.median_ms < kMaxBatchMs), kMaxBatchMs, Verdict(batch.max_ms < kMaxBatchMs));
  std::cout << absl::StrFormat(
      "  parts in this process (medians): LookupResolver::BatchLookup %.1f ms (of it, "
      "Store::GetBinary x %d alone: %.1f ms, of that sha256 checks %.1f ms); "
      "serialize %.1f ms; parse %.1f ms\n",
      batch.resolve_ms, batch.entries, batch.get_binary_ms, batch.sha256_ms, batch.serialize_ms,
      batch.parse_ms);
}

google::protobuf::Value Number(double v) {
  google::protobuf::Value value;
  value.set_number_value(v);
  return value;
}
google::protobuf::Value Text(std::string v) {
  google::protobuf::Value value;
  value.set_string_value(std::move(v));
  return value;
}
google::protobuf::Value Flag(bool v) {
  google::protobuf::Value value;
  value.set_bool_value(v);
  return value;
}

google::protobuf::Value SummaryJson(const Summary& s, const std::vector<LoadResult>& rounds) {
  google::protobuf::Value value;
  auto& fields = *value.mutable_struct_value()->mutable_fields();
  fields["p50_us"] = Number(s.p50_us);
  fields["p99_us"] = Number(s.p99_us);
  fields["calls_per_s"] = Number(s.calls_per_s);
  fields["calls"] = Number(static_cast<double>(s.calls));
  auto* per_round = fields["rounds"].mutable_list_value();
  for (const LoadResult& r : rounds) {
    google::protobuf::Value round;
    auto& rf = *round.mutable_struct_value()->mutable_fields();
    rf["p50_us"] = Number(r.p50_us);
    rf["p99_us"] = Number(r.p99_us);
    rf["calls_per_s"] = Number(r.calls_per_s);
    *per_round->add_values() = std::move(round);
  }
  return value;
}

std::string ReportJson(const MachineFacts& facts, const BenchOptions& options, size_t request_bytes,
                       size_t response_bytes, const std::vector<Comparison>& comparisons,
                       const std::map<int, std::vector<LoadResult>>& echo_rounds,
                       const std::map<int, std::vector<LoadResult>>& lookup_rounds,
                       const InProcessResult& in_process, const BatchResult& batch) {
  google::protobuf::Struct report;
  auto& f = *report.mutable_fields();
  f["date"] = Text(facts.date);
  f["nproc"] = Number(static_cast<double>(facts.nproc));
  f["cpu_model"] = Text(facts.cpu_model);
  f["kernel"] = Text(facts.kernel);
  f["load_average"] = Text(facts.load_average);
  f["grpc_version"] = Text(facts.grpc_version);
  f["mutex_deadlock_detection"] = Flag(options.mutex_deadlock_detection);
  f["duration_s"] = Number(options.duration_s);
  f["warmup_s"] = Number(options.warmup_s);
  f["rounds"] = Number(options.rounds);
  f["entries"] = Number(static_cast<double>(options.entries));
  f["echo_request_bytes"] = Number(static_cast<double>(request_bytes));
  f["echo_response_bytes"] = Number(static_cast<double>(response_bytes));
  auto* load = f["load"].mutable_list_value();
  for (const Comparison& c : comparisons) {
    google::protobuf::Value row;
    auto& rf = *row.mutable_struct_value()->mutable_fields();
    rf["clients"] = Number(c.echo.clients);
    rf["echo"] = SummaryJson(c.echo, echo_rounds.at(c.echo.clients));
    rf["lookup"] = SummaryJson(c.lookup, lookup_rounds.at(c.lookup.clients));
    rf["p99_ratio"] = Number(c.p99_ratio());
    rf["throughput_ratio"] = Number(c.throughput_ratio());
    rf["p99_goal_met"] = Flag(c.p99_met());
    rf["throughput_goal_met"] = Flag(c.throughput_met());
    *load->add_values() = std::move(row);
  }
  auto& pf = *f["in_process_lookup"].mutable_struct_value()->mutable_fields();
  pf["calls"] = Number(static_cast<double>(in_process.calls));
  pf["store_get_family_p50_us"] = Number(in_process.get_family_us);
  pf["store_find_entry_p50_us"] = Number(in_process.find_entry_us);
  pf["resolver_lookup_p50_us"] = Number(in_process.resolve_us);
  if (!batch.ms.empty()) {
    auto& bf = *f["batch_lookup"].mutable_struct_value()->mutable_fields();
    bf["entries"] = Number(batch.entries);
    bf["cubin_bytes"] = Number(static_cast<double>(batch.cubin_bytes));
    bf["response_bytes"] = Number(static_cast<double>(batch.response_bytes));
    bf["median_ms"] = Number(batch.median_ms);
    bf["max_ms"] = Number(batch.max_ms);
    bf["median_goal_met"] = Flag(batch.median_ms < kMaxBatchMs);
    bf["max_goal_met"] = Flag(batch.max_ms < kMaxBatchMs);
    bf["in_process_resolve_ms"] = Number(batch.resolve_ms);
    bf["in_process_get_binary_ms"] = Number(batch.get_binary_ms);
    bf["in_process_sha256_ms"] = Number(batch.sha256_ms);
    bf["in_process_serialize_ms"] = Number(batch.serialize_ms);
    bf["in_process_parse_ms"] = Number(batch.parse_ms);
    auto* reps = bf["ms"].mutable_list_value();
    for (double ms : batch.ms) *reps->add_values() = Number(ms);
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(report, &json, print);
  return json;
}

int Run(const BenchOptions& options) {
  // The report owns stdout; the servers' log goes to stderr with the progress.
  spdlog::set_default_logger(spdlog::stderr_color_mt("autotune-bench-lookup"));
  if (!options.mutex_deadlock_detection) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  const MachineFacts facts = GetMachineFacts();
  absl::StatusOr<TempDir> dir = TempDir::Create();
  if (!dir.ok()) {
    std::cerr << "autotune-bench-lookup: " << dir.status() << "\n";
    return 1;
  }
  auto fail = [](const absl::Status& status) {
    std::cerr << "autotune-bench-lookup: " << status << "\n";
    return 1;
  };

  // The daemon, filled with small entries.
  std::cerr << "storing " << options.entries << " entries...\n";
  absl::StatusOr<v1::CacheBundle> bundle =
      testing::MakeSyntheticBundle(options.entries, options.cubin_bytes);
  if (!bundle.ok()) return fail(bundle.status());
  absl::StatusOr<double> seeded = SeedDatabase(dir->path(), "lookup", *bundle);
  if (!seeded.ok()) return fail(seeded.status());
  const double lookup_import_s = *seeded;
  absl::StatusOr<std::unique_ptr<service::Server>> daemon = StartDaemon(dir->path(), "lookup");
  if (!daemon.ok()) return fail(daemon.status());
  const std::string lookup_address = (*daemon)->addresses().front();
  std::vector<v1::LookupRequest> keys;
  size_t lookup_request_bytes = 0;
  size_t lookup_response_bytes = 0;
  {
    absl::StatusOr<std::unique_ptr<client::Client>> client = ConnectClient(lookup_address);
    if (!client.ok()) return fail(client.status());
    for (const v1::Entry& entry : bundle->entries()) keys.push_back(KeyOf(entry));
    // A typical pair, for the echo payload sizes.
    const v1::LookupRequest& sample = keys[keys.size() / 2];
    absl::StatusOr<v1::LookupResponse> answer = (*client)->Lookup(sample);
    if (!answer.ok()) return fail(answer.status());
    if (answer->match() != v1::EXACT) {
      return fail(absl::InternalError("the sample lookup was not answered EXACT"));
    }
    lookup_request_bytes = sample.ByteSizeLong();
    lookup_response_bytes = answer->ByteSizeLong();
  }
  bundle = v1::CacheBundle();  // the keys are all the load needs

  const std::string echo_address = absl::StrCat("unix://", dir->path(), "/echo.sock");
  absl::StatusOr<std::unique_ptr<EchoServer>> echo = EchoServer::Start(echo_address);
  if (!echo.ok()) return fail(echo.status());
  const EchoRequest echo_request = SizedEchoRequest(lookup_request_bytes, lookup_response_bytes);
  EchoResponse echo_sample;
  echo_sample.set_payload(std::string(static_cast<size_t>(echo_request.response_bytes()), 'e'));

  const ClientFactory make_echo = [&](int client) {
    return std::make_unique<EchoLoopClient>(echo_address, client, echo_request);
  };
  const ClientFactory make_lookup = [&](int client) {
    return std::make_unique<LookupLoopClient>(lookup_address, client, &keys);
  };

  // Alternate which side goes first from round to round.
  std::map<int, std::vector<LoadResult>> echo_rounds;
  std::map<int, std::vector<LoadResult>> lookup_rounds;
  int64_t errors = 0;
  for (int round = 0; round < options.rounds; ++round) {
    for (int clients : options.clients) {
      for (int side = 0; side < 2; ++side) {
        const bool run_echo = (side == 0) == (round % 2 == 0);
        std::cerr << absl::StrFormat("round %d/%d, %d client(s), %s...\n", round + 1,
                                     options.rounds, clients, run_echo ? "echo" : "lookup");
        absl::StatusOr<LoadResult> result =
            RunLoad(clients, options, run_echo ? make_echo : make_lookup);
        if (!result.ok()) return fail(result.status());
        if (result->errors > 0) {
          std::cerr << absl::StrFormat("  %d failed call(s); first: %s\n", result->errors,
                                       result->first_error);
          errors += result->errors;
        }
        (run_echo ? echo_rounds : lookup_rounds)[clients].push_back(*result);
      }
    }
  }
  echo->reset();
  const std::string lookup_db = (*daemon)->database_path();
  (*daemon)->Shutdown();

  std::cerr << "the same lookups in this process...\n";
  absl::StatusOr<InProcessResult> in_process = RunInProcess(lookup_db, keys);
  if (!in_process.ok()) return fail(in_process.status());

  std::vector<Comparison> comparisons;
  for (int clients : options.clients) {
    comparisons.push_back(
        {.echo = Summarize(echo_rounds[clients]), .lookup = Summarize(lookup_rounds[clients])});
  }

  BatchResult batch;
  if (options.batch_reps > 0) {
    std::cerr << "BatchLookup: storing " << options.batch_entries << " entries x "
              << options.batch_cubin_bytes << " B...\n";
    absl::StatusOr<BatchResult> result = RunBatch(dir->path(), options);
    if (!result.ok()) return fail(result.status());
    batch = *std::move(result);
  }

  const size_t echo_request_bytes = echo_request.ByteSizeLong();
  const size_t echo_response_bytes = echo_sample.ByteSizeLong();
  if (options.json != "-") {
    PrintTable(facts, options, echo_request_bytes, echo_response_bytes, lookup_import_s,
               comparisons, *in_process, batch);
  }
  if (!options.json.empty()) {
    const std::string json =
        ReportJson(facts, options, echo_request_bytes, echo_response_bytes, comparisons,
                   echo_rounds, lookup_rounds, *in_process, batch);
    if (options.json == "-") {
      std::cout << json << "\n";
    } else {
      std::ofstream out(options.json);
      out << json << "\n";
      if (!out.good()) {
        return fail(absl::UnavailableError(absl::StrCat("cannot write ", options.json)));
      }
    }
  }
  if (errors > 0) {
    std::cerr << "autotune-bench-lookup: " << errors << " call(s) failed; figures are invalid\n";
    return 1;
  }
  if (options.require_goals) {
    bool met = batch.ms.empty() || batch.median_ms < kMaxBatchMs;
    for (const Comparison& c : comparisons) met = met && c.p99_met() && c.throughput_met();
    if (!met) return 3;
  }
  return 0;
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char** argv) {
  autotune::bench::BenchOptions options;
  CLI::App app{
      "Lookup latency and throughput of the autotune server against a bare gRPC echo, and the "
      "time of a start-up BatchLookup with cubins."};
  app.add_option("--duration", options.duration_s, "Recorded seconds per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", options.warmup_s, "Unrecorded seconds before each run")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--rounds", options.rounds, "Runs of each service per client count")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--clients", options.clients,
                 "Client counts, comma-separated; each client has its own thread and channel")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--entries", options.entries, "Entries imported for the lookup load")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  app.add_option("--cubin-bytes", options.cubin_bytes, "Cubin size of those entries")
      ->check(CLI::Range(int64_t{8}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--batch-entries", options.batch_entries, "Entries in the BatchLookup")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--batch-cubin-bytes", options.batch_cubin_bytes,
                 "Cubin size of each BatchLookup entry (all distinct)")
      ->check(CLI::Range(int64_t{8}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--batch-reps", options.batch_reps, "Timed BatchLookup calls; 0 skips it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--json", options.json,
                 "Also write the report as one JSON object to this file; '-' prints it to "
                 "stdout instead of the table");
  app.add_flag("--require-goals", options.require_goals, "Exit 3 when a goal is missed");
  bool no_deadlock_detection = false;
  app.add_flag("--no-mutex-deadlock-detection", no_deadlock_detection,
               "Turn off Abseil's mutex deadlock detection in this process (servers included), "
               "to measure what that costs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  options.mutex_deadlock_detection = !no_deadlock_detection;
  return autotune::bench::Run(options);
}
