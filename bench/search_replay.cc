// autotune-search-replay: runs the daemon's searches (service/jobs/search.h)
// over stored screens of real exhaustive runs, with no GPU, and says how
// close each gets to the exhaustive best and after how many measurements.
//
//   # A problem's screens, from a daemon that tuned it exhaustively:
//   autotune show gemm_bf16 --dims M=16,N=4096,K=4096 --dtype bf16 --json > m16.json
//   autotune-search-replay convert m16.json --default "WGMMA=0,BM=128,..." > m16.tsv
//   # Searches over it, many seeds each:
//   autotune-search-replay run m16.tsv --search random --fraction 0.1 --seeds 8
//
// A screens file (.tsv) holds one problem: `#` lines (the problem, and the
// default config when known), a header of the param names, then one row per
// screened variant (its param values, its status, its screen median in µs;
// 0 when it did not validate). Rows are sorted by their param values, which
// is the order `exhaustive` walks.
//
// `run` prints per problem and search: the budget, the runs (seeds) that
// came within 1% of the exhaustive best and that found it, the median
// number of measurements each took, and the median and worst final gap.
// `--floor-within-1pct F` makes it exit 1 when fewer than F of the runs of
// a problem end within 1% (CI's floor on a search's quality).
//
// The same answer every time: `--noise S` gives each run a screen of its
// own, every stored median times exp(S * a standard normal draw) (a run's
// screen noise, drawn from the run's seed), and each run then picks its
// serial candidates from what it saw as a job does (SelectCandidates,
// service/jobs/choice.h) and chooses the truly fastest of them by the stored
// medians (a serial phase that never errs). Printed per problem: the runs
// whose choice is the most frequent choice or within 0.5% of it by the
// stored medians ("same or tie", what tuning_compare.py stability counts on
// a GPU), and how far the choices are from the exhaustive best.
// `--floor-stable F` makes it exit 1 when fewer than F of a problem's runs
// are the same or a tie.
//
// Configs predicted for problems never measured (config_predictor.h):
//   autotune-search-replay predict bench/testdata/search/rmsnorm/*.tsv --noise 0.01
// leaves each problem out in turn, fits the predictor on the family's other
// problems, and prints per problem the stored median of the config it ranks
// first against the exhaustive best, beside the nearest other problem's best
// config and the family's default (PredictCommand); `--floor-median` and
// `--floor-within-10pct` make it exit 1 below a family's floor.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/family_loader.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/jobs/choice.h"
#include "service/jobs/config_predictor.h"
#include "service/jobs/search.h"

namespace autotune {
namespace {

struct ScreenedVariant {
  std::vector<int64_t> values;  // in Screens::params order
  std::string status;           // VariantStatus name
  double median_us = 0;         // > 0 when OK
};

struct Screens {
  std::string problem;  // as the # line says it
  std::vector<std::string> params;
  std::vector<int64_t> default_values;  // empty when unknown
  std::vector<ScreenedVariant> variants;
};

// "A=1,B=2" (FormatDims' form) -> values in `params` order; INVALID_ARGUMENT
// when one is missing.
absl::StatusOr<std::vector<int64_t>> ParseConfig(absl::string_view text,
                                                 const std::vector<std::string>& params) {
  using Values = std::map<std::string, int64_t>;
  ASSIGN_OR_RETURN(const Values given, ParseDims(text));
  std::vector<int64_t> values;
  for (const std::string& param : params) {
    auto it = given.find(param);
    if (it == given.end()) {
      return absl::InvalidArgumentError(absl::StrCat("config: no value for ", param));
    }
    values.push_back(it->second);
  }
  return values;
}

// The screen of every variant in a GetEntryResponse (`autotune show --json`).
absl::StatusOr<Screens> FromShowJson(const std::string& path, const std::string& default_config) {
  ASSIGN_OR_RETURN(std::string json, ReadFile(path, "screens"));
  v1::GetEntryResponse shown;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (auto status = google::protobuf::util::JsonStringToMessage(json, &shown, options);
      !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a GetEntryResponse: ", status.ToString()));
  }
  Screens screens;
  screens.problem = absl::StrCat(ProblemContext(shown.entry().family(), shown.entry().problem()),
                                 " on ", shown.entry().device().name());
  for (const auto& [name, value] : shown.entry().config().params()) screens.params.push_back(name);
  std::sort(screens.params.begin(), screens.params.end());
  std::map<std::vector<int64_t>, ScreenedVariant> by_config;
  for (const v1::Measurement& m : shown.measurements()) {
    if (m.phase() != v1::SCREEN && m.phase() != v1::COMPILE) continue;
    ScreenedVariant variant;
    for (const std::string& param : screens.params) {
      auto it = m.config().params().find(param);
      if (it == m.config().params().end()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": a measurement lacks ", param));
      }
      variant.values.push_back(it->second);
    }
    variant.status = v1::VariantStatus_Name(m.status());
    const bool ok = m.status() == v1::OK && m.phase() == v1::SCREEN && m.timing().median_us() > 0;
    variant.median_us = ok ? m.timing().median_us() : 0;
    by_config[variant.values] = variant;
  }
  if (by_config.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no screens"));
  for (auto& [values, variant] : by_config) screens.variants.push_back(std::move(variant));
  if (!default_config.empty()) {
    ASSIGN_OR_RETURN(screens.default_values, ParseConfig(default_config, screens.params));
  }
  return screens;
}

std::string ToTsv(const Screens& screens) {
  std::string out = absl::StrCat("# problem ", screens.problem, "\n");
  if (!screens.default_values.empty()) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < screens.params.size(); ++i) {
      parts.push_back(absl::StrCat(screens.params[i], "=", screens.default_values[i]));
    }
    absl::StrAppend(&out, "# default ", absl::StrJoin(parts, ","), "\n");
  }
  absl::StrAppend(&out, absl::StrJoin(screens.params, "\t"), "\tstatus\tmedian_us\n");
  for (const ScreenedVariant& v : screens.variants) {
    absl::StrAppend(&out, absl::StrJoin(v.values, "\t"), "\t", v.status, "\t",
                    absl::StrFormat("%.4f", v.median_us), "\n");
  }
  return out;
}

