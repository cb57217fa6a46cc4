// autotune-bench-ab: does each stored choice hold when timed again, long and
// interleaved, against the fastest other candidate?
//
//   autotune-bench-ab --db tuned.db [--passes 3] [--seconds 1] [--round-seconds 0.005]
//                     [--band 0.005] [--json FILE] [--worker PATH]
//
// For every best entry of the database (the daemon that wrote it stopped:
// the database is opened exclusively), the runner-up is the fastest other
// config the entry's own job timed in its serial phase (SERIAL_VALIDATION,
// OK, the lowest median), else the fastest other it screened. Both binaries
// and the reference's come from the database's compile records, so what is
// timed is what the daemon timed and serves. Each pair is validated again
// and timed in interleaved serial rounds (--round-seconds of graph replays
// per candidate per round) for --seconds of GPU time, in each of --passes
// fresh worker processes, the two in swapped order every other pass; the
// rounds go on until that time is spent or one is slower than the other
// beyond doubt (after at least --min-rounds). Round lengths, the order and
// the processes differ from the tuning's serial phase on purpose.
//
// The ratio chosen / runner-up is taken round by round and bootstrapped over
// the rounds within each process (kernels/round_compare.h); the choice holds
// when the median ratio is at most 1 + --band. Prints one row per entry and
// the share that holds; --json writes the rows.
//
// Exit status: 0 when every pair was timed (the share within the band is a
// result, not a failure); 1 when the database cannot be read, it holds no
// entry with a runner-up, no GPU can be used or a pair could not be timed;
// 2 on bad flags.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/gpu_lease.h"
#include "base/paths.h"
#include "base/status_macros.h"
#include "cache/store.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/profile_task.h"
#include "kernels/round_compare.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"
#include "proto/worker.pb.h"
#include "service/jobs/choice.h"
#include "service/jobs/job_plan.h"
#include "service/pools/profile_pool.h"
#include "spdlog/spdlog.h"

