#include "base/closest_name.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace autotune {
namespace {

// Optimal string alignment distance, case ignored.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  const auto same = [](char x, char y) { return absl::ascii_tolower(x) == absl::ascii_tolower(y); };
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace

std::optional<std::string> ClosestName(absl::string_view wrong,
                                       const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), wrong) != known.end()) return std::nullopt;
  const size_t limit = std::clamp<size_t>(wrong.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& name : known) {
    const size_t distance = EditDistance(wrong, name);
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  return best;
}

std::string DidYouMean(absl::string_view wrong, const std::vector<std::string>& known) {
  const std::optional<std::string> near = ClosestName(wrong, known);
  return near ? absl::StrCat(" (did you mean '", *near, "'?)") : "";
}

}  // namespace autotune