absl::StatusOr<Screens> FromTsv(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, "screens"));
  Screens screens;
  std::string default_config;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_number;
    const auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": ", what));
    };
    if (absl::ConsumePrefix(&line, "# problem ")) {
      screens.problem = std::string(line);
      continue;
    }
    if (absl::ConsumePrefix(&line, "# default ")) {
      default_config = std::string(line);
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (screens.params.empty()) {
      if (fields.size() < 3 || fields[fields.size() - 2] != "status") {
        return error("expected a header: the param names, status, median_us");
      }
      screens.params.assign(fields.begin(), fields.end() - 2);
      continue;
    }
    if (fields.size() != screens.params.size() + 2) {
      return error(absl::StrCat(fields.size(), " fields, not ", screens.params.size() + 2));
    }
    ScreenedVariant variant;
    for (size_t i = 0; i < screens.params.size(); ++i) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(fields[i], &value)) return error(absl::StrCat("'", fields[i], "'"));
      variant.values.push_back(value);
    }
    variant.status = fields[screens.params.size()];
    if (!absl::SimpleAtod(fields.back(), &variant.median_us) || !(variant.median_us >= 0)) {
      return error(absl::StrCat("median '", fields.back(), "'"));
    }
    if (variant.status != "OK") variant.median_us = 0;
    screens.variants.push_back(std::move(variant));
  }
  if (screens.variants.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no rows"));
  if (!default_config.empty()) {
    ASSIGN_OR_RETURN(screens.default_values, ParseConfig(default_config, screens.params));
  }
  return screens;
}

// One search over one problem: when it came within 1% of the best and found
// it (measurements, 0 when never), and where it ended.
struct Run {
  int64_t budget = 0;    // variants the search could measure
  int64_t measured = 0;  // variants it measured before it stopped
  int64_t to_within_1pct = 0;
  int64_t to_best = 0;
  double final_gap = 0;  // best found / exhaustive best - 1; infinite when none valid
  // Compiling ahead, as a job does (Search::Ahead, kDefaultCompileAhead times
  // the batch in measurement): proposals after the first batch, those of them guessed
  // ahead, and guesses never proposed.
  int64_t later = 0;
  int64_t later_guessed = 0;
  int64_t guesses = 0;
  int64_t guesses_unused = 0;
  // The variant an error-free serial phase chooses among the candidates the
  // run's screen (with its noise) sends it.
  int64_t choice = -1;
};

// The family and the problem of a screens file's problem line ("gemm_bf16
// K=4096,M=1024,N=4096 bf16 on ..."); INVALID_ARGUMENT when it does not
// parse.
absl::StatusOr<std::pair<std::string, v1::Problem>> ProblemOf(const Screens& screens) {
  const std::vector<std::string> words = absl::StrSplit(screens.problem, ' ');
  if (words.size() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem '", screens.problem, "': no dims and dtype"));
  }
  v1::Problem problem;
  ASSIGN_OR_RETURN(const auto dims, ParseDims(words[1]));
  for (const auto& [name, value] : dims) (*problem.mutable_dims())[name] = value;
  ASSIGN_OR_RETURN(const v1::DType dtype, ParseDType(words[2]));
  problem.set_dtype(dtype);
  return std::make_pair(words[0], std::move(problem));
}

