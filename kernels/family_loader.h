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
// Every check runs, so one error reports every problem at once: first each
// field the message type does not have (with the closest known name; the
// parse skips them and goes on), then each section below contributes its
// first problem (params, dims, buffers and scalars: each item's), on a line
// of its own, in this order:
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
//                   none may be `dtype_bytes`, `arch`, `arch_specific`,
//                   `sm_count` or a function of expressions
//   buffers         non-empty, at least one OUT or INOUT; role set (SCRATCH:
//                   no fill); shape has
//                   at least one expression, each over dims + params +
//                   dtype_bytes; fill: UNIFORM needs low < high, NORMAL a
//                   non-negative stddev
//   scalars         value is an expression over dims + params + dtype_bytes
//   launch          1..3 grid and 1..3 block expressions over dims + params +
//                   dtype_bytes + sm_count (the device's, expression.h);
//                   dynamic_shared_bytes empty or an expression
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

#include <memory>
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

// A descriptor file read as LoadFamilyFile reads it, kept with its problems:
// what `autotune check` needs to report every problem of a file at once,
// the compile's included when the descriptor's problems leave it possible.
struct FamilyFile {
  v1::KernelFamily family;  // source_file and header files read in, when they could be
  absl::Status problems;    // LoadFamilyFile's error for this file; OK when none
  // No problem in what the compile of the tuned kernel reads (name,
  // kernel_name, source and its includes, headers, params and
  // default_config, dtypes, binding, compile_options), or of the reference
  // (the same but reference for name, params and binding): CheckCompiles
  // (family_check.h) may run for it.
  bool tuned_compilable = false;
  bool reference_compilable = false;
  std::shared_ptr<const google::protobuf::TextFormat::ParseInfoTree> locations;

  // FieldLine of `field_path` in the file ("scalars[1]"); 0 when unknown.
  int Line(absl::string_view field_path) const;
};

// Errors only when the file cannot be read or has a syntax error (as
// LoadFamilyFile); every other problem is in `problems`.
absl::StatusOr<FamilyFile> ReadFamilyFile(const std::string& path);

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
// in `locations`. Errors as for LoadFamilyFile's own file. A field the
// message type does not have is skipped, the parse going on, and reported
// as "path:line:column: Buffer has no field 'shap' (did you mean
// 'shape'?)": every one of them, one per line, as the error, or, when
// `unknown_fields` is given, there (the parse then succeeds). An unknown
// enum value is a syntax error, with the closest value named.
absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message& message,
                                google::protobuf::TextFormat::ParseInfoTree& locations,
                                std::vector<std::string>* unknown_fields = nullptr);

// The 1-based line of the field at `field_path` ("buffers[1].shape[0]",
// "reference.launch", "params[0].values") in a message parsed with
// ParseTextProtoFile, or of its closest enclosing field that was present;
// 0 when none was. A repeated field without an index means its first value.
int FieldLine(const google::protobuf::Message& message,
              const google::protobuf::TextFormat::ParseInfoTree& locations,
              absl::string_view field_path);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_FAMILY_LOADER_H_
