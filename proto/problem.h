// The problem vocabulary of the API: dtype names and sizes, the text form of
// dims, the name rules, ValidateProblem, how messages name a problem, and
// the family content hash. Every library that speaks of problems (the
// store, the kernel toolkit, the daemon, the worker, the clients) uses these
// and keeps no copy, so a dtype spelled, a problem checked or a key hashed
// is the same everywhere.
//
//   ASSIGN_OR_RETURN(v1::DType dtype, ParseDType("bf16"));
//   ASSIGN_OR_RETURN(auto dims, ParseDims("batch=8,heads=32,dim=128"));
//   RETURN_IF_ERROR(ValidateProblem(family, problem, "requests[3].problem"));
//   ProblemContext("rmsnorm", problem);  // "rmsnorm hidden=4096,rows=8 bf16"
//
// Depends on the generated messages only (and a sha256). Thread-safe: pure
// functions over static tables.
#ifndef AUTOTUNE_PROTO_PROBLEM_H_
#define AUTOTUNE_PROTO_PROBLEM_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/map.h"
#include "google/protobuf/message_lite.h"
#include "proto/autotune.pb.h"

namespace autotune {

// One row of the dtype table.
struct DTypeInfo {
  v1::DType dtype;
  absl::string_view name;       // short name, in keys and on the CLI: "bf16"
  absl::string_view long_name;  // the enum name, lower-cased: "bfloat16"
  int64_t bytes;                // element size
  absl::string_view cuda_type;  // the C++ type AUTOTUNE_DTYPE names: "__nv_bfloat16"
  bool is_integer;
};

// The row of `dtype`; nullptr for DTYPE_UNSPECIFIED and values outside the
// enum.
const DTypeInfo* FindDType(v1::DType dtype);

// "bf16"; "unspecified" for DTYPE_UNSPECIFIED; "dtype 17" for a value
// outside the table.
std::string DTypeName(v1::DType dtype);

// The short names in enum order: "fp32, fp16, bf16, ...".
std::string DTypeNameList();

// Accepts the short names and the enum names ("BFLOAT16", "bfloat16") in
// any case, spaces around ignored. INVALID_ARGUMENT "unknown dtype 'x'
// (expected one of fp32, ...)" otherwise, "unspecified" included.
absl::StatusOr<v1::DType> ParseDType(absl::string_view text);

// Element size in bytes; 0 for DTYPE_UNSPECIFIED and unknown values.
int64_t DTypeBytes(v1::DType dtype);

// "batch=8,dim=128,heads=32": sorted by name. Same dims, same text; the
// store keys problems by it, and configs print the same way.
std::string FormatDims(const google::protobuf::Map<std::string, int64_t>& dims);

// Inverse of FormatDims. Spaces around items are ignored; empty text is no
// dims (a caller that needs some says so). INVALID_ARGUMENT naming the
// item: "dims: 'batch' has no value", "dims: 'x=abc' is not an integer",
// "dims: 'batch' is given twice", "dims: '=8' has no name", "dims: '1x' is
// not a name (letters, digits, '_')", "dims: empty item in 'a=1,,b=2'".
absl::StatusOr<std::map<std::string, int64_t>> ParseDims(absl::string_view text);

// A C identifier: [A-Za-z_][A-Za-z0-9_]* (params, dims, buffers, scalars).
bool IsIdentifier(absl::string_view name);

// A family name: [a-z][a-z0-9_]*.
bool IsFamilyName(absl::string_view name);

// A real GPU architecture a cubin can be built for: "sm_" and a compute
// capability of 2 or 3 digits with an optional 'a' or 'f' feature suffix
// ("sm_90", "sm_90a", "sm_100f"; not "compute_90", which only gives PTX).
bool IsGpuArch(absl::string_view arch);

// Whether a cubin built for `arch` runs on a device of `compute_capability`
// (major*10 + minor): "sm_90" and "sm_90a" only on 9.0 (an 'a' cubin uses
// features of that one architecture: wgmma, setmaxnreg, ...), "sm_100f" on
// 10.0 and the later minors of its family (10.3). False for anything that is
// not IsGpuArch.
bool ArchRunsOn(absl::string_view arch, int compute_capability);

// "13.0" -> 13000, "12.8" -> 12008. INVALID_ARGUMENT when not MAJOR.MINOR
// (digits only, minor below 1000): "nvrtc version 'x' is not MAJOR.MINOR
// (e.g. \"12.8\")".
absl::StatusOr<int64_t> NvrtcVersionNumber(absl::string_view version);

// "rmsnorm hidden=4096,rows=8 bf16": how messages name a problem.
std::string ProblemContext(absl::string_view family, const v1::Problem& problem);

// OK when `problem` fits `family`: every dim of the family given, each
// positive, within the dim's min/max (0 = unbounded) and exactly
// representable as a double; no other dims; the dtype among family.dtypes.
// Checks run in a fixed order (the family's dims in declaration order, then
// unknown dims sorted by name, then the dtype), so the same problem always
// gets the same answer. INVALID_ARGUMENT naming `field`:
//   "problem.dims: missing 'n' (family 'axpy' has dims: n)"
//   "problem.dims['n']: 0 is not positive"
//   "problem.dims['n']: 5000 is above the max 4096"
//   "problem.dims['m']: not a dim of family 'axpy' (dims: n)"
//   "problem.dtype: fp64 is not supported by family 'axpy' (fp32, fp16)"
absl::Status ValidateProblem(const v1::KernelFamily& family, const v1::Problem& problem,
                             absl::string_view field = "problem");

// The largest integer a double holds exactly (2^53). Dims and the values
// of descriptor expressions, which muparser evaluates in doubles, stay
// within it.
inline constexpr double kMaxExactInteger = 9007199254740992.0;

// Product of the params' value counts, saturating at INT64_MAX; 0 when a
// param has no values.
int64_t ConfigCount(const v1::KernelFamily& family);

// `message` serialized the same way every time (map fields in key order,
// unknown fields in theirs): what hashes and byte-for-byte comparisons of
// messages rest on (family hashes, measurement keys, the local cache's
// packs).
std::string SerializeDeterministically(const google::protobuf::MessageLite& message);

// Content hash of a family: lower-case hex sha256 over its deterministic
// serialization with `source_file` cleared (the source text is part of the
// hash, where it was read from is not). Entries are keyed by it: changing
// what it covers orphans every cached entry (a golden test pins it).
std::string FamilyContentHash(const v1::KernelFamily& family);

}  // namespace autotune

#endif  // AUTOTUNE_PROTO_PROBLEM_H_
