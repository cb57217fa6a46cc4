// Reads what a compiled kernel expects from its cubin, with no driver: the
// size of each parameter of an entry point, in order. `autotune check` and
// RegisterKernel use it to compare a family's buffers, tensor maps and
// scalars with the kernel it compiles to, on a machine without a GPU.
//
//   ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
//                    KernelParameterSizes(result.cubin, result.lowered_name));
//   // {8, 8, 4}: two pointers, then a 4-byte scalar
//
// A cubin is an ELF image. ptxas records each entry's parameters in the
// section ".nv.info.<lowered name>" as EIATTR_KPARAM_INFO attributes (one
// per parameter: its ordinal, its offset and, in bits 18..31 of the last
// word, its size in bytes). The format is NVIDIA's and undocumented; the
// tests check it against kernels compiled by NVRTC with known signatures.
//
// Thread-safety: a pure function.
#ifndef AUTOTUNE_KERNELS_CUBIN_H_
#define AUTOTUNE_KERNELS_CUBIN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune::kernels {

// The size in bytes of each parameter of the entry `lowered_name`, by
// ordinal (empty for a kernel without parameters).
// NOT_FOUND "the cubin has no kernel '<name>'" when the image holds no such
// entry; INVALID_ARGUMENT naming what is wrong when `cubin` is not a 64-bit
// little-endian ELF image, a section lies outside it, or an attribute is
// cut short or lists an ordinal twice or leaves one out.
absl::StatusOr<std::vector<int64_t>> KernelParameterSizes(absl::string_view cubin,
                                                          absl::string_view lowered_name);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_CUBIN_H_
