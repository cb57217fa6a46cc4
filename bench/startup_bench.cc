// autotune-bench-startup: what an inference server's start-up lookups cost,
// side by side in one run, for N (family, problem) pairs with cubins:
//   service          StartupLookup against the real daemon (autotuned, a
//                    process of its own) over a Unix socket, with an empty local cache (the first
//                    start on a host: answers and cubins fetched, then kept)
//   service + local  the same daemon, the local cache warm (a restart: the
//                    configs from the service, the cubins from the cache)
//   local, service down  the warm local cache alone, the daemon's socket gone
//   JSON directory   the same configs read from per-shape JSON files, the
//                    way servers read them today (client/server_configs.h
//                    writes them), parsed with protobuf's JSON parser; no
//                    cubins (those servers compile at start-up)
// The two paths a server takes at its one start are also run in a process
// of their own each round (", new process"): a server starts once, so its
// start is a process's first, which touches all its memory for the first
// time. Each start is a fresh StartupLookup, as in a new process. Beside each
// path's time is the median of the page faults this process took during a
// start (getrusage): memory the start touched for the first time, which
// costs more than the copying on some virtual machines. The paths take
// turns, round after round; medians and maxima over the rounds are
// reported. Every answer is checked: all EXACT, each cubin present with the
// entry's sha256, so a broken answer cannot pass as a fast one.
//
// Goals (issue "clients for inference servers"): every service start under
// 100 ms; every local-cache start under 20 ms.
//
// Exit status: 0 when every answer was right; 1 otherwise; 2 on bad flags;
// 3 with --require-goals when a goal was missed.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/sha256.h"
#include "base/temp_dir.h"
#include "client/client.h"
#include "client/local_cache.h"
#include "client/server_configs.h"
#include "client/startup_lookup.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  // Set for a child that makes one start in a process of its own: the
  // daemon's address and the local cache; it prints "<ms> <faults>".
  std::string one_start_address;
  std::string one_start_local;
  // Where the child's answers must come from.
  client::AnswerSource one_start_source = client::AnswerSource::kService;
  int64_t entries = 1000;
  int64_t cubin_bytes = 16384;
  int rounds = 10;
  bool recipes = true;  // StartupOptions.recipes
  bool require_goals = false;
};

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t MinorFaults() {
  struct rusage usage;
  return getrusage(RUSAGE_SELF, &usage) == 0 ? usage.ru_minflt : 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

// Every answer EXACT with its entry's cubin.
absl::Status Check(const std::vector<client::StartupAnswer>& answers, bool cubins,
                   client::AnswerSource source) {
  for (size_t i = 0; i < answers.size(); ++i) {
    const client::StartupAnswer& a = answers[i];
    if (!a.error.ok())
      return absl::InternalError(absl::StrCat("answer ", i, ": ", a.error.message()));
    if (a.response.match() != v1::EXACT || a.source != source) {
      return absl::InternalError(
          absl::StrCat("answer ", i, " is not EXACT from the expected source: ", a.note));
    }
    if (cubins &&
        (a.cubin == nullptr || Sha256Hex(*a.cubin) != a.response.entry().binary_sha256())) {
      return absl::InternalError(absl::StrCat("answer ", i, " has no valid cubin: ", a.note));
    }
  }
  return absl::OkStatus();
}

// The lookups of `bundle`'s entries, one each.
std::vector<v1::LookupRequest> RequestsOf(const v1::CacheBundle& bundle) {
  std::vector<v1::LookupRequest> requests;
  for (const v1::Entry& entry : bundle.entries()) {
    v1::LookupRequest request;
    request.set_family(entry.family());
    *request.mutable_problem() = entry.problem();
    *request.mutable_device() = entry.device();
    requests.push_back(request);
  }
  return requests;
}

// One start, from creating the StartupLookup to the answers in hand
// (`took_ms`, and the page faults meanwhile); the local cache's writes
// that follow in the background are waited for outside the time.
std::vector<client::StartupAnswer> StartUp(const Options& options,
                                           const std::vector<v1::LookupRequest>& requests,
                                           const std::string& at, const std::string& local,
                                           double* took_ms = nullptr, double* faulted = nullptr) {
  const int64_t faults0 = MinorFaults();
  const Clock::time_point t0 = Clock::now();
  client::StartupOptions startup;
  startup.client.address = at;
  startup.local_cache_dir = local;
  startup.deadline = absl::Seconds(10);
  startup.recipes = options.recipes;
  auto lookup = client::StartupLookup::Create(startup);
  if (!lookup.ok()) return std::vector<client::StartupAnswer>();
  std::vector<client::StartupAnswer> answers = (*lookup)->LookupAll(requests);
  if (took_ms != nullptr) *took_ms = Ms(t0, Clock::now());
  if (faulted != nullptr) *faulted = static_cast<double>(MinorFaults() - faults0);
  if (absl::Status kept = (*lookup)->FlushLocalCache(); !kept.ok()) {
    std::cerr << "local cache: " << kept << "\n";
  }
  return answers;
}

// The child's one start: the same synthetic bundle's lookups (the bundle
// is made before the clock starts).
int OneStart(const Options& options) {
  absl::StatusOr<v1::CacheBundle> bundle =
      testing::MakeSyntheticBundle(options.entries, options.cubin_bytes);
  if (!bundle.ok()) return 1;
  const std::vector<v1::LookupRequest> requests = RequestsOf(*bundle);
  double took = 0;
  double faulted = 0;
  std::vector<client::StartupAnswer> answers = StartUp(options, requests, options.one_start_address,
                                                       options.one_start_local, &took, &faulted);
  if (absl::Status ok = Check(answers, true, options.one_start_source); !ok.ok()) {
    std::cerr << ok << "\n";
    return 1;
  }
  std::cout << took << " " << faulted << "\n";
  return 0;
}

int Run(const Options& options) {
  testing::TempDir dir;
  absl::StatusOr<v1::CacheBundle> bundle =
      testing::MakeSyntheticBundle(options.entries, options.cubin_bytes);
  if (!bundle.ok()) {
    std::cerr << bundle.status() << "\n";
    return 1;
  }
  // The real daemon, a process of its own as in production (its memory
  // settings and threads are its own, not the client's).
  testing::Daemon daemon(dir.path(), {"--kernels", "none", "--gpus", "none"});
  if (absl::Status started = daemon.Start(); !started.ok()) {
    std::cerr << started << "\n";
    return 1;
  }
  const std::string address = daemon.address();
  {
    client::ClientOptions client_options;
    client_options.address = address;
    client_options.timeout = absl::Seconds(60);
    auto client = client::Client::Connect(client_options);
    if (!client.ok() || !(*client)->Import(*bundle, false).ok()) {
      std::cerr << "cannot import the bundle\n";
      return 1;
    }
  }
  const std::vector<v1::LookupRequest> requests = RequestsOf(*bundle);
  // The JSON directory, as export-configs writes it.
  v1::KernelSummary summary;
  summary.set_name(bundle->families(0).family().name());
  for (const v1::ProblemDimension& dim : bundle->families(0).family().dims()) {
    *summary.add_dims() = dim;
  }
  std::vector<v1::Entry> entries(bundle->entries().begin(), bundle->entries().end());
  const std::string json_dir = dir.File("json");
  std::filesystem::create_directories(json_dir);
  absl::StatusOr<std::vector<client::ConfigFile>> files =
      client::ServerConfigFiles(summary, entries, {});
  if (!files.ok()) {
    std::cerr << files.status() << "\n";
    return 1;
  }
  for (const client::ConfigFile& file : *files) {
    if (!WriteFileAtomically(json_dir + "/" + file.name, file.json).ok()) return 1;
  }

  std::map<std::string, std::vector<double>> ms;
  std::map<std::string, std::vector<double>> faults;
  const auto start_up = [&](const std::string& at, const std::string& local,
                            double* took_ms = nullptr, double* faulted = nullptr) {
    return StartUp(options, requests, at, local, took_ms, faulted);
  };
  // One start in a process of its own (this program again, --one-start).
  const auto start_in_new_process = [&](const std::string& at, const std::string& local,
                                        client::AnswerSource source, const std::string& path) {
    std::vector<std::string> argv = {"/proc/self/exe",
                                     "--one-start",
                                     at,
                                     local,
                                     source == client::AnswerSource::kService ? "service" : "local",
                                     "--entries",
                                     absl::StrCat(options.entries),
                                     "--cubin-bytes",
                                     absl::StrCat(options.cubin_bytes)};
    if (!options.recipes) argv.push_back("--no-recipes");
    const testing::CommandResult child = testing::RunCommand(argv);
    double took = 0;
    double faulted = 0;
    std::istringstream in(child.out);
    if (child.exit_code != 0 || !(in >> took >> faulted)) {
      return absl::InternalError(absl::StrCat(path, ": the child start failed: ", child.err));
    }
    ms[path].push_back(took);
    faults[path].push_back(faulted);
    return absl::OkStatus();
  };
  const std::string warm = dir.File("warm");
  {
    const std::vector<client::StartupAnswer> filled = start_up(address, warm);
    if (absl::Status ok = Check(filled, true, client::AnswerSource::kService); !ok.ok()) {
      std::cerr << "filling the local cache: " << ok << "\n";
      return 1;
    }
  }
  const std::string gone = absl::StrCat("unix://", dir.File("no-daemon.sock"));
  for (int round = 0; round < options.rounds; ++round) {
    const std::string cold = dir.File(absl::StrCat("cold", round));
    double took = 0;
    double faulted = 0;
    std::vector<client::StartupAnswer> answers = start_up(address, cold, &took, &faulted);
    absl::Status ok = Check(answers, true, client::AnswerSource::kService);
    ms["service"].push_back(took);
    faults["service"].push_back(faulted);

    answers = start_up(address, warm, &took, &faulted);
    if (ok.ok()) ok = Check(answers, true, client::AnswerSource::kService);
    ms["service + local"].push_back(took);
    faults["service + local"].push_back(faulted);

    answers = start_up(gone, warm, &took, &faulted);
    if (ok.ok()) ok = Check(answers, true, client::AnswerSource::kLocalCache);
    ms["local, service down"].push_back(took);
    faults["local, service down"].push_back(faulted);

    Clock::time_point t0 = Clock::now();
    Clock::time_point t1;
    int64_t configs = 0;
    for (const auto& entry : std::filesystem::directory_iterator(json_dir)) {
      absl::StatusOr<std::string> text = ReadFile(entry.path().string());
      google::protobuf::Struct parsed;
      if (!text.ok() || !google::protobuf::util::JsonStringToMessage(*text, &parsed).ok()) {
        ok = absl::InternalError(absl::StrCat("cannot parse ", entry.path().string()));
        break;
      }
      configs += parsed.fields_size();
    }
    t1 = Clock::now();
    if (ok.ok() && configs != options.entries) {
      ok = absl::InternalError(absl::StrCat("the JSON files hold ", configs, " configs"));
    }
    ms["JSON directory"].push_back(Ms(t0, t1));
    std::filesystem::remove_all(cold);
    if (!ok.ok()) {
      std::cerr << "round " << round << ": " << ok << "\n";
      return 1;
    }
  }
  // Where the time goes: the parts of a start, each once more, alone.
  std::vector<std::pair<std::string, double>> parts;
  {
    client::ClientOptions client_options;
    client_options.address = address;
    auto client = client::Client::Connect(client_options);
    v1::BatchLookupRequest batch;
    for (const v1::LookupRequest& request : requests) *batch.add_lookups() = request;
    Clock::time_point t0 = Clock::now();
    absl::StatusOr<v1::BatchLookupResponse> plain = (*client)->BatchLookup(batch);
    parts.emplace_back("BatchLookup, no cubins", Ms(t0, Clock::now()));
    batch.set_include_cubin(true);
    t0 = Clock::now();
    absl::StatusOr<v1::BatchLookupResponse> with = (*client)->BatchLookup(batch);
    parts.emplace_back("BatchLookup, with cubins", Ms(t0, Clock::now()));
    absl::StatusOr<client::LocalCache> local = client::LocalCache::Open(warm);
    if (!plain.ok() || !with.ok() || !local.ok()) {
      std::cerr << "the parts could not be timed\n";
      return 1;
    }
    t0 = Clock::now();
    std::vector<v1::LocalAnswer> kept;
    for (const v1::LookupRequest& request : requests) {
      absl::StatusOr<std::optional<v1::LocalAnswer>> answer = local->GetAnswer(request);
      if (answer.ok() && answer->has_value()) kept.push_back(**answer);
    }
    parts.emplace_back("local: read 1 answer each", Ms(t0, Clock::now()));
    t0 = Clock::now();
    for (const v1::LocalAnswer& answer : kept) {
      (void)local->GetCubin(answer.response().entry().binary_sha256());
    }
    parts.emplace_back("local: read and check each cubin", Ms(t0, Clock::now()));
    t0 = Clock::now();
    for (const auto& [sha, cubin] : with->binaries()) (void)Sha256Hex(cubin);
    parts.emplace_back("  of which sha256 of the cubins", Ms(t0, Clock::now()));
    google::protobuf::RepeatedPtrField<v1::LookupRequest> sent;
    for (const v1::LocalAnswer& answer : kept) *sent.Add() = answer.request();
    t0 = Clock::now();
    absl::StatusOr<std::optional<client::LocalCache::Pack>> pack =
        local->GetPack(client::LocalCache::PackKey(sent));
    parts.emplace_back(
        absl::StrCat("local: map and check the batch's pack (",
                     pack.ok() && pack->has_value() ? (*pack)->answers.size() : 0, " answers, ",
                     pack.ok() && pack->has_value() ? (*pack)->cubins.size() : 0, " cubins)"),
        Ms(t0, Clock::now()));
    // Written into a folder of their own: the warm local cache's pack
    // stays valid for the starts that follow.
    const std::string fresh_dir = dir.File("fresh");
    absl::StatusOr<client::LocalCache> fresh = client::LocalCache::Open(fresh_dir);
    t0 = Clock::now();
    for (const v1::LocalAnswer& answer : kept) (void)fresh->PutAnswer(answer);
    parts.emplace_back("local: write each answer (new)", Ms(t0, Clock::now()));
    t0 = Clock::now();
    for (const auto& [sha, cubin] : with->binaries()) (void)fresh->PutCubin(sha, cubin);
    parts.emplace_back("local: write each cubin (new)", Ms(t0, Clock::now()));
    t0 = Clock::now();
    for (const auto& [sha, cubin] : with->binaries()) (void)fresh->PutCubin(sha, cubin);
    parts.emplace_back("local: write each cubin (present)", Ms(t0, Clock::now()));
    t0 = Clock::now();
    (void)start_up(gone, "none");
    parts.emplace_back("a start with the service down, no local cache", Ms(t0, Clock::now()));
  }
  // The starts in processes of their own come after the others: a fork
  // leaves this process's memory to be faulted in again (copy on write),
  // which would cost the in-process starts of a round what they do not cost
  // a server.
  for (int round = 0; round < options.rounds; ++round) {
    const std::string fresh = dir.File(absl::StrCat("fresh", round));
    absl::Status ok = start_in_new_process(address, fresh, client::AnswerSource::kService,
                                           "service, new process");
    std::filesystem::remove_all(fresh);
    if (ok.ok())
      ok = start_in_new_process(gone, warm, client::AnswerSource::kLocalCache,
                                "local, down, new process");
    if (!ok.ok()) {
      std::cerr << "round " << round << ": " << ok << "\n";
      return 1;
    }
  }
  daemon.Stop();

  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::cout << absl::StrFormat(
      "start-up lookups of %d (family, problem) pairs, cubins of %d B each (%d JSON files); "
      "%d rounds; recipes %s; %ld cores, load %.2f; %s\n",
      options.entries, options.cubin_bytes, files->size(), options.rounds,
      options.recipes ? "on" : "off", sysconf(_SC_NPROCESSORS_ONLN), load[0],
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()));
  std::cout << absl::StrFormat("%-26s %10s %10s %10s %8s  %s\n", "path", "median ms", "max ms",
                               "vs JSON", "faults", "goal");
  const double json = Median(ms["JSON directory"]);
  bool met = true;
  for (const char* path : {"service", "service + local", "local, service down",
                           "service, new process", "local, down, new process", "JSON directory"}) {
    const std::vector<double>& v = ms[path];
    const double max = *std::max_element(v.begin(), v.end());
    std::string goal;
    if (std::string(path).rfind("service", 0) == 0) {
      goal = absl::StrCat("every start < 100 ms: ", max < 100 ? "met" : "MISSED");
      met = met && max < 100;
    } else if (absl::StartsWith(path, "local")) {
      goal = absl::StrCat("every start < 20 ms: ", max < 20 ? "met" : "MISSED");
      met = met && max < 20;
    }
    const std::string faulted =
        faults.contains(path) ? absl::StrCat(static_cast<int64_t>(Median(faults[path]))) : "";
    std::cout << absl::StrFormat("%-26s %10.2f %10.2f %9.2fx %8s  %s\n", path, Median(v), max,
                                 json > 0 ? Median(v) / json : 0, faulted, goal);
  }
  // Each round apart: the first rounds of a process pay for memory it
  // touches for the first time (the faults), as a server's one start does.
  std::cout << "\neach round, ms, and the client's page faults:\n";
  for (const char* path : {"service", "service + local", "local, service down",
                           "service, new process", "local, down, new process"}) {
    std::cout << absl::StrFormat("  %-24s", path);
    for (double took : ms[path]) std::cout << absl::StrFormat(" %6.1f", took);
    std::cout << "\n  faults                  ";
    for (double f : faults[path]) std::cout << absl::StrFormat(" %6.0f", f);
    std::cout << "\n";
  }
  std::cout << "\nwhere the time goes (each part once, alone):\n";
  for (const auto& [part, took] : parts)
    std::cout << absl::StrFormat("  %-36s %8.2f ms\n", part, took);
  return met || !options.require_goals ? 0 : 3;
}

}  // namespace
}  // namespace autotune

