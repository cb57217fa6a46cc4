#include "base/token.h"

#include <sys/random.h>

#include <cerrno>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "base/sha256.h"

namespace autotune {

std::string TokenHash(absl::string_view token) { return absl::StrCat("sha256:", Sha256Hex(token)); }

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  size_t have = 0;
  while (have < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + have, sizeof(bytes) - have, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return PosixError("getrandom", errno);
    }
    have += static_cast<size_t>(got);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

bool IsTokenText(absl::string_view token) {
  return !token.empty() && token.find_first_of(" \t\r\n\v\f") == absl::string_view::npos;
}

absl::StatusOr<absl::Time> ParseTokenExpiry(absl::string_view text) {
  absl::Time expires;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &expires, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not an RFC 3339 time (e.g. 2027-01-31T00:00:00Z): ", error));
  }
  return expires;
}

}  // namespace autotune
