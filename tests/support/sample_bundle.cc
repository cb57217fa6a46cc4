#include "tests/support/sample_bundle.h"

#include <sqlite3.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "base/timestamp.h"
#include "proto/bundle_parts.h"
#include "proto/problem.h"

namespace autotune::testing {
namespace {

constexpr int64_t kBlocks[] = {64, 128, 256, 512};
constexpr int64_t kElemsPerThread[] = {1, 2, 4};
constexpr v1::DType kDTypes[] = {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16};

int64_t ElementBytes(v1::DType dtype) { return dtype == v1::FLOAT32 ? 4 : 2; }

bool Contains(const auto& values, const auto& value) {
  return std::find(std::begin(values), std::end(values), value) != std::end(values);
}

// SplitMix64: a bijection on 64-bit words, so distinct seeds give distinct
// first words and the synthetic binaries of a bundle never collide.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string SyntheticBytes(uint64_t seed, int64_t size) {
  std::string bytes;
  bytes.reserve(static_cast<size_t>(size) + 8);
  uint64_t state = seed;
  while (static_cast<int64_t>(bytes.size()) < size) {
    uint64_t word = SplitMix64(state);
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((word >> (8 * i)) & 0xff));
  }
  bytes.resize(static_cast<size_t>(size));
  return bytes;
}

uint64_t VariantSeed(const Variant& v) {
  return (static_cast<uint64_t>(v.dtype) << 32) | (static_cast<uint64_t>(v.block) << 8) |
         static_cast<uint64_t>(v.elems_per_thread);
}

bool IsElf(std::string_view bytes) {
  return bytes.substr(0, 4) ==
         "\x7f"
         "ELF";
}

absl::Status CheckEntry(const SampleEntry& e, size_t index) {
  auto bad = [index](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("entries[", index, "]: ", what));
  };
  if (e.batch <= 0 || e.n <= 0) {
    return bad(absl::StrCat("batch and n must be positive, got batch=", e.batch, " n=", e.n));
  }
  if (!Contains(kDTypes, e.variant.dtype)) {
    return bad(absl::StrCat("vector_scale has no dtype ", v1::DType_Name(e.variant.dtype)));
  }
  if (!Contains(kBlocks, e.variant.block)) {
    return bad(absl::StrCat("BLOCK=", e.variant.block, " is not one of 64, 128, 256, 512"));
  }
  if (!Contains(kElemsPerThread, e.variant.elems_per_thread)) {
    return bad(
        absl::StrCat("ELEMS_PER_THREAD=", e.variant.elems_per_thread, " is not one of 1, 2, 4"));
  }
  if (e.device.name().empty()) return bad("device name is empty");
  if (e.median_us < 0) return bad("median_us is negative");
  return absl::OkStatus();
}

v1::Binary MakeBinary(std::string cubin, const v1::KernelFamily& family,
                      const std::string& family_hash, const SampleBundleOptions& options) {
  v1::Binary binary;
  binary.set_sha256(Sha256Hex(cubin));
  if (options.cubin_kind == CubinKind::kSynthetic) {
    binary.set_compile_log(absl::StrCat("synthetic test data: ", cubin.size(),
                                        " deterministic bytes, not a loadable cubin"));
  }
  binary.set_cubin(std::move(cubin));
  binary.set_nvrtc_version(options.nvrtc_version);
  binary.set_arch(options.arch);
  binary.set_family(family.name());
  binary.set_family_hash(family_hash);
  return binary;
}

}  // namespace

v1::Device SampleDevice() {
  v1::Device device;
  device.set_name("NVIDIA H200");
  device.set_compute_capability(90);
  device.set_sm_count(132);
  return device;
}

std::string VariantName(const Variant& variant) {
  // Debian's Abseil has its own string_view: hand StrCat a std::string.
  return absl::StrCat(std::string(DTypeName(variant.dtype)), " BLOCK=", variant.block,
                      " ELEMS_PER_THREAD=", variant.elems_per_thread);
}

