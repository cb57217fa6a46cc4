// Text forms of problems and configs as people type and read them.
//
//   ASSIGN_OR_RETURN(auto dims, ParseDimsText("batch=8,heads=32,dim=128"));
//   ASSIGN_OR_RETURN(v1::DType dtype, ParseDTypeText("bf16"));
//   FormatParams(entry.config().params());  // "BLOCK_M=128,num_warps=4"
//
// The short dtype names are the ones the cache uses in its keys ("fp32",
// "bf16", "fp8e4m3", ...). The client keeps its own copy of these few lines
// so that an inference server linking autotune::client does not pull in the
// SQLite store.
#ifndef AUTOTUNE_CLIENT_PROBLEM_TEXT_H_
#define AUTOTUNE_CLIENT_PROBLEM_TEXT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/map.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

// "name=value,name=value": names are identifiers, values are integers,
// each name once; spaces around items are ignored. INVALID_ARGUMENT says
// which item is wrong and why.
absl::StatusOr<std::map<std::string, int64_t>> ParseDimsText(absl::string_view text);

// Short names ("bf16") and enum names in any case ("BFLOAT16", "bfloat16").
// INVALID_ARGUMENT lists the accepted short names.
absl::StatusOr<v1::DType> ParseDTypeText(absl::string_view text);

// "bf16" for BFLOAT16; "unspecified" for DTYPE_UNSPECIFIED and unknown values.
absl::string_view DTypeShortName(v1::DType dtype);

// "fp32, fp16, bf16, ..." in enum order.
std::string DTypeShortNameList();

// Sorted by name: "batch=8,dim=128,heads=32"; empty map = "".
std::string FormatParams(const google::protobuf::Map<std::string, int64_t>& params);

// "NVIDIA H200 (sm_90, 132 SMs)"; parts that are unset are left out.
std::string FormatDevice(const v1::Device& device);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_PROBLEM_TEXT_H_
