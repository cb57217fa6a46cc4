// autotune-bench-load: lookups from many clients while the cache changes
// under them: does any fail, does any answer mix two states of the cache,
// and what does the load do to their latency.
//
// Starts the real daemon (autotuned, with the stand-in profile worker
// acting out the GPU, so jobs run on any machine) on a Unix socket over a
// temporary database, and fills it with two sets of entries of the sample
// family (tests/support/sample_bundle.h):
// - stable: --stable problems on "NVIDIA H200", imported once, never changed;
// - churn: --churn problems on "NVIDIA B200", which a writer imports in
//   waves (each wave its own median and its own binaries, so an answer says
//   which wave it came from), invalidates and garbage-collects, over and over.
// Four phases of --duration seconds each, side by side in one run:
//   idle     1 client, nothing else happening;
//   clients  --clients clients, nothing else happening;
//   writes   --clients clients while the writer runs;
//   load     --clients clients while the writer runs and jobs run back to
//            back (`autotune warmup --retune` of a small manifest: its
//            compiles, from the compile cache after the first job, then
//            the stand-in GPU's screen and serial phases).
// Each client has its own thread and its own channel (as separate inference
// servers would) and calls in a closed loop: three times in four a Lookup of
// a random stable or churn problem (every other one with its cubin), else a
// BatchLookup of 16 stable problems and every churn problem, with cubins.
//
// Every answer is checked. A stable problem must be EXACT for itself, with
// its own binary. A churn lookup must be EXACT with its wave's binary, or a
// MISS. A batch's churn items must all come from one wave or all be MISS; an
// answer that is neither is counted as mixed. An RPC error, or a wrong
// answer, is a failure. Latencies are quoted as median and 99th percentile.
//
// Exit status: 0 when every call succeeded, nothing was mixed, and the
// writer and the jobs did their work in the load phase; 1 otherwise; 2 on
// bad flags.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "base/temp_dir.h"
#include "client/bundle.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "proto/autotune.grpc.pb.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::bench {
namespace {

using testing::Daemon;

constexpr char kStableDevice[] = "NVIDIA H200";
constexpr char kChurnDevice[] = "NVIDIA B200";
constexpr int64_t kStableN = 4096;
constexpr int64_t kChurnN = 8192;
constexpr int kBatchStable = 16;

struct Flags {
  int clients = 64;
  double duration_s = 10;
  int stable = 256;
  int churn = 64;
  std::string testdata = SERVICE_TESTDATA_DIR;
  std::string fake_worker = FAKE_PROFILE_WORKER_PATH;
};

// What the clients did in one phase.
struct Tally {
  std::vector<double> lookup_us;
  std::vector<double> batch_us;
  int64_t failed = 0;
  int64_t mixed = 0;
  int64_t churn_exact = 0;
  int64_t churn_miss = 0;
  std::vector<std::string> first_failures;  // a few, for the report

