// Content keys of the cache: canonical problem keys, sha256 digests and the
// family content hash. Keys are derived from content only, never from file
// times or paths, so reinstalling a library or moving a file changes no key.
#ifndef AUTOTUNE_CACHE_KEYS_H_
#define AUTOTUNE_CACHE_KEYS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "google/protobuf/map.h"
#include "proto/autotune.pb.h"

namespace autotune::cache {

// Lower-case hex sha256 of `data`.
std::string Sha256Hex(std::string_view data);

// "batch=8,dim=128,heads=32": dims sorted by name. Same dims, same key.
std::string CanonicalDims(const google::protobuf::Map<std::string, int64_t>& dims);

// Inverse of CanonicalDims. Spaces around items are ignored and empty text
// is no dims. INVALID_ARGUMENT naming the bad item: "dims: 'batch' has no
// value", "dims: 'x=abc' is not an integer", "dims: 'batch' is given twice",
// "dims: '=8' has no name", "dims: '1x' is not a name ...", "dims: empty
// item in '...'". Names are identifiers ([A-Za-z_][A-Za-z0-9_]*).
absl::StatusOr<std::map<std::string, int64_t>> ParseDims(std::string_view text);

// Content hash of a family: sha256 over its deterministic serialization with
// `source_file` cleared (the source text itself is part of the hash, where it
// was read from is not).
std::string FamilyContentHash(const v1::KernelFamily& family);

// Short dtype names used by the CLI and in keys: "fp32", "fp16", "bf16",
// "fp64", "int8", "int32", "int64", "uint8", "fp8e4m3", "fp8e5m2".
// DTYPE_UNSPECIFIED is "unspecified", a value outside the enum "unknown".
// The view points at static storage.
std::string_view DTypeName(v1::DType dtype);
// Accepts the short names above and the enum names ("BFLOAT16", "bfloat16"),
// in any case. INVALID_ARGUMENT "unknown dtype 'x' (expected one of fp32,
// ...)" otherwise, DTYPE_UNSPECIFIED included.
absl::StatusOr<v1::DType> ParseDType(std::string_view name);

// "13.0" -> 13000, "12.8" -> 12008. INVALID_ARGUMENT when not MAJOR.MINOR
// (digits only, minor below 1000): "nvrtc version 'x' is not MAJOR.MINOR
// (e.g. \"12.8\")".
absl::StatusOr<int64_t> NvrtcVersionNumber(std::string_view version);

}  // namespace autotune::cache

#endif  // AUTOTUNE_CACHE_KEYS_H_
