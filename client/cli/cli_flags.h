// Flag values of the `autotune` CLI and their translation into requests.
//
// CLI11 fills these structs with the text people typed; the functions here
// check it and build the protobuf messages. Every error is INVALID_ARGUMENT
// naming the flag and the value ("invalid --dims 'batch=x': dimension 'batch'
// has value 'x', not an integer"): the CLI reports them as usage errors.
#ifndef AUTOTUNE_CLIENT_CLI_CLI_FLAGS_H_
#define AUTOTUNE_CLIENT_CLI_CLI_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

struct ProblemFlags {
  std::string dims;   // "batch=8,heads=32,dim=128"
  std::string dtype;  // "bf16"
};

// The selectors shared by ls, invalidate and export. Empty = not given.
struct FilterFlags {
  std::string family;
  std::string hash;
  std::string device;
  ProblemFlags problem;          // either, both or neither
  std::string nvrtc_older_than;  // "12.8"
};

// Both flags are required.
absl::StatusOr<v1::Problem> ProblemFromFlags(const ProblemFlags& flags);

absl::StatusOr<v1::EntryFilter> FilterFromFlags(const FilterFlags& flags);

// True when the filter selects everything.
bool FilterIsEmpty(const v1::EntryFilter& filter);

// "I/N" with 0 <= I < N: sets shard_index and shard_count of `options`.
absl::Status ParseShardFlag(absl::string_view text, v1::JobOptions& options);

// --search (exhaustive, random, model; any case), --budget (a count "500",
// a share "5%" or a time "90s", "5m") and --seed into `search`, which is
// cleared first and left empty when none is given (seed 0).
absl::Status ParseSearchFlags(absl::string_view strategy, absl::string_view budget, uint64_t seed,
                              v1::SearchOptions& search);

// A warmup manifest: v1::Manifest in protobuf text format. Errors name the
// file and the line and column of the first problem, or say that it lists
// no items.
absl::StatusOr<v1::Manifest> ParseManifestText(absl::string_view text, absl::string_view name);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_CLI_FLAGS_H_
