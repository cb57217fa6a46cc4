// What one compile of a kernel variant is made of, and its content key. The
// daemon plans and keys compiles with this alone; the NVRTC code that runs
// them (kernels/gpu/compiler.h) lives on the worker's side of the process
// boundary.
#ifndef AUTOTUNE_KERNELS_COMPILE_REQUEST_H_
#define AUTOTUNE_KERNELS_COMPILE_REQUEST_H_

#include <string>
#include <vector>

namespace autotune::kernels {

struct CompileRequest {
  std::string source;        // CUDA C++ text
  std::string program_name;  // shown in the log, e.g. "vector_scale.cu"
  // The kernel to find in the result: an extern "C" name, or a template
  // instantiation such as "gla_decode<64, 4>" (added as a name expression).
  // Required.
  std::string name_expression;
  std::vector<std::string> options;  // -D..., -std=c++17, etc. (no -arch)
  // A real architecture: "sm_90", "sm_90a", "sm_100f". "compute_90" names a
  // virtual (PTX-only) architecture and is rejected: the result is a cubin.
  std::string arch;
};

// The content key of a variant: sha256 (hex) over the source text, the
// name expression, every option in order, the arch and the NVRTC version.
// Two requests with the same key produce the same cubin; a different NVRTC
// version is a different key, a file time is never part of it. The program
// name is not part of it (it only names the source in logs and line info).
//
// The hashed bytes are "autotune.compile.v1" followed by netstrings
// ("<decimal length>:<bytes>,") of: source, name expression, the number of
// options in decimal, each option, arch, NVRTC version. Each field is
// delimited, so no two different requests hash the same bytes.
std::string CompileKey(const CompileRequest& request, const std::string& nvrtc_version);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_COMPILE_REQUEST_H_
