// Sample cache contents for tests, benchmarks and the quick start: the
// `vector_scale` kernel family (tests/sample/vector_scale.cu) and bundles of
// entries for it, in the CacheBundle format that `autotune import` reads.
//
//   SampleBundleOptions options;
//   options.entries = QuickstartEntries();
//   options.cubins[kQuickstartVariant] = cubin_bytes;  // compiled by the caller
//   ASSIGN_OR_RETURN(v1::CacheBundle bundle, MakeSampleBundle(options));
//
// Timings in these bundles come from the caller and are illustrative: every
// entry is marked phase IMPORTED with no sample count, never as measured.
// Synthetic cubins are deterministic filler bytes for code that only stores
// and moves binaries; they are not ELF and cannot be loaded.
#ifndef AUTOTUNE_TESTS_SUPPORT_SAMPLE_BUNDLE_H_
#define AUTOTUNE_TESTS_SUPPORT_SAMPLE_BUNDLE_H_

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/autotune.pb.h"

namespace autotune::testing {

inline constexpr std::string_view kVectorScaleFamily = "vector_scale";

// The text of tests/sample/vector_scale.cu, embedded at build time.
std::string_view VectorScaleSource();

// The family descriptor, with the source text filled in.
v1::KernelFamily VectorScaleFamily();

// The device the sample entries are filed under: "NVIDIA H200", compute
// capability 90, 132 SMs.
v1::Device SampleDevice();

// What one cubin was compiled for: the element type and the two tunables.
struct Variant {
  v1::DType dtype = v1::BFLOAT16;
  int64_t block = 256;
  int64_t elems_per_thread = 2;
  friend auto operator<=>(const Variant&, const Variant&) = default;
};

// "bf16 BLOCK=256 ELEMS_PER_THREAD=2", for messages.
std::string VariantName(const Variant& variant);

// One best entry to put in a bundle.
struct SampleEntry {
  int64_t batch = 1;
  int64_t n = 4096;
  Variant variant;  // dtype of the problem and the chosen config
  v1::Device device = SampleDevice();
  double median_us = 0;  // stated by the caller, not measured; 0 = none
};

enum class CubinKind {
  // Real cubins compiled by the caller: `cubins` must hold one for every
  // variant the entries use, and each must be an ELF image.
  kCompiled,
  // Deterministic filler of `synthetic_cubin_bytes` bytes (at least 8), one
  // binary per variant, or one per entry with `synthetic_cubin_per_entry`.
  kSynthetic,
};

struct SampleBundleOptions {
  std::vector<SampleEntry> entries;
  CubinKind cubin_kind = CubinKind::kCompiled;
  std::map<Variant, std::string> cubins;   // kCompiled only
  int64_t synthetic_cubin_bytes = 0;       // kSynthetic only
  bool synthetic_cubin_per_entry = false;  // kSynthetic only
  std::string nvrtc_version = "13.0";
  std::string arch = "sm_90";
  absl::Time tuned_at = absl::Now();
};

// A bundle with the vector_scale family, the binaries the entries use (each
// once) and the entries, in the order given. INVALID_ARGUMENT, naming the
// entry, for a value outside the family (dtype, BLOCK, ELEMS_PER_THREAD, a
// non-positive dim), two entries with the same problem and device, a missing
// or non-ELF compiled cubin, or a bad synthetic size.
absl::StatusOr<v1::CacheBundle> MakeSampleBundle(const SampleBundleOptions& options);

// The variant the quick start compiles with nvcc and the entries it imports:
// bf16, n = 4096, batch 1, 8 and 64, all with that variant.
inline constexpr Variant kQuickstartVariant{
    .dtype = v1::BFLOAT16, .block = 256, .elems_per_thread = 2};
std::vector<SampleEntry> QuickstartEntries();

// `entries` entries over distinct problems (batch x n x dtype, configs
// cycling through the parameter space), each with its own synthetic cubin of
// `cubin_bytes` bytes: for benchmarks of import, lookup and export.
absl::StatusOr<v1::CacheBundle> MakeSyntheticBundle(int64_t entries, int64_t cubin_bytes);

// Replaces the bytes of every cubin stored in the SQLite file `db_path`
// with random ones of the same length, behind the store's back: what a
// damaged disk does. INTERNAL naming SQLite's error when it cannot.
absl::Status CorruptEveryStoredBinary(const std::string& db_path);

}  // namespace autotune::testing

#endif  // AUTOTUNE_TESTS_SUPPORT_SAMPLE_BUNDLE_H_