// The launch features (service::LaunchFeatures) of each screened variant,
// from `family` expanded for the screens' problem ("gemm_bf16
// K=4096,M=1024,N=4096 bf16 on ..."), on a GPU of `sms` SMs: as a job
// computes them. INVALID_ARGUMENT when the problem line does not parse or
// a screened config is not in the family's space.
absl::StatusOr<std::vector<float>> DerivedOf(const Screens& screens,
                                             const std::vector<v1::KernelFamily>& families,
                                             int64_t sms) {
  ASSIGN_OR_RETURN(const auto parsed, ProblemOf(screens));
  const auto& [family_name, problem] = parsed;
  const v1::KernelFamily* family = nullptr;
  for (const v1::KernelFamily& f : families) {
    if (f.name() == family_name) family = &f;
  }
  if (family == nullptr) {
    return absl::NotFoundError(absl::StrCat("no family ", family_name, " in --kernels"));
  }
  kernels::DeviceLimits limits;
  limits.arch = "sm_90a";
  ASSIGN_OR_RETURN(const kernels::SearchSpace space,
                   kernels::ExpandSearchSpace(*family, problem, limits));
  // Screens recorded before a param was added hold its default's configs
  // only (the kernel as it was then).
  std::vector<std::pair<std::string, int64_t>> unscreened;
  for (const v1::TunableParameter& param : family->params()) {
    if (absl::c_linear_search(screens.params, param.name())) continue;
    auto it = family->default_config().params().find(param.name());
    if (it == family->default_config().params().end()) {
      return absl::InvalidArgumentError(absl::StrCat(screens.problem, ": param '", param.name(),
                                                     "' was not screened and has no default"));
    }
    unscreened.emplace_back(param.name(), it->second);
  }
  std::map<std::vector<int64_t>, const kernels::Variant*> by_values;
  for (const kernels::Variant& variant : space.variants) {
    if (!absl::c_all_of(unscreened, [&](const auto& fixed) {
          return variant.config.params().at(fixed.first) == fixed.second;
        })) {
      continue;
    }
    std::vector<int64_t> values;
    for (const std::string& param : screens.params) {
      values.push_back(variant.config.params().at(param));
    }
    by_values[values] = &variant;
  }
  std::vector<float> derived;
  for (const ScreenedVariant& screened : screens.variants) {
    auto it = by_values.find(screened.values);
    if (it == by_values.end()) {
      return absl::InvalidArgumentError(absl::StrCat(screens.problem,
                                                     ": a screened config is not in ",
                                                     family->name(), "'s space for sm_90a"));
    }
    const v1::LaunchDims& launch = it->second->launch;
    int64_t blocks = 1;
    int64_t threads = 1;
    for (int64_t g : launch.grid()) blocks *= g;
    for (int64_t b : launch.block()) threads *= b;
    const std::vector<float> features =
        service::LaunchFeatures(blocks, threads, launch.dynamic_shared_bytes(), sms);
    derived.insert(derived.end(), features.begin(), features.end());
  }
  return derived;
}

// The space as a search sees it: its size, each variant's param values and
// where the default config is.
service::SearchSpaceView ViewOf(const Screens& screens) {
  service::SearchSpaceView view;
  view.variants = static_cast<int64_t>(screens.variants.size());
  view.feature_count = static_cast<int64_t>(screens.params.size());
  for (size_t i = 0; i < screens.variants.size(); ++i) {
    for (int64_t value : screens.variants[i].values) {
      view.features.push_back(static_cast<float>(value));
    }
    if (!screens.default_values.empty() && screens.variants[i].values == screens.default_values) {
      view.default_index = static_cast<int64_t>(i);
    }
  }
  return view;
}

