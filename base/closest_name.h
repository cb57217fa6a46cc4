// The "did you mean" of an error message: the known name closest to one that
// is not known, when it is close enough to be a slip of the keyboard.
//
//   if (auto near = ClosestName("kernal_name", field_names)) ... "did you mean 'kernel_name'?"
#ifndef AUTOTUNE_BASE_CLOSEST_NAME_H_
#define AUTOTUNE_BASE_CLOSEST_NAME_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace autotune {

// The name of `known` fewest edits (insertions, deletions, substitutions,
// swaps of neighbours; case ignored) away from `wrong`, when that is at
// most a third of its length (at least 1, at most 3); the first such name
// on a tie. nullopt when none is that close or `wrong` is itself known.
std::optional<std::string> ClosestName(absl::string_view wrong,
                                       const std::vector<std::string>& known);

// " (did you mean 'NAME'?)", or "" when ClosestName finds none: to append
// to a message.
std::string DidYouMean(absl::string_view wrong, const std::vector<std::string>& known);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_CLOSEST_NAME_H_
