#include "client/cli/cli_flags.h"

#include <cstdint>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "proto/problem.h"
#include "service/defaults.h"

namespace autotune::client {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("invalid ", flag, " '", value, "': ", why));
}

// Keeps the first error the text-format parser reports, with its position.
class FirstErrorCollector final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

}  // namespace

absl::StatusOr<v1::Problem> ProblemFromFlags(const ProblemFlags& flags) {
  if (flags.dims.empty()) {
    return absl::InvalidArgumentError("--dims is required (e.g. --dims batch=8,heads=32)");
  }
  if (flags.dtype.empty())
    return absl::InvalidArgumentError("--dtype is required (e.g. --dtype bf16)");
  absl::StatusOr<std::map<std::string, int64_t>> dims = ParseDims(flags.dims);
  if (!dims.ok()) return FlagError("--dims", flags.dims, dims.status().message());
  if (dims->empty())
    return FlagError("--dims", flags.dims, "no dimensions; expected name=value,...");
  absl::StatusOr<v1::DType> dtype = ParseDType(flags.dtype);
  if (!dtype.ok()) {
    return FlagError("--dtype", flags.dtype, absl::StrCat("expected one of ", DTypeNameList()));
  }
  v1::Problem problem;
  problem.mutable_dims()->insert(dims->begin(), dims->end());
  problem.set_dtype(*dtype);
  return problem;
}

absl::StatusOr<v1::EntryFilter> FilterFromFlags(const FilterFlags& flags) {
  v1::EntryFilter filter;
  filter.set_family(flags.family);
  filter.set_family_hash(flags.hash);
  filter.set_device(flags.device);
  // --dims and --dtype select apart or together.
  if (!flags.problem.dims.empty()) {
    absl::StatusOr<std::map<std::string, int64_t>> dims = ParseDims(flags.problem.dims);
    if (!dims.ok()) return FlagError("--dims", flags.problem.dims, dims.status().message());
    if (dims->empty()) {
      return FlagError("--dims", flags.problem.dims, "no dimensions; expected name=value,...");
    }
    filter.mutable_problem()->mutable_dims()->insert(dims->begin(), dims->end());
  }
  if (!flags.problem.dtype.empty()) {
    absl::StatusOr<v1::DType> dtype = ParseDType(flags.problem.dtype);
    if (!dtype.ok()) {
      return FlagError("--dtype", flags.problem.dtype,
                       absl::StrCat("expected one of ", DTypeNameList()));
    }
    filter.mutable_problem()->set_dtype(*dtype);
  }
  if (!flags.nvrtc_older_than.empty()) {
    if (!NvrtcVersionNumber(flags.nvrtc_older_than).ok()) {
      return FlagError("--nvrtc-older-than", flags.nvrtc_older_than,
                       "expected MAJOR.MINOR, e.g. 12.8");
    }
    filter.set_nvrtc_older_than(flags.nvrtc_older_than);
  }
  return filter;
}

bool FilterIsEmpty(const v1::EntryFilter& filter) {
  return filter.family().empty() && filter.family_hash().empty() && filter.device().empty() &&
         !filter.has_problem() && filter.nvrtc_older_than().empty();
}

absl::Status ParseShardFlag(absl::string_view text, v1::JobOptions& options) {
  const size_t slash = text.find('/');
  int32_t index = 0;
  int32_t count = 0;
  if (slash == absl::string_view::npos || !absl::SimpleAtoi(text.substr(0, slash), &index) ||
      !absl::SimpleAtoi(text.substr(slash + 1), &count)) {
    return FlagError("--shard", text, "expected I/N, e.g. 0/4");
  }
  if (count < 1) return FlagError("--shard", text, "the shard count must be at least 1");
  if (index < 0 || index >= count) {
    return FlagError("--shard", text, absl::StrCat("the shard index must be in 0..", count - 1));
  }
  options.set_shard_index(index);
  options.set_shard_count(count);
  return absl::OkStatus();
}

absl::Status ParseSearchFlags(absl::string_view strategy, absl::string_view budget, uint64_t seed,
                              v1::SearchOptions& search) {
  search.Clear();
  if (!strategy.empty()) {
    const std::string upper = absl::AsciiStrToUpper(strategy);
    v1::SearchStrategy parsed = v1::SEARCH_STRATEGY_UNSPECIFIED;
    if (!v1::SearchStrategy_Parse(upper, &parsed) || parsed == v1::SEARCH_STRATEGY_UNSPECIFIED) {
      return FlagError("--search", strategy, "expected exhaustive, random or model");
    }
    search.set_strategy(parsed);
  }
  if (!budget.empty()) {
    absl::string_view number = budget;
    absl::Duration duration;
    if (!budget.empty() && absl::ascii_isalpha(budget.back()) && budget.back() != '%') {
      // A time: "90s", "5m", "1h30m".
      if (!absl::ParseDuration(budget, &duration) || duration <= absl::ZeroDuration() ||
          duration == absl::InfiniteDuration()) {
        return FlagError("--budget", budget, "a time must be positive, like 90s, 5m or 1h30m");
      }
      if (duration > absl::Seconds(service::kMaxSearchSeconds)) {
        return FlagError("--budget", budget,
                         absl::StrCat("a time is at most ", service::kMaxSearchSeconds / 3600,
                                      "h (a day of searching one problem)"));
      }
      search.set_max_seconds(absl::ToDoubleSeconds(duration));
    } else if (absl::ConsumeSuffix(&number, "%")) {
      double percent = 0;
      if (!absl::SimpleAtod(number, &percent) || !(percent > 0 && percent <= 100)) {
        return FlagError("--budget", budget, "a share of the space must be in (0%, 100%]");
      }
      search.set_max_fraction(percent / 100);
    } else {
      int64_t count = 0;
      if (!absl::SimpleAtoi(number, &count) || count < 1) {
        return FlagError("--budget", budget,
                         "expected a count of variants (at least 1), a share like 5% or a time "
                         "like 90s");
      }
      search.set_max_variants(count);
    }
  }
  search.set_seed(seed);
  return absl::OkStatus();
}

absl::StatusOr<v1::Manifest> ParseManifestText(absl::string_view text, absl::string_view name) {
  v1::Manifest manifest;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &manifest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest ", name, ":", errors.error().empty() ? " cannot be parsed" : errors.error()));
  }
  if (manifest.items().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest ", name, " lists no items; nothing to tune"));
  }
  return manifest;
}

}  // namespace autotune::client