// With `trace`, prints each round: its size, its best and the best so far.
absl::StatusOr<Run> Replay(const Screens& screens, const service::SearchSpaceView& view,
                           const service::SearchOptions& options, double best, double noise,
                           const service::CandidateRule& rule, bool trace) {
  ASSIGN_OR_RETURN(std::unique_ptr<service::Search> search, service::MakeSearch(options, view));
  // What this run's screen sees: the stored medians with its own noise.
  std::vector<double> seen(screens.variants.size());
  std::mt19937_64 draws(options.seed * 0x9e3779b97f4a7c15ULL + 1);
  std::normal_distribution<double> normal(0, 1);
  for (size_t i = 0; i < seen.size(); ++i) {
    const double draw = normal(draws);
    seen[i] = screens.variants[i].median_us * std::exp(noise * draw);
  }
  std::vector<int64_t> valid_measured;
  Run run;
  run.budget = search->budget();
  double found = std::numeric_limits<double>::infinity();
  int64_t measured = 0;
  // As a job asks: as many as the search wants to propose at once.
  std::set<int64_t> guessed;   // every guess made so far
  std::set<int64_t> proposed;  // every proposal
  bool first = true;
  for (std::vector<int64_t> batch = search->Next(run.budget); !batch.empty();
       batch = search->Next(run.budget)) {
    for (int64_t i : batch) {
      proposed.insert(i);
      if (!first) {
        ++run.later;
        run.later_guessed += guessed.contains(i) ? 1 : 0;
      }
    }
    first = false;
    for (int64_t i :
         search->Ahead(service::kDefaultCompileAhead * static_cast<int64_t>(batch.size())))
      guessed.insert(i);
    double round_best = std::numeric_limits<double>::infinity();
    int64_t round_best_index = -1;
    for (int64_t i : batch) {
      const ScreenedVariant& variant = screens.variants[static_cast<size_t>(i)];
      if (variant.median_us > 0 && variant.median_us < round_best) {
        round_best = variant.median_us;
        round_best_index = i;
      }
      ++measured;
      const bool valid = variant.median_us > 0;
      search->Record(i, {.valid = valid, .median_us = seen[static_cast<size_t>(i)]});
      if (valid) {
        found = std::min(found, variant.median_us);
        valid_measured.push_back(i);
      }
      if (run.to_within_1pct == 0 && found <= best * 1.01) run.to_within_1pct = measured;
      if (run.to_best == 0 && found <= best) run.to_best = measured;
    }
    if (trace) {
      std::vector<std::string> config;
      if (round_best_index >= 0) {
        const ScreenedVariant& variant = screens.variants[static_cast<size_t>(round_best_index)];
        for (size_t p = 0; p < screens.params.size(); ++p) {
          config.push_back(absl::StrCat(screens.params[p], "=", variant.values[p]));
        }
      }
      std::printf(
          "  seed %llu: %zu measured, the round's best %s (%.2f us), the best so far %.2f us\n",
          static_cast<unsigned long long>(options.seed), batch.size(),
          config.empty() ? "none valid" : absl::StrJoin(config, ",").c_str(), round_best, found);
    }
  }
  run.measured = measured;
  run.final_gap = found / best - 1;
  std::vector<service::Candidate> screened;
  for (int64_t i : valid_measured) {
    service::Candidate candidate;
    candidate.index = i;
    candidate.timing.set_median_us(seen[static_cast<size_t>(i)]);
    screened.push_back(std::move(candidate));
  }
  for (size_t k : service::SelectCandidates(screened, nullptr, nullptr, rule)) {
    const int64_t i = screened[k].index;
    if (run.choice < 0 || screens.variants[static_cast<size_t>(i)].median_us <
                              screens.variants[static_cast<size_t>(run.choice)].median_us) {
      run.choice = i;
    }
  }
  run.guesses = static_cast<int64_t>(guessed.size());
  for (int64_t i : guessed) run.guesses_unused += proposed.contains(i) ? 0 : 1;
  return run;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The model's launch features (--derived): the families and the GPU's SMs;
// sms 0 = none.
struct Derived {
  std::vector<v1::KernelFamily> families;
  int64_t sms = 0;
};

int RunCommand(const std::vector<std::string>& files, const std::string& search_name,
               int64_t max_variants, double fraction, int first_seed, int seeds, double floor,
               double noise, const service::CandidateRule& rule, double floor_stable, bool trace,
               const Derived& derived) {
  absl::StatusOr<service::SearchKind> kind = service::ParseSearchKind(search_name);
  if (!kind.ok()) {
    std::cerr << "autotune-search-replay: " << kind.status().message() << "\n";
    return 2;
  }
  std::printf("%-52s %8s %-10s %7s %8s %13s %13s %9s %9s %9s %9s %12s %9s %9s\n", "problem",
              "variants", "search", "budget", "measured", "within 1%", "best found", "gap med",
              "gap max", "ahead hit", "unused", "same or tie", "chose med", "chose max");
  bool below_floor = false;
  bool below_stable = false;
  for (const std::string& file : files) {
    absl::StatusOr<Screens> screens = FromTsv(file);
    if (!screens.ok()) {
      std::cerr << "autotune-search-replay: " << screens.status().message() << "\n";
      return 2;
    }
    double best = std::numeric_limits<double>::infinity();
    for (const ScreenedVariant& v : screens->variants) {
      if (v.median_us > 0) best = std::min(best, v.median_us);
    }
    if (!std::isfinite(best)) {
      std::cerr << "autotune-search-replay: " << file << ": no variant validated\n";
      return 2;
    }
    service::SearchSpaceView view = ViewOf(*screens);
    if (derived.sms > 0) {
      absl::StatusOr<std::vector<float>> features =
          DerivedOf(*screens, derived.families, derived.sms);
      if (!features.ok()) {
        std::cerr << "autotune-search-replay: " << file << ": " << features.status().message()
                  << "\n";
        return 2;
      }
      view.derived = *std::move(features);
      view.derived_count = service::kLaunchFeatures;
    }
    std::vector<double> within, found, gaps, measured, chose_gaps;
    std::map<int64_t, int> choices;
    int64_t budget = 0;
    int reached = 0, exact = 0;
    int64_t later = 0, later_guessed = 0, guesses = 0, unused = 0;
    int worst_seed = 0;
    double worst_gap = -1;
    int64_t worst_measured = 0;
    for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
      service::SearchOptions options{.kind = *kind,
                                     .budget = {.count = max_variants, .fraction = fraction},
                                     .seed = static_cast<uint64_t>(seed)};
      absl::StatusOr<Run> run = Replay(*screens, view, options, best, noise, rule, trace);
      if (!run.ok()) {
        std::cerr << "autotune-search-replay: " << file << ": " << run.status().message() << "\n";
        return 2;
      }
      budget = run->budget;
      measured.push_back(static_cast<double>(run->measured));
      if (run->to_within_1pct > 0) {
        ++reached;
        within.push_back(static_cast<double>(run->to_within_1pct));
      }
      if (run->to_best > 0) {
        ++exact;
        found.push_back(static_cast<double>(run->to_best));
      }
      gaps.push_back(run->final_gap);
      if (run->choice >= 0) {
        ++choices[run->choice];
        chose_gaps.push_back(screens->variants[static_cast<size_t>(run->choice)].median_us / best -
                             1);
      }
      if (run->final_gap > worst_gap) {
        worst_gap = run->final_gap;
        worst_seed = seed;
        worst_measured = run->measured;
      }
      later += run->later;
      later_guessed += run->later_guessed;
      guesses += run->guesses;
      unused += run->guesses_unused;
    }
    const auto share = [](int64_t part, int64_t whole) {
      return whole == 0 ? std::string("-")
                        : absl::StrFormat("%.0f%%", 100.0 * static_cast<double>(part) /
                                                        static_cast<double>(whole));
    };
    const auto cell = [&](int runs, const std::vector<double>& at) {
      return at.empty() ? absl::StrFormat("%d/%d", runs, seeds)
                        : absl::StrFormat("%d/%d @%.0f", runs, seeds, Median(at));
    };
    // The most frequent choice (the lowest index among equals), and the
    // runs that chose it or a config within 0.5% of it either way.
    int64_t modal = -1;
    for (const auto& [index, count] : choices) {
      if (modal < 0 || count > choices[modal]) modal = index;
    }
    int stable = 0;
    for (const auto& [index, count] : choices) {
      const double a = screens->variants[static_cast<size_t>(index)].median_us;
      const double b = screens->variants[static_cast<size_t>(modal)].median_us;
      const double band = (1 + service::kTieBand) * (1 + 1e-9);  // 0.5% itself is within
      if (a <= b * band && b <= a * band) stable += count;
    }
    std::printf(
        "%-52s %8zu %-10s %7lld %8.0f %13s %13s %8.2f%% %8.2f%% %9s %9s %12s %8.2f%% %8.2f%%\n",
        screens->problem.substr(0, 52).c_str(), screens->variants.size(), search_name.c_str(),
        static_cast<long long>(budget), Median(measured), cell(reached, within).c_str(),
        cell(exact, found).c_str(), 100 * Median(gaps),
        100 * *std::max_element(gaps.begin(), gaps.end()), share(later_guessed, later).c_str(),
        share(unused, guesses).c_str(), absl::StrFormat("%d/%d", stable, seeds).c_str(),
        chose_gaps.empty() ? 0.0 : 100 * Median(chose_gaps),
        chose_gaps.empty() ? 0.0 : 100 * *std::max_element(chose_gaps.begin(), chose_gaps.end()));
    if (worst_gap > 0.01) {
      std::printf("  worst run: seed %d, %.2f%% from the best after %lld measured\n", worst_seed,
                  100 * worst_gap, static_cast<long long>(worst_measured));
    }
    if (reached < floor * seeds) below_floor = true;
    if (stable < floor_stable * seeds) below_stable = true;
  }
  std::printf(
      "measured: the median of the runs (a search may stop before its budget); within 1%% / "
      "best found: runs that got there of all runs, @ the median number of measurements it "
      "took; gap: best found / exhaustive best - 1 where the search stopped; ahead hit: the "
      "proposals after the first batch that were compiled ahead (Search::Ahead, twice the batch "
      "being measured), unused: the guesses never proposed, over all runs; same or tie: the runs "
      "whose choice (the truly fastest of the serial candidates their screen picked) is the "
      "most frequent choice or within 0.5%% of it; chose: the choices' gap from the exhaustive "
      "best\n");
  if (below_floor) {
    std::fprintf(stderr,
                 "autotune-search-replay: a problem's runs within 1%% fell below the floor "
                 "of %.0f%%\n",
                 100 * floor);
    return 1;
  }
  if (below_stable) {
    std::fprintf(stderr,
                 "autotune-search-replay: a problem's runs that chose the same config or a tie "
                 "fell below the floor of %.0f%%\n",
                 100 * floor_stable);
    return 1;
  }
  return 0;
}

