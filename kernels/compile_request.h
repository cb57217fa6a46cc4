// What one compile of a kernel variant is made of, and its content key. The
// daemon plans and keys compiles with this alone; the NVRTC code that runs
// them (kernels/gpu/compiler.h) lives on the worker's side of the process
// boundary.
#ifndef AUTOTUNE_KERNELS_COMPILE_REQUEST_H_
#define AUTOTUNE_KERNELS_COMPILE_REQUEST_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/sha256.h"

namespace autotune::kernels {

// A header NVRTC gets in memory: the source may `#include "name"`.
struct SourceHeader {
  std::string name;
  std::string text;
};

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
  std::vector<SourceHeader> headers = {};  // the family's headers, in its order
};

// The content key of a variant: sha256 (hex) over the source text, the
// name expression, every option in order, the arch and the NVRTC version.
// Two requests with the same key produce the same cubin; a different NVRTC
// version is a different key, a file time is never part of it. The program
// name is not part of it (it only names the source in logs and line info).
//
// The hashed bytes are "autotune.compile.v1" followed by netstrings
// ("<decimal length>:<bytes>,") of: source, name expression, the number of
// options in decimal, each option, arch, NVRTC version; then, only when
// there are headers (so that keys without them are unchanged), the number
// of headers and each one's name and text. Each field is delimited, so no
// two different requests hash the same bytes.
std::string CompileKey(const CompileRequest& request, const std::string& nvrtc_version);

// CompileKey for many variants of one source: the source is hashed once
// (the netstrings above are a stream, and the source comes first), so a
// space of 100k variants of a 40 KB source costs 100k short hashes, not
// 4 GB of hashing. Key(name, options) == CompileKey of the request made of
// the constructor's fields with that name expression and those options.
class CompileKeyer {
 public:
  CompileKeyer(const std::string& source, std::string arch, std::string nvrtc_version,
               std::vector<SourceHeader> headers);

  std::string Key(const std::string& name_expression,
                  const std::vector<std::string>& options) const;

 private:
  Sha256 after_source_;
  std::string arch_;
  std::string nvrtc_version_;
  std::string headers_;  // their netstrings, or empty when there are none
};

// Whether NVRTC may be given `option`. An option can make NVRTC read or
// write files of the host (--create-pch, --use-pch, --pch-dir, --time,
// --fdevice-time-trace, -I, -include, ...), so only these are allowed, with
// one dash or two, and everything else is refused before NVRTC sees it:
//
//   -D<NAME>[=<value>]       --define-macro=<NAME>[=<value>]
//   -U<NAME>                 --undefine-macro=<NAME>
//   -std=c++11|c++14|c++17|c++20                 (--std=)
//   -use_fast_math           -ftz=  -prec-div=  -prec-sqrt=  -fmad=  (true|false)
//   -lineinfo                (--generate-line-info)
//   -maxrregcount=<16..255>
//   -default-device          (--device-as-default-execution-space)
//   -restrict  -extra-device-vectorization  -w (--disable-warnings)
//
// NAME is a C identifier; a value holds no line break. The architecture is
// the request's `arch`, never an option. INVALID_ARGUMENT saying which
// option and what is allowed: "'--time=x' is not an allowed NVRTC option
// (allowed: -D, -U, ...)". Checked when a family is registered (its
// compile_options), and by every compile, in the worker and in the client's
// kernel loader.
absl::Status CheckCompileOption(absl::string_view option);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_COMPILE_REQUEST_H_
