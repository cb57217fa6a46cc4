// Internal to cache/: turns std::string_view (the public headers) into
// absl::string_view (Abseil's string functions). Debian builds Abseil with
// its own string_view type, so the two do not convert implicitly.
#ifndef AUTOTUNE_CACHE_STRINGS_H_
#define AUTOTUNE_CACHE_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace autotune::cache {

inline absl::string_view ToAbsl(std::string_view text) {
  return absl::string_view(text.data(), text.size());
}

}  // namespace autotune::cache

#endif  // AUTOTUNE_CACHE_STRINGS_H_