// `predict`: one problem left out at a time. A predictor
// (service/jobs/config_predictor.h) fitted on the validated variants of
// every other problem of the family (their param values and launch
// features, on a GPU of derived.sms SMs) ranks the left-out problem's
// screened variants; the one it ranks first is scored by its stored median:
// the exhaustive best / its median (1 = the best; 0 when it did not
// validate). Beside it, as a lookup without a prediction would answer: the
// best config of the nearest other problem (by the log2 of its dims, then
// the dtype), and the family's default config.
struct Problem {
  std::string file;
  Screens screens;
  std::string family;
  std::vector<float> features;  // service::ProblemFeatures
  std::vector<float> variants;  // per variant: its param values, then its launch features
  int64_t variant_columns = 0;
  double best = 0;
  int64_t best_index = -1;
};

// The stored median of the variant whose param values are `values`, or 0.
double MedianOf(const Screens& screens, const std::vector<int64_t>& values) {
  for (const ScreenedVariant& v : screens.variants) {
    if (v.values == values) return v.median_us;
  }
  return 0;
}

absl::StatusOr<Problem> LoadProblem(const std::string& file, const Derived& derived) {
  Problem problem;
  problem.file = file;
  ASSIGN_OR_RETURN(problem.screens, FromTsv(file));
  absl::StatusOr<std::pair<std::string, v1::Problem>> parsed = ProblemOf(problem.screens);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", parsed.status().message()));
  }
  problem.family = parsed->first;
  // By name, one order for every problem of the family.
  const std::map<std::string, int64_t> dims(parsed->second.dims().begin(),
                                            parsed->second.dims().end());
  std::vector<int64_t> dim_values;
  for (const auto& [name, value] : dims) dim_values.push_back(value);
  problem.features = service::ProblemFeatures(dim_values, DTypeBytes(parsed->second.dtype()));
  ASSIGN_OR_RETURN(const std::vector<float> launch,
                   DerivedOf(problem.screens, derived.families, derived.sms));
  const size_t params = problem.screens.params.size();
  problem.variant_columns = static_cast<int64_t>(params) + service::kLaunchFeatures;
  for (size_t i = 0; i < problem.screens.variants.size(); ++i) {
    const ScreenedVariant& v = problem.screens.variants[i];
    for (int64_t value : v.values) problem.variants.push_back(static_cast<float>(value));
    const auto first = launch.begin() + static_cast<std::ptrdiff_t>(i * service::kLaunchFeatures);
    problem.variants.insert(problem.variants.end(), first, first + service::kLaunchFeatures);
    if (v.median_us > 0 && (problem.best_index < 0 || v.median_us < problem.best)) {
      problem.best = v.median_us;
      problem.best_index = static_cast<int64_t>(i);
    }
  }
  if (problem.best_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no variant validated"));
  }
  return problem;
}