namespace autotune::bench {
namespace {

namespace wv1 = ::autotune::worker::v1;

struct AbOptions {
  std::string db;
  std::string worker;  // empty: beside this program
  int passes = 3;
  double seconds = 1.0;
  double round_seconds = 0.005;
  int min_rounds = 10;
  double band = 0.005;
  std::string json;
};

// One entry and its runner-up, ready to time.
struct Pair {
  std::string context;  // "gemm_bf16 K=4096,M=64,N=4096 bf16"
  std::string chosen_label;
  std::string other_label;
  std::string other_phase;  // where the runner-up was timed in the tuning
  double tuned_ratio = 0;   // chosen / runner-up by the tuning's medians
  double bound = 0;         // the entry's stated bound
  v1::KernelFamily family;
  v1::Problem problem;
  kernels::SearchSpace space;
  kernels::CompiledKernel reference;
  size_t chosen_index = 0;  // into space.variants
  size_t other_index = 0;
  kernels::CompiledKernel chosen_kernel;
  kernels::CompiledKernel other_kernel;
  // Filled by the passes: per round, each one's median and the process.
  std::vector<double> chosen_rounds;
  std::vector<double> other_rounds;
  std::vector<int> process;
  std::string failure;
  std::string notes;  // throttled or contended rounds seen
};

// The stored cubin of a compile, by its key.
absl::StatusOr<kernels::CompiledKernel> StoredKernel(const cache::Store& store,
                                                     const std::string& key,
                                                     const std::string& what) {
  ASSIGN_OR_RETURN(std::optional<cache::CompileRecord> record, store.FindCompile(key));
  if (!record.has_value() || record->status != v1::OK) {
    return absl::NotFoundError(absl::StrCat("no stored binary of ", what));
  }
  ASSIGN_OR_RETURN(v1::Binary binary, store.GetBinary(record->binary_sha256));
  return kernels::CompiledKernel{.cubin = binary.cubin(), .lowered_name = record->lowered_name};
}

// The fastest OK measurement of the entry's job other than its config, in
// `phase`; null when none.
const v1::Measurement* FastestOther(const std::vector<v1::Measurement>& measurements,
                                    const v1::Entry& entry, v1::Phase phase) {
  const v1::Measurement* best = nullptr;
  for (const v1::Measurement& m : measurements) {
    if (m.job_id() != entry.job_id() || m.phase() != phase || m.status() != v1::OK) continue;
    if (service::SameConfig(m.config(), entry.config()) || m.timing().median_us() <= 0) continue;
    if (best == nullptr || m.timing().median_us() < best->timing().median_us()) best = &m;
  }
  return best;
}

// The tuning's own median of the chosen config in `phase` (0 when absent).
double OwnMedian(const std::vector<v1::Measurement>& measurements, const v1::Entry& entry,
                 v1::Phase phase) {
  double best = 0;
  for (const v1::Measurement& m : measurements) {
    if (m.job_id() != entry.job_id() || m.phase() != phase || m.status() != v1::OK) continue;
    if (!service::SameConfig(m.config(), entry.config())) continue;
    if (best == 0 || m.timing().median_us() < best) best = m.timing().median_us();
  }
  return best;
}

// The pair of one entry; nullopt (with `why`) when it has no runner-up.
absl::StatusOr<std::optional<Pair>> PairOf(const cache::Store& store, const v1::Entry& entry,
                                           std::string* why) {
  Pair pair;
  pair.context = ProblemContext(entry.family(), entry.problem());
  ASSIGN_OR_RETURN(cache::FamilyRecord record,
                   store.GetFamilyVersion(entry.family(), entry.family_hash()));
  pair.family = record.family;
  pair.problem = entry.problem();
  pair.bound = entry.bound();
  const cache::EntryKey key{entry.family(), entry.family_hash(), entry.problem(),
                            entry.device().name()};
  ASSIGN_OR_RETURN(std::vector<v1::Measurement> measurements, store.ListMeasurements(key));
  v1::Phase phase = v1::SERIAL_VALIDATION;
  const v1::Measurement* other = FastestOther(measurements, entry, phase);
  if (other == nullptr) {
    phase = v1::SCREEN;
    other = FastestOther(measurements, entry, phase);
  }
  if (other == nullptr) {
    *why = "no other config passed the tuning's screen";
    return std::nullopt;
  }
  pair.other_phase = phase == v1::SCREEN ? "screen" : "serial";
  const double own = OwnMedian(measurements, entry, phase);
  if (own > 0) pair.tuned_ratio = own / other->timing().median_us();
  pair.chosen_label = kernels::ConfigLabel(pair.family, entry.config());
  pair.other_label = kernels::ConfigLabel(pair.family, other->config());

  kernels::DeviceLimits limits;
  limits.arch = entry.arch();
  limits.sm_count = entry.device().sm_count();  // the grid the tune measured
  ASSIGN_OR_RETURN(pair.space, kernels::ExpandSearchSpace(pair.family, pair.problem, limits));
  bool found_chosen = false;
  bool found_other = false;
  for (size_t i = 0; i < pair.space.variants.size(); ++i) {
    const v1::Config& config = pair.space.variants[i].config;
    if (!found_chosen && service::SameConfig(config, entry.config())) {
      pair.chosen_index = i;
      found_chosen = true;
    } else if (!found_other && service::SameConfig(config, other->config())) {
      pair.other_index = i;
      found_other = true;
    }
  }
  if (!found_chosen || !found_other) {
    return absl::NotFoundError(absl::StrCat(pair.context, ": ",
                                            found_chosen ? pair.other_label : pair.chosen_label,
                                            " is not in the family's space for ", entry.arch()));
  }
  // Keyed as the job that tuned it keyed them.
  const service::FamilyKeyers keyers =
      service::KeyersOf(pair.family, entry.arch(), entry.nvrtc_version());
  ASSIGN_OR_RETURN(pair.reference,
                   StoredKernel(store,
                                keyers.reference.Key(pair.space.reference_name,
                                                     pair.space.reference_compile_options),
                                absl::StrCat(pair.context, " reference")));
  const kernels::Variant& chosen = pair.space.variants[pair.chosen_index];
  const kernels::Variant& runner_up = pair.space.variants[pair.other_index];
  ASSIGN_OR_RETURN(
      pair.chosen_kernel,
      StoredKernel(store, keyers.variants.Key(chosen.name_expression, chosen.compile_options),
                   absl::StrCat(pair.context, " ", pair.chosen_label)));
  ASSIGN_OR_RETURN(
      pair.other_kernel,
      StoredKernel(store, keyers.variants.Key(runner_up.name_expression, runner_up.compile_options),
                   absl::StrCat(pair.context, " ", pair.other_label)));
  return pair;
}

absl::StatusOr<wv1::ProfileTask> TaskOf(const Pair& pair, bool chosen_first,
                                        const AbOptions& options, int pass) {
  std::vector<kernels::CompiledVariant> variants = {
      {.variant = &pair.space.variants[pair.chosen_index],
       .kernel = pair.chosen_kernel,
       .id = "chosen"},
      {.variant = &pair.space.variants[pair.other_index],
       .kernel = pair.other_kernel,
       .id = "other"},
  };
  if (!chosen_first) std::swap(variants[0], variants[1]);
  ASSIGN_OR_RETURN(wv1::ProfileTask task,
                   kernels::MakeProfileTask(pair.family, pair.problem, pair.space, pair.reference,
                                            variants, kernels::ProfileSettings{}));
  task.set_task_id(absl::StrCat(pair.context, "/ab", pass));
  wv1::SerialOptions* serial = task.mutable_serial();
  // A band no interval fits in: the rounds go on until the time is spent or
  // one is slower beyond doubt.
  serial->set_target_noise(1e-6);
  serial->set_min_rounds(options.min_rounds);
  serial->set_max_seconds(options.seconds);
  serial->set_round_seconds(options.round_seconds);
  return task;
}

// One pass over every pair in the worker process `gpu` holds now.
void TimePass(service::ProfilePool::Reservation& gpu, std::vector<Pair>& pairs,
              const AbOptions& options, int pass) {
  for (Pair& pair : pairs) {
    if (!pair.failure.empty()) continue;
    absl::StatusOr<wv1::ProfileTask> task = TaskOf(pair, pass % 2 == 0, options, pass);
    if (!task.ok()) {
      pair.failure = std::string(task.status().message());
      continue;
    }
    service::ProfileResult run = gpu.Profile(*task);
    for (const wv1::VariantOutcome& outcome : run.outcomes) {
      if (outcome.status() != v1::OK && pair.failure.empty()) {
        pair.failure =
            absl::StrCat("pass ", pass + 1, ": ", outcome.variant_id(), " ",
                         v1::VariantStatus_Name(outcome.status()), ": ", outcome.detail());
      }
    }
    if (run.done.status() != v1::OK && pair.failure.empty()) {
      pair.failure =
          absl::StrCat("pass ", pass + 1, ": ", run.done.phase(), ": ", run.done.detail());
    }
    if (!pair.failure.empty()) continue;
    const wv1::SerialReport& report = run.done.serial();
    const wv1::SerialTiming* chosen = nullptr;
    const wv1::SerialTiming* other = nullptr;
    for (const wv1::SerialTiming& t : report.timings()) {
      if (t.variant_id() == "chosen") chosen = &t;
      if (t.variant_id() == "other") other = &t;
    }
    if (chosen == nullptr || other == nullptr) {
      pair.failure = absl::StrCat("pass ", pass + 1, ": the worker reported no serial timing");
      continue;
    }
    const int rounds = std::min(chosen->round_median_us_size(), other->round_median_us_size());
    for (int r = 0; r < rounds; ++r) {
      pair.chosen_rounds.push_back(chosen->round_median_us(r));
      pair.other_rounds.push_back(other->round_median_us(r));
      pair.process.push_back(pass);
    }
    if (report.throttled_rounds() > 0 || report.contended_rounds() > 0) {
      absl::StrAppend(&pair.notes, pair.notes.empty() ? "" : "; ", "pass ", pass + 1, ": ",
                      report.throttled_rounds(), " throttled, ", report.contended_rounds(),
                      " contended rounds");
    }
    std::cerr << absl::StrFormat("pass %d %s: %d rounds, %s\n", pass + 1, pair.context, rounds,
                                 report.stop());
  }
}

std::string Pct(double fraction) { return absl::StrFormat("%+.2f%%", fraction * 100); }

int Run(const AbOptions& options) {
  cache::StoreOptions store_options;
  store_options.path = options.db;
  absl::StatusOr<std::unique_ptr<cache::Store>> store = cache::Store::Open(store_options);
  if (!store.ok()) {
    std::cerr << "autotune-bench-ab: " << store.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<v1::Entry>> entries =
      (*store)->ListEntries(v1::EntryFilter(), std::numeric_limits<int>::max(), 0);
  if (!entries.ok()) {
    std::cerr << "autotune-bench-ab: " << entries.status().message() << "\n";
    return 1;
  }
  std::vector<Pair> pairs;
  for (const v1::Entry& entry : *entries) {
    std::string why;
    absl::StatusOr<std::optional<Pair>> pair = PairOf(**store, entry, &why);
    if (!pair.ok()) {
      std::cerr << "autotune-bench-ab: " << pair.status().message() << "\n";
      return 1;
    }
    if (!pair->has_value()) {
      std::cout << ProblemContext(entry.family(), entry.problem()) << ": left out, " << why << "\n";
      continue;
    }
    pairs.push_back(**std::move(pair));
  }
  store->reset();  // the database is not needed while timing
  if (pairs.empty()) {
    std::cerr << "autotune-bench-ab: " << options.db << " holds no entry with a runner-up\n";
    return 1;
  }

  service::ProfilePoolOptions pool_options;
  pool_options.worker_path = options.worker.empty()
                                 ? FindBesideThisProgram("autotune-worker", {"../service"})
                                 : options.worker;
  pool_options.lease_dir = kDefaultLeaseDir;
  absl::StatusOr<std::unique_ptr<service::ProfilePool>> pool =
      service::ProfilePool::Start(pool_options);
  if (!pool.ok()) {
    std::cerr << "autotune-bench-ab: cannot start the profile pool: " << pool.status().message()
              << "\n";
    return 1;
  }
  std::unique_ptr<service::ProfilePool::Reservation> gpu = (*pool)->Reserve();
  const wv1::DeviceInfo device = gpu->device();
  for (int pass = 0; pass < options.passes; ++pass) {
    if (pass > 0) {
      if (absl::Status fresh = gpu->Renew(); !fresh.ok()) {
        std::cerr << "autotune-bench-ab: a fresh worker process: " << fresh.message() << "\n";
        return 1;
      }
    }
    TimePass(*gpu, pairs, options, pass);
  }
  gpu.reset();

  google::protobuf::ListValue rows;
  int timed = 0;
  int holds = 0;
  int beaten = 0;  // the runner-up faster beyond the band with confidence
  std::cout << absl::StrFormat(
      "\n%s, %d passes (fresh worker processes), %.3g s per pass, rounds of %.3g s\n",
      device.name(), options.passes, options.seconds, options.round_seconds);
  std::cout << "| problem | chosen | runner-up (tuned in) | tuned: chosen/runner-up | A/B: "
               "chosen/runner-up [95%] | rounds | within "
            << absl::StrFormat("%.1f%%", options.band * 100)
            << " |\n|---|---|---|---|---|---|---|\n";
  bool failed = false;
  for (const Pair& pair : pairs) {
    google::protobuf::Struct row;
    auto& fields = *row.mutable_fields();
    fields["problem"].set_string_value(pair.context);
    fields["chosen"].set_string_value(pair.chosen_label);
    fields["runner_up"].set_string_value(pair.other_label);
    fields["runner_up_from"].set_string_value(pair.other_phase);
    fields["tuned_ratio"].set_number_value(pair.tuned_ratio);
    fields["bound"].set_number_value(pair.bound);
    if (!pair.failure.empty()) {
      failed = true;
      fields["failure"].set_string_value(pair.failure);
      std::cout << "| " << pair.context << " | " << pair.chosen_label << " | " << pair.other_label
                << " | | FAILED: " << pair.failure << " | | |\n";
      *rows.add_values()->mutable_struct_value() = row;
      continue;
    }
    const kernels::RoundRatio r =
        kernels::CompareRounds(pair.chosen_rounds, pair.other_rounds, pair.process);
    ++timed;
    const bool within = r.known() && r.median <= 1 + options.band;
    holds += within;
    if (r.known() && r.low > 1 + options.band) ++beaten;
    fields["ratio"].set_number_value(r.median);
    fields["ratio_low"].set_number_value(r.low);
    fields["ratio_high"].set_number_value(r.high);
    fields["rounds"].set_number_value(r.rounds);
    fields["processes"].set_number_value(r.processes);
    fields["within_band"].set_bool_value(within);
    if (!pair.notes.empty()) fields["notes"].set_string_value(pair.notes);
    std::cout << absl::StrFormat(
        "| %s | %s | %s (%s) | %s | %s [%s, %s] | %d in %d | %s%s |\n", pair.context,
        pair.chosen_label, pair.other_label, pair.other_phase,
        pair.tuned_ratio > 0 ? Pct(pair.tuned_ratio - 1) : "-", Pct(r.median - 1), Pct(r.low - 1),
        Pct(r.high - 1), r.rounds, r.processes, within ? "yes" : "NO",
        pair.notes.empty() ? "" : absl::StrCat(" (", pair.notes, ")"));
    *rows.add_values()->mutable_struct_value() = row;
  }
  std::cout << absl::StrFormat(
      "\n%d of %d choices within %.1f%% of the runner-up by the A/B median (%.1f%%); the "
      "runner-up faster beyond it with confidence: %d\n",
      holds, timed, options.band * 100, timed > 0 ? 100.0 * holds / timed : 0.0, beaten);
  if (!options.json.empty()) {
    std::string text;
    google::protobuf::Value value;
    *value.mutable_list_value() = rows;
    (void)google::protobuf::util::MessageToJsonString(value, &text);
    std::ofstream(options.json) << text << "\n";
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char** argv) {
  autotune::bench::AbOptions options;
  CLI::App app{
      "Times each stored choice again against the fastest other candidate of its tuning, "
      "interleaved, in fresh worker processes."};
  app.add_option("--db", options.db, "The database (its daemon stopped)")->required();
  app.add_option("--worker", options.worker, "The autotune-worker (default: beside this program)");
  app.add_option("--passes", options.passes, "Worker processes, the order swapped in each")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  app.add_option("--seconds", options.seconds, "GPU seconds of rounds per pair per pass")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  app.add_option("--round-seconds", options.round_seconds,
                 "GPU seconds of replays per candidate per round")
      ->check(CLI::Range(0.0001, 1.0))
      ->capture_default_str();
  app.add_option("--min-rounds", options.min_rounds, "Rounds per pass at least")
      ->check(CLI::Range(3, 10000))
      ->capture_default_str();
  app.add_option("--band", options.band, "A choice holds within this fraction of the runner-up")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  app.add_option("--json", options.json, "Write the rows as JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  spdlog::set_level(spdlog::level::warn);
  return autotune::bench::Run(options);
}
