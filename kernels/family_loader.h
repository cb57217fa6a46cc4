// Reads kernel family descriptors (v1::KernelFamily in protobuf text format)
// and checks them, so that every family the service holds can be expanded
// and compiled without further surprises from the descriptor itself.
//
//   ASSIGN_OR_RETURN(v1::KernelFamily axpy, LoadFamilyFile("kernels/axpy.textproto"));
//   ASSIGN_OR_RETURN(std::vector<v1::KernelFamily> builtin, LoadFamilyDirectory("kernels"));
//   RETURN_IF_ERROR(ValidateFamily(request.family(), "RegisterKernel"));
//
// Every problem with a descriptor is INVALID_ARGUMENT, with a message that
// names where it is and the field, e.g.
//   "kernels/x.textproto:12: buffers[1].shape[0]: unknown name 'H2' (known: ...)"
//   "RegisterKernel: params[0].values: empty (list at least one value)"
// The line is the 1-based line of the offending field, or of the closest
// enclosing field that is present; it is left out when the field is absent
// from the file altogether ("x.textproto: reference: must be set").
//
// Every check runs, so one error reports every problem at once: each
// section below contributes its first problem, on a line of its own, in
// this order:
//   name            [a-z][a-z0-9_]*
//   kernel_name     a C++ identifier (optionally qualified with ::)
//   source          non-empty (files: exactly one of source / source_file;
//                   source_file beside the descriptor or below it, neither
//                   absolute nor going up); it, reference.source and each
//                   header include only the family's headers (by their
//                   names) and the CUDA toolkit's (FindForbiddenInclude,
//                   include_check.h, with the toolkit's folder found here by
//                   ToolkitIncludeDir): "source: line 3: #include ..."
//   headers         at most kMaxSourceHeaders; names are parts of
//                   [A-Za-z0-9_][A-Za-z0-9_.-]* joined by '/', unique; text
//                   non-empty, at most kMaxSourceBytes (files: `file` is
//                   read into `text`, under the source_file rules)
//   params          non-empty; names are identifiers not starting with
//                   AUTOTUNE_, unique; values non-empty, unique, |v| <= 2^53;
//                   the product of the value counts is at most
//                   kMaxConfigsPerFamily (search_space.h)
//   dims            non-empty; identifiers, unique; 0 <= min, max; min <= max
//   dtypes          non-empty, known, not DTYPE_UNSPECIFIED, unique
//   names           params, dims, buffers and scalars share one namespace;
//                   none may be `dtype_bytes`, `arch`, `arch_specific` or a
//                   function of expressions
//   buffers         non-empty, at least one OUT or INOUT; role set (SCRATCH:
//                   no fill); shape has
//                   at least one expression, each over dims + params +
//                   dtype_bytes; fill: UNIFORM needs low < high, NORMAL a
//                   non-negative stddev
//   scalars         value is an expression over dims + params + dtype_bytes
//   launch          1..3 grid and 1..3 block expressions over dims + params +
//                   dtype_bytes; dynamic_shared_bytes empty or an expression
//   constraints     expressions over dims + params + dtype_bytes + arch +
//                   arch_specific (the target, expression.h)
//   reference       set, with kernel_name and its own launch (1..3 grid and
//                   block expressions) over dims + dtype_bytes only
//   tolerances      exactly one per dtype of `dtypes`, none for others;
//                   rtol, atol >= 0 and finite
//   bytes_per_call, flops_per_call  expressions over dims + params +
//                   dtype_bytes (write "0" for a kernel without arithmetic)
//   binding, cache_state  known values (unspecified means the default)
//   compile_options each one CheckCompileOption allows (compile_request.h:
//                   -D, -U, -std=, fast-math and the precision switches,
//                   -lineinfo, -maxrregcount=, -default-device, ...); none
//                   that reads or writes a file, and no -arch (the compiler
//                   sets the architecture)
// Checks that need a problem (a shape that is 0 for some dims, a block too
// large for some params) belong to the search space (search_space.h).
//
// Thread-safety: all functions are safe to call concurrently.
#ifndef AUTOTUNE_KERNELS_FAMILY_LOADER_H_
#define AUTOTUNE_KERNELS_FAMILY_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"
#include "proto/autotune.pb.h"

namespace autotune::kernels {

// Reads the descriptor at `path`, reads `source_file` (relative to the
// descriptor's directory) into `source` and each header's `file` into its
// `text` (the file names are kept: they are not part of the content hash),
// and validates the result.
// PosixError's code (NOT_FOUND, PERMISSION_DENIED, ...; base/posix_error.h)
// when `path` itself cannot be read: "cannot read <path>: <strerror>";
// INVALID_ARGUMENT "path:line:column: message" for text-format syntax errors
// and "path:line: field: message" for everything else, including a
// source_file that cannot be read.
absl::StatusOr<v1::KernelFamily> LoadFamilyFile(const std::string& path);

// The checks of LoadFamilyFile for a family that arrived as a message (no
// files are read: `source` must hold the text; `source_file` is ignored).
// Errors are "origin: field: message".
absl::Status ValidateFamily(const v1::KernelFamily& family, absl::string_view origin);

// Loads every "*.textproto" file directly in `dir` (not in subdirectories),
// in order of file name. NOT_FOUND when `dir` is not a directory; the first
// file's error otherwise; INVALID_ARGUMENT "family 'axpy' is defined twice:
// dir/a.textproto and dir/b.textproto".
absl::StatusOr<std::vector<v1::KernelFamily>> LoadFamilyDirectory(const std::string& dir);

// Text-format files with line numbers, shared with manifest.h.

// Parses the file at `path` into `message`, recording where each field was
// in `locations`. Errors as for LoadFamilyFile's own file.
absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message& message,
                                google::protobuf::TextFormat::ParseInfoTree& locations);

// The 1-based line of the field at `field_path` ("buffers[1].shape[0]",
// "reference.launch", "params[0].values") in a message parsed with
// ParseTextProtoFile, or of its closest enclosing field that was present;
// 0 when none was. A repeated field without an index means its first value.
int FieldLine(const google::protobuf::Message& message,
              const google::protobuf::TextFormat::ParseInfoTree& locations,
              absl::string_view field_path);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_FAMILY_LOADER_H_