int PredictCommand(const std::vector<std::string>& files, const Derived& derived,
                   double floor_median, double floor_within_10pct, uint64_t seed, double noise,
                   int64_t candidates) {
  // Problems by family and params: a predictor learns from the same columns.
  std::map<std::string, std::vector<Problem>> families;
  for (const std::string& file : files) {
    absl::StatusOr<Problem> problem = LoadProblem(file, derived);
    if (!problem.ok()) {
      std::cerr << "autotune-search-replay: " << problem.status().message() << "\n";
      return 2;
    }
    const std::string key =
        absl::StrCat(problem->family, " ", absl::StrJoin(problem->screens.params, ","));
    families[key].push_back(*std::move(problem));
  }
  std::printf("%-52s %8s %9s %9s %9s  %s\n", "problem (left out)", "variants", "predicted",
              "nearest", "default", "predicted config");
  bool below = false;
  for (const auto& [key, problems] : families) {
    if (problems.size() < 2) {
      std::fprintf(stderr, "autotune-search-replay: %s: one problem, nothing to learn from\n",
                   key.c_str());
      return 2;
    }
    std::vector<double> predicted_scores, nearest_scores, default_scores;
    for (size_t out = 0; out < problems.size(); ++out) {
      const Problem& left = problems[out];
      service::ConfigPredictor::Training training(static_cast<int64_t>(left.features.size()),
                                                  left.variant_columns);
      // What the predictor learns from, seen through a screen's noise of
      // its own (drawn from the seed and the problem left out); the scores
      // use the stored medians.
      std::mt19937_64 random(seed * 1000003 + out);
      std::normal_distribution<double> normal;
      size_t nearest = out;
      double nearest_distance = std::numeric_limits<double>::infinity();
      // With `candidates`: the configs among the fastest `candidates` of
      // some other problem (by their stored medians), the only ones ranked.
      std::set<std::vector<int64_t>> shortlist;
      for (size_t i = 0; i < problems.size(); ++i) {
        if (i == out) continue;
        const Problem& other = problems[i];
        if (candidates > 0) {
          std::vector<const ScreenedVariant*> fastest;
          for (const ScreenedVariant& v : other.screens.variants) {
            if (v.median_us > 0) fastest.push_back(&v);
          }
          const size_t kept = std::min(fastest.size(), static_cast<size_t>(candidates));
          std::partial_sort(fastest.begin(), fastest.begin() + static_cast<std::ptrdiff_t>(kept),
                            fastest.end(), [](const ScreenedVariant* a, const ScreenedVariant* b) {
                              return a->median_us < b->median_us;
                            });
          for (size_t k = 0; k < kept; ++k) shortlist.insert(fastest[k]->values);
        }
        for (size_t v = 0; v < other.screens.variants.size(); ++v) {
          const absl::Span<const float> variant =
              absl::MakeConstSpan(other.variants)
                  .subspan(v * other.variant_columns, other.variant_columns);
          training.Add(other.features, variant,
                       other.screens.variants[v].median_us * std::exp(noise * normal(random)));
        }
        double distance = 0;
        for (size_t f = 0; f < left.features.size(); ++f) {
          const double d = left.features[f] - other.features[f];
          // The dtype (the last feature) counts after every dim.
          distance += (f + 1 == left.features.size() ? 1e-3 : 1.0) * d * d;
        }
        if (distance < nearest_distance) {
          nearest_distance = distance;
          nearest = i;
        }
      }
      std::optional<service::ConfigPredictor> predictor =
          service::ConfigPredictor::Fit(training, seed);
      std::optional<std::vector<double>> guesses;
      if (predictor) guesses = predictor->Predict(left.features, left.variants);
      if (!guesses) {
        std::cerr << "autotune-search-replay: " << left.file << ": the predictor failed\n";
        return 2;
      }
      size_t pick = static_cast<size_t>(std::min_element(guesses->begin(), guesses->end()) -
                                        guesses->begin());
      if (!shortlist.empty()) {
        bool found = false;
        for (size_t v = 0; v < guesses->size(); ++v) {
          if (shortlist.count(left.screens.variants[v].values) == 0) continue;
          if (!found || (*guesses)[v] < (*guesses)[pick]) pick = v;
          found = true;
        }
      }
      const auto score = [&](double median) { return median > 0 ? left.best / median : 0.0; };
      const double predicted = score(left.screens.variants[pick].median_us);
      const Problem& near = problems[nearest];
      const double nearest_score = score(MedianOf(
          left.screens, near.screens.variants[static_cast<size_t>(near.best_index)].values));
      const double default_score = left.screens.default_values.empty()
                                       ? 0.0
                                       : score(MedianOf(left.screens, left.screens.default_values));
      predicted_scores.push_back(predicted);
      nearest_scores.push_back(nearest_score);
      default_scores.push_back(default_score);
      std::vector<std::string> config;
      for (size_t p = 0; p < left.screens.params.size(); ++p) {
        config.push_back(
            absl::StrCat(left.screens.params[p], "=", left.screens.variants[pick].values[p]));
      }
      std::printf("%-52s %8zu %8.1f%% %8.1f%% %8.1f%%  %s\n",
                  left.screens.problem.substr(0, 52).c_str(), left.screens.variants.size(),
                  100 * predicted, 100 * nearest_score, 100 * default_score,
                  absl::StrJoin(config, ",").c_str());
    }
    const auto within = [](const std::vector<double>& scores) {
      return absl::c_count_if(scores, [](double s) { return s >= 1 / 1.1; });
    };
    const size_t n = problems.size();
    std::printf(
        "%s: %zu problems: predicted median %.1f%%, %lld within 10%%; nearest median %.1f%%, "
        "%lld; default median %.1f%%, %lld\n",
        key.c_str(), n, 100 * Median(predicted_scores),
        static_cast<long long>(within(predicted_scores)), 100 * Median(nearest_scores),
        static_cast<long long>(within(nearest_scores)), 100 * Median(default_scores),
        static_cast<long long>(within(default_scores)));
    if (Median(predicted_scores) < floor_median ||
        static_cast<double>(within(predicted_scores)) <
            floor_within_10pct * static_cast<double>(n)) {
      std::fprintf(stderr, "autotune-search-replay: %s: the predictions fell below the floor\n",
                   key.c_str());
      below = true;
    }
  }
  std::printf(
      "predicted / nearest / default: the exhaustive best over the stored median of the config "
      "the predictor ranked first (fitted on the family's other problems) / the best config of "
      "the nearest other problem / the family's default config, for the problem left out (0 "
      "when that config did not validate there); within 10%%: scores of at least 1/1.1\n");
  return below ? 1 : 0;
}

}  // namespace
}  // namespace autotune