  void Merge(Tally&& other) {
    lookup_us.insert(lookup_us.end(), other.lookup_us.begin(), other.lookup_us.end());
    batch_us.insert(batch_us.end(), other.batch_us.begin(), other.batch_us.end());
    failed += other.failed;
    mixed += other.mixed;
    churn_exact += other.churn_exact;
    churn_miss += other.churn_miss;
    for (std::string& failure : other.first_failures) {
      if (first_failures.size() < 5) first_failures.push_back(std::move(failure));
    }
  }
  void Fail(std::string why) {
    ++failed;
    if (first_failures.size() < 5) first_failures.push_back(std::move(why));
  }
};

// What the writer and the jobs did in the load phase.
struct Writes {
  std::atomic<int64_t> imports{0};
  std::atomic<int64_t> invalidations{0};
  std::atomic<int64_t> collections{0};
  std::atomic<int64_t> jobs_ok{0};
  std::atomic<int64_t> jobs_failed{0};
  absl::Mutex mu;
  std::vector<std::string> errors ABSL_GUARDED_BY(mu);
  void Error(std::string why) {
    absl::MutexLock lock(&mu);
    if (errors.size() < 5) errors.push_back(std::move(why));
  }
};

v1::Device Named(const std::string& name) {
  v1::Device device = testing::SampleDevice();
  device.set_name(name);
  return device;
}

// The bundle of one churn wave: every churn problem, median `wave` us, a
// binary of its own per entry (filler bytes seeded by the wave).
absl::StatusOr<v1::CacheBundle> ChurnWave(int count, int wave) {
  testing::SampleBundleOptions options;
  for (int i = 0; i < count; ++i) {
    testing::SampleEntry entry;
    entry.batch = i + 1;
    entry.n = kChurnN;
    entry.device = Named(kChurnDevice);
    entry.median_us = wave;
    options.entries.push_back(entry);
  }
  options.cubin_kind = testing::CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = 512 + wave % 512;  // other bytes, other binaries
  options.synthetic_cubin_per_entry = true;
  return testing::MakeSampleBundle(options);
}

absl::StatusOr<v1::CacheBundle> StableSet(int count) {
  testing::SampleBundleOptions options;
  for (int i = 0; i < count; ++i) {
    testing::SampleEntry entry;
    entry.batch = i + 1;
    entry.n = kStableN;
    entry.device = Named(kStableDevice);
    entry.median_us = 7;
    options.entries.push_back(entry);
  }
  options.cubin_kind = testing::CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = 4096;
  options.synthetic_cubin_per_entry = true;
  return testing::MakeSampleBundle(options);
}

v1::LookupRequest Request(int64_t batch, int64_t n, const std::string& device) {
  v1::LookupRequest request;
  request.set_family(std::string(testing::kVectorScaleFamily));
  (*request.mutable_problem()->mutable_dims())["batch"] = batch;
  (*request.mutable_problem()->mutable_dims())["n"] = n;
  request.mutable_problem()->set_dtype(v1::BFLOAT16);
  *request.mutable_device() = Named(device);
  return request;
}

// Checks one answer to Request(batch, ...); `cubin` is the binary that came
// with it (nullptr: none asked for). Returns why it is wrong, or "".
std::string CheckAnswer(const v1::LookupResponse& answer, int64_t batch, bool churn,
                        const std::string* cubin) {
  if (answer.match() == v1::MISS) {
    return churn ? "" : absl::StrCat("stable batch=", batch, ": MISS (", answer.miss_reason(), ")");
  }
  if (answer.match() != v1::EXACT) {
    return absl::StrCat(churn ? "churn" : "stable", " batch=", batch, ": ",
                        v1::MatchKind_Name(answer.match()),
                        " from batch=", answer.entry().problem().dims().at("batch"));
  }
  if (answer.entry().problem().dims().at("batch") != batch) {
    return absl::StrCat("batch=", batch, ": answered with the entry of batch=",
                        answer.entry().problem().dims().at("batch"));
  }
  if (cubin != nullptr && Sha256Hex(*cubin) != answer.entry().binary_sha256()) {
    return absl::StrCat("batch=", batch, ": the cubin is not the entry's binary");
  }
  return "";
}

std::unique_ptr<v1::Autotune::Stub> NewStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
  args.SetMaxReceiveMessageSize(256 << 20);
  return v1::Autotune::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// One client's closed loop until `until`.
Tally RunClient(const std::string& address, const Flags& flags, absl::Time until, int seed) {
  Tally tally;
  std::unique_ptr<v1::Autotune::Stub> stub = NewStub(address);
  std::mt19937 random(seed);
  v1::BatchLookupRequest batch;
  batch.set_include_cubin(true);
  for (int i = 0; i < kBatchStable; ++i) {
    *batch.add_lookups() = Request(1 + (i * flags.stable) / kBatchStable, kStableN, kStableDevice);
  }
  for (int i = 0; i < flags.churn; ++i) {
    *batch.add_lookups() = Request(i + 1, kChurnN, kChurnDevice);
  }
  for (int64_t call = 0; absl::Now() < until; ++call) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    if (std::uniform_int_distribution<int>(0, 3)(random) != 0) {
      const bool churn = std::uniform_int_distribution<int>(0, 1)(random) == 1;
      const int64_t index = 1 + std::uniform_int_distribution<int64_t>(
                                    0, (churn ? flags.churn : flags.stable) - 1)(random);
      v1::LookupRequest request =
          Request(index, churn ? kChurnN : kStableN, churn ? kChurnDevice : kStableDevice);
      request.set_include_cubin(call % 2 == 0);
      v1::LookupResponse response;
      const absl::Time start = absl::Now();
      const grpc::Status status = stub->Lookup(&context, request, &response);
      tally.lookup_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
      if (!status.ok()) {
        tally.Fail(absl::StrCat("Lookup: ", status.error_message()));
        continue;
      }
      const std::string why = CheckAnswer(response, index, churn,
                                          request.include_cubin() ? &response.cubin() : nullptr);
      if (!why.empty()) {
        // A NEAREST churn answer can only come from a half-changed set.
        if (churn && response.match() == v1::NEAREST) {
          ++tally.mixed;
        } else {
          tally.Fail(why);
        }
      }
      if (churn) ++(response.match() == v1::EXACT ? tally.churn_exact : tally.churn_miss);
      continue;
    }
    v1::BatchLookupResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status status = stub->BatchLookup(&context, batch, &response);
    tally.batch_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    if (!status.ok()) {
      tally.Fail(absl::StrCat("BatchLookup: ", status.error_message()));
      continue;
    }
    if (response.results_size() != batch.lookups_size()) {
      tally.Fail(absl::StrCat("BatchLookup: ", response.results_size(), " results for ",
                              batch.lookups_size(), " lookups"));
      continue;
    }
    std::set<std::string> churn_states;  // "miss" or "wave N"
    for (int i = 0; i < response.results_size(); ++i) {
      const v1::BatchLookupResult& result = response.results(i);
      const bool churn = i >= kBatchStable;
      const int64_t index = batch.lookups(i).problem().dims().at("batch");
      if (result.error_code() != 0) {
        tally.Fail(absl::StrCat("BatchLookup item ", i, ": ", result.error_message()));
        continue;
      }
      const v1::LookupResponse& answer = result.response();
      const auto binary = response.binaries().find(answer.entry().binary_sha256());
      if (answer.match() != v1::MISS && binary == response.binaries().end()) {
        tally.Fail(absl::StrCat("BatchLookup item ", i, ": its binary is not in the answer"));
        continue;
      }
      const std::string why =
          CheckAnswer(answer, index, churn, answer.match() == v1::MISS ? nullptr : &binary->second);
      if (!why.empty() && !(churn && answer.match() == v1::NEAREST)) tally.Fail(why);
      if (churn) {
        churn_states.insert(answer.match() == v1::MISS
                                ? "miss"
                                : absl::StrCat(answer.match() == v1::EXACT ? "wave " : "nearest ",
                                               answer.entry().timing().median_us()));
      }
    }
    if (churn_states.size() > 1 ||
        (churn_states.size() == 1 && churn_states.begin()->rfind("nearest", 0) == 0)) {
      ++tally.mixed;
    }
  }
  return tally;
}

