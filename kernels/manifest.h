// Warmup manifests: which problems of which families to tune, as a
// v1::Manifest in protobuf text format, e.g.
//
//   arch: "sm_90"
//   items {
//     family: "axpy"
//     dims { name: "n" values: [4096, 1048576] }
//     dtypes: [FLOAT32, FLOAT16]
//   }
//
//   ASSIGN_OR_RETURN(v1::Manifest manifest, LoadManifestFile("warmup.textproto"));
//   ASSIGN_OR_RETURN(std::vector<ManifestProblem> problems,
//                    ExpandManifest(manifest, families_by_name));
//   ASSIGN_OR_RETURN(problems, ShardProblems(problems, shard_index, shard_count));
//
// Thread-safety: all functions are safe to call concurrently.
#ifndef AUTOTUNE_KERNELS_MANIFEST_H_
#define AUTOTUNE_KERNELS_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"

namespace autotune::kernels {

// Manifests expanding to more problems than this are rejected.
inline constexpr int64_t kMaxManifestProblems = int64_t{1} << 20;

struct ManifestProblem {
  std::string family;
  v1::Problem problem;
  int item = 0;  // the manifest item it came from (the first, when several name it)
};

// Reads and checks the manifest at `path`: what can be checked without the
// families (ValidateManifest below). NOT_FOUND / PERMISSION_DENIED when the
// file cannot be read; INVALID_ARGUMENT "path:line:column: message" for
// syntax errors and "path:line: items[0].dims[1].values[2]: 0 is not
// positive" for the rest (the line of the field or of its closest enclosing
// field present in the file).
absl::StatusOr<v1::Manifest> LoadManifestFile(const std::string& path);

// The checks that need no families, for a manifest from any source:
// at least one item; each item names a family ([a-z][a-z0-9_]*); dims have
// identifier names, each once per item, with at least one value, every
// value positive and listed once; dtypes known, not DTYPE_UNSPECIFIED, each
// once; arch empty or sm_<digits>[a-z] ("sm_90", "sm_90a").
// INVALID_ARGUMENT "origin: field: message" ("field: message" when origin
// is empty).
absl::Status ValidateManifest(const v1::Manifest& manifest, absl::string_view origin);

// What a manifest stands for, counted by arithmetic from its items and the
// families' descriptors: no problem is built, so a manifest of millions is
// counted at the cost of reading it. Counts saturate at INT64_MAX.
struct ManifestCount {
  struct Item {
    const v1::KernelFamily* family = nullptr;  // into the families given
    std::vector<v1::DType> dtypes;             // its own, or all its family's
    int64_t problems_per_dtype = 0;            // the product of its dims' value counts
  };
  std::vector<Item> items;  // parallel to manifest.items
  // Over every item; a problem listed by two items counts twice, so this
  // bounds what ExpandManifest gives from above.
  int64_t problems = 0;
};

// Checks the manifest as ExpandManifest does, with the same errors, and
// counts it. No limit is applied: the caller compares the counts with its
// own (ExpandManifest with kMaxManifestProblems, a job with the daemon's).
absl::StatusOr<ManifestCount> CountManifest(
    const v1::Manifest& manifest,
    const absl::flat_hash_map<std::string, v1::KernelFamily>& families);

// INVALID_ARGUMENT "items: more than 1048576 problems (4194304)" when the
// count is over kMaxManifestProblems, the limit of every manifest.
absl::Status CheckManifestCount(const ManifestCount& count);

// A saturated count as people read it: "123", or "more than 2^63".
std::string CountText(int64_t count);

// a * b and a + b for counts >= 0, INT64_MAX where they would overflow.
int64_t SaturatingMultiply(int64_t a, int64_t b);
int64_t SaturatingAdd(int64_t a, int64_t b);

// Every problem of the manifest, in a deterministic order: items in order;
// within an item the cartesian product of its dims' values, the first
// listed dim varying slowest, each dim's values in order; dtypes innermost.
// An item without dtypes stands for all of its family's dtypes, in the
// family's order. A problem listed again by a later item is kept once, at
// its first place. INVALID_ARGUMENT from ValidateManifest (no origin), and
// naming the field:
//   "items[2].family: unknown family 'foo' (known: axpy, ...)"
//   "items[0].dims[1]: 'm' is not a dim of family 'axpy' (dims: n)"
//   "items[0].dims: missing 'n' of family 'axpy'"
//   "items[0].dims[0].values[1]: 5000 is above the max 4096 of dim 'n'"
//   "items[0].dtypes[1]: fp64 is not supported by family 'axpy' (fp32, fp16)"
//   "items: more than 1048576 problems (4194304)" (kMaxManifestProblems,
//   counted by CountManifest before any problem is built)
absl::StatusOr<std::vector<ManifestProblem>> ExpandManifest(
    const v1::Manifest& manifest,
    const absl::flat_hash_map<std::string, v1::KernelFamily>& families);

// The shard (0..count-1) of a problem: the first 8 bytes of
// sha256("family\ncanonical dims\ndtype name") as a big-endian integer,
// modulo count. It depends on the problem alone, not on the other problems
// or their order, and not on the process, so every machine of a sharded
// warmup agrees on it.
int ShardOf(const ManifestProblem& problem, int count);

// The problems of shard `index` out of `count`, in their original order.
// Over index = 0..count-1 the shards are disjoint and together hold every
// problem. count 0 means no sharding (index must be 0): all problems.
// INVALID_ARGUMENT "shard index 3 is not below the shard count 3",
// "shard count -1 is negative".
absl::StatusOr<std::vector<ManifestProblem>> ShardProblems(
    const std::vector<ManifestProblem>& problems, int index, int count);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_MANIFEST_H_
