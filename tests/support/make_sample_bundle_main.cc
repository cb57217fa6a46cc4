// autotune-make-sample: writes a vector_scale sample bundle as protobuf JSON,
// the file format `autotune import` reads.
//
//   # the quick start's bundle, around a cubin compiled with nvcc:
//   autotune-make-sample --cubin vector_scale.cubin --out sample.json
//   # bulk data for benchmarks, synthetic (not loadable) cubins:
//   autotune-make-sample --synthetic-entries 10000 --cubin-bytes 16384 --out big.json
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "google/protobuf/util/json_util.h"
#include "tests/support/sample_bundle.h"

namespace {

namespace v1 = autotune::v1;
using autotune::testing::CubinKind;

// Atomically (beside `path`, then renamed), so an importer never reads half
// a file.
absl::Status WriteFile(const std::string& path, const std::string& contents) {
  if (path == "-") {
    std::cout << contents;
    std::cout.flush();
    return std::cout ? absl::OkStatus() : absl::DataLossError("cannot write stdout");
  }
  return autotune::WriteFileAtomically(path, contents, "bundle");
}

absl::StatusOr<std::string> ToJson(const v1::CacheBundle& bundle) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(bundle, &json, options);
  if (!status.ok()) return absl::InternalError(absl::StrCat("JSON: ", status.ToString()));
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cubin_path;
  std::string out_path;
  std::string nvrtc_version = "13.0";
  int64_t synthetic_entries = 0;
  int64_t cubin_bytes = 4096;

  CLI::App app{
      "autotune-make-sample: writes a vector_scale sample bundle (protobuf JSON) for "
      "`autotune import`. Its timings are illustrative, not measured."};
  auto* cubin_opt = app.add_option(
      "--cubin", cubin_path,
      "cubin of tests/sample/vector_scale.cu compiled for sm_90 with -DBLOCK=256 "
      "-DELEMS_PER_THREAD=2 -DAUTOTUNE_DTYPE=__nv_bfloat16; the bundle gets bf16 entries for "
      "batch 1, 8 and 64 at n=4096 on an NVIDIA H200");
  auto* synthetic_opt = app.add_option(
      "--synthetic-entries", synthetic_entries,
      "instead of --cubin: this many entries over distinct problems, each with its own "
      "synthetic (not loadable) cubin");
  auto* bytes_opt = app.add_option("--cubin-bytes", cubin_bytes,
                                   "size of each synthetic cubin (default 4096, at least 8)");
  app.add_option("--nvrtc-version", nvrtc_version,
                 "CUDA version recorded with the binaries and entries (default 13.0)");
  app.add_option("--out", out_path, "bundle file to write; - for stdout")->required();
  cubin_opt->excludes(synthetic_opt);
  bytes_opt->needs(synthetic_opt);
  CLI11_PARSE(app, argc, argv);

  if (cubin_path.empty() && synthetic_opt->count() == 0) {
    std::cerr << "autotune-make-sample: give --cubin FILE or --synthetic-entries N\n";
    return 2;
  }

  absl::StatusOr<v1::CacheBundle> bundle;
  if (!cubin_path.empty()) {
    absl::StatusOr<std::string> cubin = autotune::ReadFile(cubin_path, "--cubin");
    if (!cubin.ok()) {
      std::cerr << "autotune-make-sample: " << cubin.status().message() << "\n";
      return 1;
    }
    autotune::testing::SampleBundleOptions options;
    options.entries = autotune::testing::QuickstartEntries();
    options.cubin_kind = CubinKind::kCompiled;
    options.cubins.emplace(autotune::testing::kQuickstartVariant, *std::move(cubin));
    options.nvrtc_version = nvrtc_version;
    bundle = autotune::testing::MakeSampleBundle(options);
    if (!bundle.ok()) {
      std::cerr << "autotune-make-sample: " << cubin_path << ": " << bundle.status().message()
                << "\n";
      return 1;
    }
  } else {
    bundle = autotune::testing::MakeSyntheticBundle(synthetic_entries, cubin_bytes);
    if (!bundle.ok()) {
      std::cerr << "autotune-make-sample: " << bundle.status().message() << "\n";
      return 1;
    }
    for (v1::Binary& binary : *bundle->mutable_binaries()) binary.set_nvrtc_version(nvrtc_version);
    for (v1::Entry& entry : *bundle->mutable_entries()) entry.set_nvrtc_version(nvrtc_version);
  }

  absl::StatusOr<std::string> json = ToJson(*bundle);
  absl::Status written = json.ok() ? WriteFile(out_path, *json) : json.status();
  if (!written.ok()) {
    std::cerr << "autotune-make-sample: " << written.message() << "\n";
    return 1;
  }
  std::cerr << "wrote " << (out_path == "-" ? "stdout" : out_path) << ": "
            << bundle->families_size() << " family, " << bundle->binaries_size() << " "
            << (cubin_path.empty() ? "synthetic binaries" : "binary") << ", "
            << bundle->entries_size() << " entries (illustrative timings)\n";
  return 0;
}
