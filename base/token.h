// Bearer tokens: how they are made and how the daemon's token file stores
// them (service/auth.h reads the file; `autotune token new` writes a line).
#ifndef AUTOTUNE_BASE_TOKEN_H_
#define AUTOTUNE_BASE_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune {

// "sha256:<hex>" of a token's text: what the token file stores.
std::string TokenHash(absl::string_view token);

// A new random token: 32 bytes from the OS (getrandom), as 64 hex digits.
absl::StatusOr<std::string> NewToken();

}  // namespace autotune

#endif  // AUTOTUNE_BASE_TOKEN_H_
