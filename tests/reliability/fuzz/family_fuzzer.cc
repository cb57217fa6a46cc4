// Kernel family descriptors (kernels/family_loader.h) as a user's file: the
// text format parser, every check, and for a family that passes, its search
// space for a small problem of each dtype.
#include <cstdint>
#include <fstream>

#include "kernels/family_loader.h"
#include "kernels/search_space.h"
#include "tests/reliability/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using autotune::fuzz::FuzzDirectory;
  static const bool source_written = [] {
    std::ofstream(FuzzDirectory() + "/k.cu") << "extern \"C\" __global__ void k() {}\n";
    return true;
  }();
  (void)source_written;
  const std::string path = autotune::fuzz::WriteInput("family.textproto", data, size);
  absl::StatusOr<autotune::v1::KernelFamily> family = autotune::kernels::LoadFamilyFile(path);
  if (!family.ok()) return 0;
  for (const auto& dtype : family->dtypes()) {
    autotune::v1::Problem problem;
    problem.set_dtype(static_cast<autotune::v1::DType>(dtype));
    for (const auto& dim : family->dims()) (*problem.mutable_dims())[dim.name()] = 64;
    autotune::kernels::ExpandSearchSpace(*family, problem).IgnoreError();
  }
  return 0;
}