v1::KernelFamily VectorScaleFamily() {
  v1::KernelFamily f;
  f.set_name(std::string(kVectorScaleFamily));
  f.set_description(
      "y = alpha * x over batch*n elements; BLOCK threads per block, ELEMS_PER_THREAD "
      "elements per thread, element type from -DAUTOTUNE_DTYPE. A sample family: the timings "
      "in sample bundles are illustrative, not measured.");
  f.set_source(std::string(VectorScaleSource()));
  f.set_kernel_name("vector_scale");

  auto add_param = [&f](std::string name, std::initializer_list<int64_t> values) {
    v1::TunableParameter* p = f.add_params();
    p->set_name(std::move(name));
    for (int64_t v : values) p->add_values(v);
  };
  add_param("BLOCK", {64, 128, 256, 512});
  add_param("ELEMS_PER_THREAD", {1, 2, 4});
  (*f.mutable_default_config()->mutable_params())["BLOCK"] = 256;
  (*f.mutable_default_config()->mutable_params())["ELEMS_PER_THREAD"] = 1;

  v1::ProblemDimension* batch = f.add_dims();
  batch->set_name("batch");
  batch->set_bucketed(true);
  batch->set_min(1);
  v1::ProblemDimension* n = f.add_dims();
  n->set_name("n");
  n->set_bucketed(false);
  n->set_min(1);

  for (v1::DType dtype : kDTypes) f.add_dtypes(dtype);

  v1::Buffer* x = f.add_buffers();
  x->set_name("x");
  x->add_shape("batch*n");
  x->set_role(v1::IN);
  x->mutable_fill()->set_kind(v1::Fill::UNIFORM);
  x->mutable_fill()->set_low(-1.0);
  x->mutable_fill()->set_high(1.0);
  v1::Buffer* y = f.add_buffers();
  y->set_name("y");
  y->add_shape("batch*n");
  y->set_role(v1::OUT);

  v1::ScalarArgument* alpha = f.add_scalars();
  alpha->set_name("alpha");
  alpha->set_dtype(v1::FLOAT32);
  alpha->set_value("0.5");
  v1::ScalarArgument* count = f.add_scalars();
  count->set_name("count");
  count->set_dtype(v1::INT64);
  count->set_value("batch*n");

  f.mutable_launch()->add_grid("ceil(batch*n/(BLOCK*ELEMS_PER_THREAD))");
  f.mutable_launch()->add_block("BLOCK");
  f.set_binding(v1::DEFINES);

  v1::ReferenceKernel* reference = f.mutable_reference();
  reference->set_kernel_name("vector_scale_reference");
  reference->mutable_launch()->add_grid("ceil(batch*n/256)");
  reference->mutable_launch()->add_block("256");

  // Variants compute exactly what the reference does (fp32 math, one
  // rounding); the tolerances allow one rounding step of each type.
  auto add_tolerance = [&f](v1::DType dtype, double rtol, double atol) {
    v1::Tolerance* t = f.add_tolerances();
    t->set_dtype(dtype);
    t->set_rtol(rtol);
    t->set_atol(atol);
  };
  add_tolerance(v1::FLOAT32, 1e-6, 1e-7);
  add_tolerance(v1::FLOAT16, 1e-3, 1e-3);
  add_tolerance(v1::BFLOAT16, 8e-3, 8e-3);

  // x read once, y written once.
  f.set_bytes_per_call("2*batch*n*dtype_bytes");
  f.set_flops_per_call("batch*n");
  f.set_cache_state(v1::COLD);
  return f;
}

absl::StatusOr<v1::CacheBundle> MakeSampleBundle(const SampleBundleOptions& options) {
  if (options.cubin_kind == CubinKind::kSynthetic && options.synthetic_cubin_bytes < 8) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic_cubin_bytes must be at least 8, got ",
                                                   options.synthetic_cubin_bytes));
  }
  if (options.cubin_kind == CubinKind::kCompiled && options.synthetic_cubin_per_entry) {
    return absl::InvalidArgumentError("synthetic_cubin_per_entry needs CubinKind::kSynthetic");
  }

  const v1::KernelFamily family = VectorScaleFamily();
  const std::string family_hash = FamilyContentHash(family);
  const std::string tuned_at = TimestampMillis(options.tuned_at);

  v1::CacheBundle bundle;
  bundle.set_format_version(kBundleFormatVersion);
  v1::FamilyRecord* record = bundle.add_families();
  *record->mutable_family() = family;
  record->set_content_hash(family_hash);

  std::map<Variant, std::string> variant_sha;                      // binaries already in the bundle
  std::set<std::tuple<std::string, v1::DType, std::string>> seen;  // dims, dtype, device

  for (size_t i = 0; i < options.entries.size(); ++i) {
    const SampleEntry& e = options.entries[i];
    if (absl::Status s = CheckEntry(e, i); !s.ok()) return s;

    v1::Entry* entry = bundle.add_entries();
    entry->set_family(family.name());
    entry->set_family_hash(family_hash);
    auto& dims = *entry->mutable_problem()->mutable_dims();
    dims["batch"] = e.batch;
    dims["n"] = e.n;
    entry->mutable_problem()->set_dtype(e.variant.dtype);
    if (!seen.emplace(FormatDims(dims), e.variant.dtype, e.device.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", i, "]: a second entry for ", FormatDims(dims), " ",
                       std::string(DTypeName(e.variant.dtype)), " on ", e.device.name()));
    }
    *entry->mutable_device() = e.device;
    auto& params = *entry->mutable_config()->mutable_params();
    params["BLOCK"] = e.variant.block;
    params["ELEMS_PER_THREAD"] = e.variant.elems_per_thread;

    const int64_t count = e.batch * e.n;
    const int64_t per_block = e.variant.block * e.variant.elems_per_thread;
    entry->mutable_launch()->add_grid((count + per_block - 1) / per_block);
    entry->mutable_launch()->add_block(e.variant.block);

    // The binary: one per variant, or one per entry for synthetic bulk data.
    std::string sha;
    if (options.cubin_kind == CubinKind::kCompiled) {
      if (auto it = variant_sha.find(e.variant); it != variant_sha.end()) {
        sha = it->second;
      } else {
        auto cubin = options.cubins.find(e.variant);
        if (cubin == options.cubins.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("entries[", i, "]: no compiled cubin for ", VariantName(e.variant)));
        }
        if (!IsElf(cubin->second)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "entries[", i, "]: the cubin for ", VariantName(e.variant), " is not an ELF image"));
        }
        v1::Binary* binary = bundle.add_binaries();
        *binary = MakeBinary(cubin->second, family, family_hash, options);
        sha = binary->sha256();
        variant_sha.emplace(e.variant, sha);
      }
    } else if (options.synthetic_cubin_per_entry) {
      v1::Binary* binary = bundle.add_binaries();
      *binary = MakeBinary(SyntheticBytes(i, options.synthetic_cubin_bytes), family, family_hash,
                           options);
      sha = binary->sha256();
    } else if (auto it = variant_sha.find(e.variant); it != variant_sha.end()) {
      sha = it->second;
    } else {
      v1::Binary* binary = bundle.add_binaries();
      *binary = MakeBinary(SyntheticBytes(VariantSeed(e.variant), options.synthetic_cubin_bytes),
                           family, family_hash, options);
      sha = binary->sha256();
      variant_sha.emplace(e.variant, sha);
    }
    entry->set_binary_sha256(sha);

    entry->set_nvrtc_version(options.nvrtc_version);
    entry->set_arch(options.arch);
    if (e.median_us > 0) {
      entry->mutable_timing()->set_median_us(e.median_us);
      const double bytes = 2.0 * static_cast<double>(count) * ElementBytes(e.variant.dtype);
      entry->mutable_timing()->set_achieved_gbps(bytes / (e.median_us * 1e3));
      entry->mutable_timing()->set_achieved_tflops(static_cast<double>(count) /
                                                   (e.median_us * 1e6));
    }
    entry->set_phase(v1::IMPORTED);
    entry->set_tuned_at(tuned_at);
  }
  return bundle;
}