int main(int argc, char** argv) {
  autotune::Options options;
  CLI::App app{"Start-up lookups: service, local cache and JSON files side by side"};
  app.add_option("--entries", options.entries, "(family, problem) pairs")->capture_default_str();
  app.add_option("--cubin-bytes", options.cubin_bytes, "bytes of each synthetic cubin")
      ->capture_default_str();
  app.add_flag("!--no-recipes", options.recipes, "start-up lookups without compile recipes");
  app.add_option("--rounds", options.rounds, "rounds; each path runs once per round")
      ->capture_default_str();
  app.add_flag("--require-goals", options.require_goals, "exit 3 when a goal is missed");
  std::vector<std::string> one_start;
  app.add_option("--one-start", one_start,
                 "(internal) one start in this process against ADDRESS with the local cache DIR, "
                 "its answers all from SOURCE (service or local)")
      ->expected(3)
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  spdlog::set_level(spdlog::level::warn);
  if (!one_start.empty()) {
    options.one_start_address = one_start[0];
    options.one_start_local = one_start[1];
    if (one_start[2] != "service" && one_start[2] != "local") {
      std::cerr << "--one-start: SOURCE is service or local, not " << one_start[2] << "\n";
      return 2;
    }
    options.one_start_source = one_start[2] == "service"
                                   ? autotune::client::AnswerSource::kService
                                   : autotune::client::AnswerSource::kLocalCache;
    return autotune::OneStart(options);
  }
  return autotune::Run(options);
}
