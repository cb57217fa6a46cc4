// sha256 digests, the content keys of binaries, compiles and families.
#ifndef AUTOTUNE_BASE_SHA256_H_
#define AUTOTUNE_BASE_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace autotune {

// Lower-case hex sha256 of `data` (64 characters).
std::string Sha256Hex(absl::string_view data);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_SHA256_H_