Tally RunClients(const std::string& address, const Flags& flags, int clients, int phase) {
  const absl::Time until = absl::Now() + absl::Seconds(flags.duration_s);
  std::vector<Tally> tallies(clients);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back(
        [&, i] { tallies[i] = RunClient(address, flags, until, 1000 * phase + i); });
  }
  Tally all;
  for (int i = 0; i < clients; ++i) {
    threads[i].join();
    all.Merge(std::move(tallies[i]));
  }
  return all;
}

// Imports, invalidations and collections of the churn set until `stop`.
void RunWriter(const std::string& address, const Flags& flags, const std::atomic<bool>& stop,
               Writes& writes) {
  client::ClientOptions options;
  options.address = address;
  absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Connect(options);
  if (!client.ok()) {
    writes.Error(std::string(client.status().message()));
    return;
  }
  for (int wave = 2; !stop.load(); ++wave) {
    absl::StatusOr<v1::CacheBundle> bundle = ChurnWave(flags.churn, wave);
    if (!bundle.ok()) {
      writes.Error(std::string(bundle.status().message()));
      return;
    }
    absl::StatusOr<v1::ImportResponse> imported = (*client)->Import(*bundle, /*replace=*/true);
    if (!imported.ok()) {
      writes.Error(absl::StrCat("Import: ", imported.status().message()));
    } else {
      ++writes.imports;
    }
    absl::SleepFor(absl::Milliseconds(20));
    if (wave % 3 == 0) {
      v1::InvalidateRequest request;
      request.mutable_filter()->set_device(kChurnDevice);
      absl::StatusOr<v1::InvalidateResponse> removed = (*client)->Invalidate(request);
      if (!removed.ok()) {
        writes.Error(absl::StrCat("Invalidate: ", removed.status().message()));
      } else {
        ++writes.invalidations;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (wave % 5 == 0) {
      absl::StatusOr<v1::GarbageCollectResponse> collected =
          (*client)->GarbageCollect(v1::GarbageCollectRequest());
      if (!collected.ok()) {
        writes.Error(absl::StrCat("GarbageCollect: ", collected.status().message()));
      } else {
        ++writes.collections;
      }
    }
  }
}

// Warmups of the small manifest, back to back, until `stop`.
void RunJobs(const std::string& address, const std::string& manifest, const std::atomic<bool>& stop,
             Writes& writes) {
  while (!stop.load()) {
    const testing::CommandResult warmup = testing::RunCommand(
        {testing::AutotuneCliPath(), "--server", address, "warmup", manifest, "--retune"},
        absl::Minutes(2));
    if (warmup.exit_code == 0) {
      ++writes.jobs_ok;
    } else {
      ++writes.jobs_failed;
      writes.Error(absl::StrCat("warmup: ", warmup.err.substr(0, 300)));
    }
  }
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}

void PrintRow(const std::string& phase, int clients, const Tally& tally) {
  std::printf("%-8s %7d %9zu %9.0f %9.0f %9zu %9.0f %9.0f %8lld %6lld\n", phase.c_str(), clients,
              tally.lookup_us.size(), Percentile(tally.lookup_us, 0.5),
              Percentile(tally.lookup_us, 0.99), tally.batch_us.size(),
              Percentile(tally.batch_us, 0.5), Percentile(tally.batch_us, 0.99),
              static_cast<long long>(tally.failed), static_cast<long long>(tally.mixed));
}

absl::StatusOr<int> Run(const Flags& flags) {
  testing::TempDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot make a temporary directory");
  // A small family for the jobs: MODE 0 and 1 only, each variant 5 ms.
  setenv("FAKE_WORKER_SLEEP_MS", "5", 1);
  ASSIGN_OR_RETURN(std::string family, ReadFile(flags.testdata + "/modes.textproto"));
  family = absl::StrReplaceAll(family, {{"values: [0, 1, 2, 3, 4, 5, 6, 7]", "values: [0, 1]"}});
  ASSIGN_OR_RETURN(const std::string source, ReadFile(flags.testdata + "/modes.cu"));
  RETURN_IF_ERROR(WriteFileAtomically(dir.File("modes.textproto"), family));
  RETURN_IF_ERROR(WriteFileAtomically(dir.File("modes.cu"), source));
  RETURN_IF_ERROR(WriteFileAtomically(
      dir.File("modes.manifest"),
      "items { family: \"modes\" dims { name: \"n\" values: [256, 1024, 4096] } "
      "dtypes: [FLOAT32] }\n"));

  Daemon daemon(dir.path(), {"--kernels", "none", "--compile-workers", "2", "--profile-worker",
                             flags.fake_worker, "--lease-dir", dir.File("leases")});
  RETURN_IF_ERROR(daemon.Start(absl::Seconds(60)));
  const std::string& address = daemon.address();
  const testing::CommandResult registered = testing::RunCommand(
      {testing::AutotuneCliPath(), "--server", address, "register", dir.File("modes.textproto")});
  if (registered.exit_code != 0) return absl::InternalError("register: " + registered.err);

  client::ClientOptions options;
  options.address = address;
  ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client, client::Client::Connect(options));
  ASSIGN_OR_RETURN(v1::CacheBundle stable, StableSet(flags.stable));
  RETURN_IF_ERROR(client->Import(stable, /*replace=*/false).status());
  ASSIGN_OR_RETURN(v1::CacheBundle first_wave, ChurnWave(flags.churn, 1));
  RETURN_IF_ERROR(client->Import(first_wave, /*replace=*/true).status());

  utsname host{};
  uname(&host);
  std::printf(
      "autotune-bench-load: %s %s, %u hardware threads, %d stable and %d churn entries, "
      "%.1f s per phase\n",
      host.nodename, host.machine, std::thread::hardware_concurrency(), flags.stable, flags.churn,
      flags.duration_s);
  std::printf("Lookup and BatchLookup (%d stable + %d churn, with cubins) latency in us\n",
              kBatchStable, flags.churn);
  std::printf("%-8s %7s %9s %9s %9s %9s %9s %9s %8s %6s\n", "phase", "clients", "lookups", "p50",
              "p99", "batches", "p50", "p99", "failed", "mixed");

  const Tally idle = RunClients(address, flags, 1, 1);
  PrintRow("idle", 1, idle);
  const Tally busy = RunClients(address, flags, flags.clients, 2);
  PrintRow("clients", flags.clients, busy);

  Writes writes;
  Tally writing;
  {
    std::atomic<bool> stop{false};
    std::thread writer([&] { RunWriter(address, flags, stop, writes); });
    writing = RunClients(address, flags, flags.clients, 3);
    stop = true;
    writer.join();
  }
  PrintRow("writes", flags.clients, writing);
  std::atomic<bool> stop{false};
  std::thread writer([&] { RunWriter(address, flags, stop, writes); });
  std::thread jobs([&] { RunJobs(address, dir.File("modes.manifest"), stop, writes); });
  const Tally load = RunClients(address, flags, flags.clients, 4);
  stop = true;
  writer.join();
  jobs.join();
  PrintRow("load", flags.clients, load);

  std::printf(
      "writes and load phases: %lld imports, %lld invalidations, %lld garbage collections, "
      "%lld jobs ended ok, %lld failed; churn lookups %lld EXACT, %lld MISS\n",
      static_cast<long long>(writes.imports.load()),
      static_cast<long long>(writes.invalidations.load()),
      static_cast<long long>(writes.collections.load()),
      static_cast<long long>(writes.jobs_ok.load()),
      static_cast<long long>(writes.jobs_failed.load()), static_cast<long long>(load.churn_exact),
      static_cast<long long>(load.churn_miss));
  const int stopped = daemon.Stop();

  bool ok = true;
  for (const Tally* tally : std::initializer_list<const Tally*>{&idle, &busy, &writing, &load}) {
    for (const std::string& why : tally->first_failures) std::printf("FAILED: %s\n", why.c_str());
    if (tally->failed > 0 || tally->mixed > 0) ok = false;
  }
  {
    absl::MutexLock lock(&writes.mu);
    for (const std::string& why : writes.errors) std::printf("WRITER: %s\n", why.c_str());
    if (!writes.errors.empty()) ok = false;
  }
  if (writes.imports.load() == 0 || writes.invalidations.load() == 0 ||
      writes.jobs_ok.load() == 0) {
    std::printf("FAILED: the load phase did not import, invalidate and finish a job\n");
    ok = false;
  }
  if (stopped != 0) {
    std::printf("FAILED: the daemon exited %d: %s\n", stopped, daemon.Stderr().c_str());
    ok = false;
  }
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char** argv) {
  autotune::bench::Flags flags;
  CLI::App app{"Lookups from many clients while imports, invalidations and jobs change the cache"};
  app.add_option("--clients", flags.clients, "concurrent clients in the busy phases")
      ->check(CLI::Range(1, 1024));
  app.add_option("--duration", flags.duration_s, "seconds per phase")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--stable", flags.stable, "entries that never change")
      ->check(CLI::Range(16, 100000));
  app.add_option("--churn", flags.churn, "entries the writer changes")->check(CLI::Range(1, 10000));
  app.add_option("--testdata", flags.testdata, "service/testdata (the jobs' family)");
  app.add_option("--fake-worker", flags.fake_worker, "the stand-in profile worker");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  absl::StatusOr<int> result = autotune::bench::Run(flags);
  if (!result.ok()) {
    std::cerr << "autotune-bench-load: " << result.status().message() << "\n";
    return 1;
  }
  return *result;
}
