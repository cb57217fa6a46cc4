// The one check of what a CUDA source may #include, run where a family is
// checked (family_loader.h) and before every NVRTC compile (gpu/compiler.h:
// the compile workers and the client's recipe compiles), so that no source
// makes NVRTC open a file of the host that is not a header of the CUDA
// toolkit.
//
//   IncludeRules rules{.shipped = {"tile.cuh"}, .toolkit_include_dir = nvrtc.include_dir()};
//   if (std::optional<IncludeProblem> p = FindForbiddenInclude(source, rules)) refuse(*p);
//
// The rule: `#include`, `#include_next`, `#import`, `#embed` and
// `__has_include`/`__has_include_next`/`__has_embed` may name only
//  - a header the family ships (SourceHeader.name, matched exactly: NVRTC
//    serves those from memory), or
//  - a regular file under the toolkit's include folder, named by parts of
//    [A-Za-z0-9_][A-Za-z0-9_.+-]* joined by '/' (so never absolute, never
//    "..", never "./"). The check learns whether such a file exists with one
//    stat() of <toolkit_include_dir>/<name> and reads nothing; the folder is
//    the one the compile passes with -I, found without user input
//    (ToolkitIncludeDir). NVRTC's own built-in headers are not allowed by
//    name: a family that needs one includes it through the toolkit's.
// Anything else is refused: a name computed by a macro, an absolute name,
// one that goes up, one that is neither shipped nor the toolkit's.
//
// The source is read as NVRTC reads it: the text ends at its first NUL (the
// C string NVRTC is given); a backslash followed by any number of CRs and a
// LF joins lines (a lone CR is no line break); comments, string and
// character literals (with user-defined suffixes), pp-numbers and raw
// string literals (R"d(...)d", whose text keeps its splices) are skipped
// as tokens; '#' and the digraph "%:" open a directive when they are the
// first token of a line, a line starting after a comment that spans lines
// included. What depends on -std is read every way NVRTC may read it
// (-std=c++03: trigraphs and no raw strings; c++11: trigraphs, no digit
// separators; c++14: trigraphs; c++17 and later: neither), and a source
// passes only when no reading finds a forbidden include. Constructs whose
// reading is ambiguous are refused: a raw string right after '$', '\' or a
// non-ASCII byte, one with a splice or trigraph in its prefix, a bad or
// missing delimiter, and an unterminated raw string.
//
// Every directive line is checked, inside #if 0 too: a family never needs a
// forbidden include, even one that is skipped.
//
// Thread-safety: all functions are safe to call concurrently.
#ifndef AUTOTUNE_KERNELS_INCLUDE_CHECK_H_
#define AUTOTUNE_KERNELS_INCLUDE_CHECK_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace autotune::kernels {

// Where an include may lead.
struct IncludeRules {
  std::vector<std::string> shipped;  // the names of the headers given to NVRTC
  std::string toolkit_include_dir;   // the folder NVRTC gets with -I; empty: none
};

struct IncludeProblem {
  int line = 0;         // 1-based physical line of the directive's '#'
  std::string message;  // "#include \"etc/passwd\" is neither ...; <rule>"
};

// The rule a refusal names.
inline constexpr char kIncludeRule[] =
    "a family's source includes only the CUDA toolkit's headers and the family's own headers";

// The first include of `source` that the rules above forbid, in the first
// reading (c++17, then c++14, c++11, c++03) that finds one; nullopt when
// none does. A problem found only under an older -std says which.
std::optional<IncludeProblem> FindForbiddenInclude(absl::string_view source,
                                                   const IncludeRules& rules);

// The CUDA toolkit's include folder, symlinks resolved: the first of
// $CUDA_HOME/include, <nvrtc_library_dir>/../include,
// <nvrtc_library_dir>/../../include (targets/<arch>/lib) and
// /usr/local/cuda/include that holds cuda_fp16.h; empty when none does.
// `nvrtc_library_dir` may be empty (a process that has not loaded NVRTC).
std::string ToolkitIncludeDir(absl::string_view nvrtc_library_dir);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_INCLUDE_CHECK_H_
