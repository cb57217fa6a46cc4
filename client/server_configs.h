// A family's tuned configs as the JSON files inference servers read today:
// the layout vLLM and SGLang use for their fused-MoE kernels, one file per
// shape and device, keyed by the bucketed dimension.
//
//   ASSIGN_OR_RETURN(std::vector<ConfigFile> files, ServerConfigFiles(family, entries, {}));
//   for (const ConfigFile& file : files) WriteFileAtomically(dir + "/" + file.name, file.json);
//
// File name: the problem's dims other than the bucketed one, "name=value"
// in the order the family declares them, then "device_name=" with the
// device's name (spaces and "/" as "_") and "dtype=" with the dtype's short
// name, joined by ",", and ".json"; for gla_decode "heads=32,dim=128,
// device_name=NVIDIA_H200,dtype=bf16.json", for gemm_bf16 (dims M, N, K)
// "N=4096,K=14336,device_name=NVIDIA_H200,dtype=bf16.json", vLLM's name. Content: an object from
// each tuned value of the bucketed dimension (as a decimal string key) to the config's params,
// {"1": {"BLOCK_V": 16, "THREADS": 256, ...}, "8": {...}}, keys in numeric
// order. A reader does what vLLM does: keys as integers, and the nearest
// key to its batch size.
#ifndef AUTOTUNE_CLIENT_SERVER_CONFIGS_H_
#define AUTOTUNE_CLIENT_SERVER_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

struct ConfigFile {
  std::string name;  // a file name, no directory
  std::string json;
  int entries = 0;  // keys in it
};

struct ServerConfigOptions {
  // The dimension the files are keyed by; empty = the family's only
  // bucketed dimension.
  std::string bucket;
};

// `entries` of `family` (any devices and dtypes), grouped into files.
// INVALID_ARGUMENT when the family has no bucketed dimension (or several,
// without options.bucket), when options.bucket is not one of its dims, or
// when an entry is of another family.
absl::StatusOr<std::vector<ConfigFile>> ServerConfigFiles(const v1::KernelSummary& family,
                                                          const std::vector<v1::Entry>& entries,
                                                          const ServerConfigOptions& options);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_SERVER_CONFIGS_H_
