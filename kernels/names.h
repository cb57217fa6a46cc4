// Name rules shared by descriptors, manifests and jobs.
#ifndef AUTOTUNE_KERNELS_NAMES_H_
#define AUTOTUNE_KERNELS_NAMES_H_

#include "absl/strings/string_view.h"

namespace autotune::kernels {

// A C identifier: [A-Za-z_][A-Za-z0-9_]* (params, dims, buffers, scalars).
bool IsIdentifier(absl::string_view name);

// A family name: [a-z][a-z0-9_]*.
bool IsFamilyName(absl::string_view name);

// A real GPU architecture a cubin can be built for: "sm_90", "sm_90a",
// "sm_100a" (not "compute_90", which only gives PTX).
bool IsGpuArch(absl::string_view arch);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_NAMES_H_
