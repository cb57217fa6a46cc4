#include "base/token.h"

#include <sys/random.h>

#include <cerrno>

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
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char byte : bytes) {
    token.push_back(kHex[byte >> 4]);
    token.push_back(kHex[byte & 15]);
  }
  return token;
}

}  // namespace autotune