int main(int argc, char** argv) {
  CLI::App app{"Replays the daemon's searches over stored exhaustive screens (no GPU)"};
  app.require_subcommand(1);
  std::string show_json, default_config;
  CLI::App* convert = app.add_subcommand(
      "convert", "Writes the screens of `autotune show --json` output as a screens file (.tsv)");
  convert->add_option("show_json", show_json, "`autotune show --json` output")->required();
  convert->add_option("--default", default_config,
                      "The family's default config, NAME=value,... (to start random from it)");
  std::vector<std::string> files;
  std::string search = "random";
  int64_t max_variants = 0;
  double fraction = 0;
  int seeds = 8;
  double floor = 0;
  CLI::App* run = app.add_subcommand("run", "Runs a search over screens files, many seeds each");
  run->add_option("screens", files, "Screens files (.tsv)")->required();
  run->add_option("--search", search, "exhaustive, random or model");
  run->add_option("--max-variants", max_variants,
                  "Budget: at most this many variants (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--fraction", fraction, "Budget: at most this fraction of the space (0: all)")
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--seeds", seeds, "Runs per problem, seeds F..F+N-1")
      ->check(CLI::Range(1, 100000));
  int first_seed = 1;
  run->add_option("--first-seed", first_seed, "F, the first seed (default 1)")
      ->check(CLI::Range(1, 1000000));
  bool trace = false;
  run->add_flag("--trace", trace, "Print each round of each run: its size and best");
  int64_t derived_sms = 0;
  run->add_option("--derived-sms", derived_sms,
                  "Give the model each variant's launch features (blocks, waves, ...) on a GPU "
                  "of this many SMs (132: H100, H200), from the families of --kernels")
      ->check(CLI::Range(0, 1000));
  std::string kernels_dir = AUTOTUNE_REPLAY_KERNELS_DIR;
  run->add_option("--kernels", kernels_dir, "The folder of the screens' families (--derived-sms)")
      ->capture_default_str();
  run->add_option("--floor-within-1pct", floor,
                  "Exit 1 when fewer of a problem's runs than this fraction end within 1%")
      ->check(CLI::Range(0.0, 1.0));
  double noise = 0;
  run->add_option("--noise", noise,
                  "Each run's screen sees every median times exp(S * N(0,1)), drawn from its seed")
      ->check(CLI::Range(0.0, 1.0));
  autotune::service::CandidateRule rule;
  run->add_option("--serial-candidates", rule.max_count,
                  "The most screened variants a run sends to the serial phase")
      ->capture_default_str()
      ->check(CLI::Range(1, autotune::service::kMaxSerialCandidates));
  double floor_stable = 0;
  run->add_option("--floor-stable", floor_stable,
                  "Exit 1 when fewer of a problem's runs than this fraction choose the same "
                  "config or one within 0.5% of it")
      ->check(CLI::Range(0.0, 1.0));
  std::vector<std::string> predict_files;
  CLI::App* predict = app.add_subcommand(
      "predict", "Leaves each problem out in turn and predicts its fastest config from the others");
  predict->add_option("screens", predict_files, "Screens files (.tsv)")->required();
  int64_t predict_sms = 132;
  predict->add_option("--sms", predict_sms, "The GPU's SMs, for the launch features")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  predict->add_option("--kernels", kernels_dir, "The folder of the screens' families")
      ->capture_default_str();
  double floor_median = 0, floor_within = 0;
  predict
      ->add_option("--floor-median", floor_median,
                   "Exit 1 when a family's median predicted score is below this")
      ->check(CLI::Range(0.0, 1.0));
  predict
      ->add_option("--floor-within-10pct", floor_within,
                   "Exit 1 when fewer of a family's problems than this fraction have a "
                   "prediction within 10% of the best")
      ->check(CLI::Range(0.0, 1.0));
  uint64_t predict_seed = 1;
  predict->add_option("--seed", predict_seed, "The predictor's seed, and the noise's")
      ->capture_default_str();
  double predict_noise = 0;
  predict
      ->add_option("--noise", predict_noise,
                   "The predictor learns from every median times exp(S * N(0,1)), drawn from "
                   "the seed")
      ->check(CLI::Range(0.0, 1.0));
  int64_t predict_candidates = 0;
  predict
      ->add_option("--candidates", predict_candidates,
                   "Rank only the configs among the K fastest of some other problem (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  CLI11_PARSE(app, argc, argv);
  if (predict->parsed()) {
    absl::StatusOr<std::vector<autotune::v1::KernelFamily>> families =
        autotune::kernels::LoadFamilyDirectory(kernels_dir);
    if (!families.ok()) {
      std::cerr << "autotune-search-replay: " << families.status().message() << "\n";
      return 2;
    }
    autotune::Derived derived{.families = *std::move(families), .sms = predict_sms};
    return autotune::PredictCommand(predict_files, derived, floor_median, floor_within,
                                    predict_seed, predict_noise, predict_candidates);
  }
  if (convert->parsed()) {
    absl::StatusOr<autotune::Screens> screens = autotune::FromShowJson(show_json, default_config);
    if (!screens.ok()) {
      std::cerr << "autotune-search-replay: " << screens.status().message() << "\n";
      return 2;
    }
    std::cout << autotune::ToTsv(*screens);
    return 0;
  }
  autotune::Derived derived;
  derived.sms = derived_sms;
  if (derived_sms > 0) {
    absl::StatusOr<std::vector<autotune::v1::KernelFamily>> families =
        autotune::kernels::LoadFamilyDirectory(kernels_dir);
    if (!families.ok()) {
      std::cerr << "autotune-search-replay: " << families.status().message() << "\n";
      return 2;
    }
    derived.families = *std::move(families);
  }
  return autotune::RunCommand(files, search, max_variants, fraction, first_seed, seeds, floor,
                              noise, rule, floor_stable, trace, derived);
}
