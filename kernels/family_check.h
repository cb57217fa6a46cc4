// What `autotune check` and RegisterKernel check beyond the descriptor
// (family_loader.h): that the family's source compiles, for its reference
// and its default config, in every dtype it lists, and that the compiled
// kernels take exactly the arguments the service will pass them.
//
//   ASSIGN_OR_RETURN(std::vector<CheckCompile> compiles, CheckCompiles(family, "sm_90"));
//   std::vector<CheckFinding> findings;
//   for (const CheckCompile& compile : compiles) {
//     CompileOutput output = ...;  // NVRTC here, the compile pool in the daemon
//     AddFindings(family, compile, output, findings);
//   }
//   RETURN_IF_ERROR(FindingsStatus(findings, "family"));
//
// Arguments are passed in this order (the worker and the client loader
// pass them so): one pointer per buffer (8 bytes), then, to the tuned
// kernel only, one CUtensorMap per tensor map (128 bytes, declared
// `const __grid_constant__ CUtensorMap`), then each scalar at its dtype's
// size (a scalar without a dtype has the problem's). The sizes of the
// compiled entry's parameters are read from its cubin (cubin.h), so a
// kernel that takes an int where the descriptor says int64 is found here,
// with no GPU.
//
// Thread-safety: pure functions.
#ifndef AUTOTUNE_KERNELS_FAMILY_CHECK_H_
#define AUTOTUNE_KERNELS_FAMILY_CHECK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/compile_request.h"
#include "proto/autotune.pb.h"

namespace autotune::kernels {

// The name compiler messages give the family's source: the file the user
// wrote (source_file, without its folders) when the descriptor named one,
// else "<family name>.cu".
std::string ProgramName(const v1::KernelFamily& family);

// What is allowed but worth saying: "default_config: not set; ..." when a
// family has none (lookups that miss then have nothing to fall back on).
std::vector<std::string> FamilyWarnings(const v1::KernelFamily& family);

// The size in bytes of each parameter of the family's tuned kernel for
// `dtype`, in the order above: what a launch passes, and what the kernel's
// cubin must record (cubin.h). Lookups carry it to the client's loader
// (LookupResponse.parameter_bytes).
std::vector<int64_t> TunedKernelParameterBytes(const v1::KernelFamily& family, v1::DType dtype);

// One compile of the check.
struct CheckCompile {
  // "reference" or "default config BLOCK=256, VEC=4" (or "first values
  // ..." for a family without default_config).
  std::string part;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  bool reference = false;
  CompileRequest request;
};

// For each of the family's dtypes, the reference and the default config
// (without one, the config of each param's first value), compiled for
// `arch`. `family` passed ValidateFamily. INVALID_ARGUMENT when the default
// config is not one of the family's configs (ValidateFamily refuses that
// too).
// `tuned` false: the reference's compiles only (their descriptor fields
// passed the checks, the tuned kernel's did not).
absl::StatusOr<std::vector<CheckCompile>> CheckCompiles(const v1::KernelFamily& family,
                                                        const std::string& arch, bool tuned = true);

// What one compile gave.
struct CompileOutput {
  bool compiled = false;     // false: `log` says why
  std::string log;           // the compiler's messages
  std::string cubin;         // compiled: the image
  std::string lowered_name;  // compiled: the entry's symbol
};

// One problem the check found: `part` as in CheckCompile, the dtypes it was
// found for, and what.
struct CheckFinding {
  std::string part;
  std::vector<v1::DType> dtypes;
  std::string message;
  // The descriptor field to change, when one is to blame ("scalars[1]",
  // "kernel_name", "headers"); empty for an error in the source.
  std::string field;
};

// Adds what `output` shows to `findings`: a compile error (its error lines,
// with a hint when a header is missing: sources are single files plus the
// headers the descriptor ships), an entry the cubin lacks, or parameters
// whose count or sizes differ from the arguments the service passes (above;
// a size told for the parameter counted from 1, with the dtypes of that size
// to give a scalar).
// A finding equal to one already there for another dtype adds that dtype.
void AddFindings(const v1::KernelFamily& family, const CheckCompile& compile,
                 const CompileOutput& output, std::vector<CheckFinding>& findings);

// One finding as "<origin>[:<line>]: [<field>: ]<part> (<dtypes>): <message>",
// the line from `line_of` (a descriptor file's FamilyFile::Line) when given.
std::string FindingText(const CheckFinding& finding, absl::string_view origin,
                        const std::function<int(absl::string_view field)>& line_of = nullptr);

// OK when `findings` is empty, else INVALID_ARGUMENT with their FindingText,
// one per line.
absl::Status FindingsStatus(const std::vector<CheckFinding>& findings, absl::string_view origin,
                            const std::function<int(absl::string_view field)>& line_of = nullptr);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_FAMILY_CHECK_H_
