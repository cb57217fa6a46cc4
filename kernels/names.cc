#include "kernels/names.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace autotune::kernels {

bool IsIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  if (!absl::ascii_isalpha(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

bool IsFamilyName(absl::string_view name) {
  if (name.empty() || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || absl::ascii_isdigit(c) || c == '_';
  });
}

bool IsGpuArch(absl::string_view arch) {
  if (!absl::ConsumePrefix(&arch, "sm_")) return false;
  if (!arch.empty() && absl::ascii_islower(arch.back())) arch.remove_suffix(1);
  return !arch.empty() &&
         std::all_of(arch.begin(), arch.end(), [](char c) { return absl::ascii_isdigit(c); });
}

}  // namespace autotune::kernels