std::vector<SampleEntry> QuickstartEntries() {
  // Illustrative medians of the order a launch-bound copy takes on an H200.
  const std::pair<int64_t, double> batches[] = {{1, 2.4}, {8, 2.6}, {64, 3.3}};
  std::vector<SampleEntry> entries;
  for (const auto& [batch, median_us] : batches) {
    entries.push_back({.batch = batch,
                       .n = 4096,
                       .variant = kQuickstartVariant,
                       .device = SampleDevice(),
                       .median_us = median_us});
  }
  return entries;
}

absl::StatusOr<v1::CacheBundle> MakeSyntheticBundle(int64_t entries, int64_t cubin_bytes) {
  if (entries < 0) {
    return absl::InvalidArgumentError(absl::StrCat("entries must be >= 0, got ", entries));
  }
  std::vector<Variant> variants;
  for (int64_t block : kBlocks) {
    for (int64_t ept : kElemsPerThread)
      variants.push_back({.block = block, .elems_per_thread = ept});
  }
  constexpr int64_t kNs[] = {1024, 4096, 16384, 65536};
  constexpr int64_t kDTypeCount = std::size(kDTypes);
  constexpr int64_t kNCount = std::size(kNs);

  SampleBundleOptions options;
  options.cubin_kind = CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = cubin_bytes;
  options.synthetic_cubin_per_entry = true;
  options.entries.reserve(static_cast<size_t>(entries));
  for (int64_t i = 0; i < entries; ++i) {
    // (dtype, n, batch) is a mixed-radix spelling of i: every problem differs.
    SampleEntry e;
    e.variant = variants[static_cast<size_t>(i) % variants.size()];
    e.variant.dtype = kDTypes[i % kDTypeCount];
    e.n = kNs[(i / kDTypeCount) % kNCount];
    e.batch = 1 + i / (kDTypeCount * kNCount);
    // Bandwidth-bound at roughly 3 TB/s plus a 2 us floor; illustrative.
    e.median_us =
        2.0 + 2.0 * static_cast<double>(e.batch * e.n * ElementBytes(e.variant.dtype)) / 3e6;
    options.entries.push_back(std::move(e));
  }
  return MakeSampleBundle(options);
}

absl::Status CorruptEveryStoredBinary(const std::string& db_path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open(db_path.c_str(), &db);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    rc = sqlite3_exec(db, "UPDATE binaries SET cubin = randomblob(length(cubin))", nullptr, nullptr,
                      nullptr);
  }
  const std::string error = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
  sqlite3_close(db);
  if (rc != SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("cannot damage the binaries of ", db_path, ": ", error));
  }
  return absl::OkStatus();
}

}  // namespace autotune::testing
