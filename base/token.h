// Bearer tokens: how they are made and how the daemon's token file stores
// them (service/rpc/auth.h reads the file; `autotune token new` writes a line).
#ifndef AUTOTUNE_BASE_TOKEN_H_
#define AUTOTUNE_BASE_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace autotune {

// "sha256:<hex>" of a token's text: what the token file stores.
std::string TokenHash(absl::string_view token);

// A new random token: 32 bytes from the OS (getrandom), as 64 hex digits.
absl::StatusOr<std::string> NewToken();

// Whether `token` can travel as a bearer token: not empty, no white space.
bool IsTokenText(absl::string_view token);

// A token's expiry as the token file writes it, an RFC 3339 time
// ("2027-01-31T00:00:00Z"); INVALID_ARGUMENT saying so otherwise.
absl::StatusOr<absl::Time> ParseTokenExpiry(absl::string_view text);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_TOKEN_H_
