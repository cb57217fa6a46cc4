#include "kernels/manifest.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "kernels/family_loader.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

using google::protobuf::TextFormat;

// A value listed again: its first place and the later one.
struct Repeat {
  int earlier = 0;
  int later = 0;
};

// The first element of `list` whose key an earlier one has: pairwise for a
// few (no allocation, the common case), a set for many (a manifest sent
// over RPC may list millions).
template <typename List, typename KeyOf>
std::optional<Repeat> FirstRepeat(const List& list, KeyOf key_of) {
  constexpr int kPairwiseUpTo = 16;
  const int size = static_cast<int>(list.size());
  if (size <= kPairwiseUpTo) {
    for (int later = 1; later < size; ++later) {
      for (int earlier = 0; earlier < later; ++earlier) {
        if (key_of(list[earlier]) == key_of(list[later])) return Repeat{earlier, later};
      }
    }
    return std::nullopt;
  }
  using Key = std::decay_t<decltype(key_of(list[0]))>;
  absl::flat_hash_map<Key, int> seen;
  for (int later = 0; later < size; ++later) {
    if (const auto [it, added] = seen.emplace(key_of(list[later]), later); !added) {
      return Repeat{it->second, later};
    }
  }
  return std::nullopt;
}

template <typename List>
std::optional<Repeat> FirstRepeat(const List& list) {
  return FirstRepeat(list, [](const auto& value) { return value; });
}

class ManifestChecker {
 public:
  ManifestChecker(const v1::Manifest& manifest, absl::string_view origin,
                  const TextFormat::ParseInfoTree* locations)
      : manifest_(manifest), origin_(origin), locations_(locations) {}

  absl::Status Error(absl::string_view field, absl::string_view message) const {
    const int line = locations_ == nullptr ? 0 : FieldLine(manifest_, *locations_, field);
    std::string where = origin_;
    if (line > 0) absl::StrAppend(&where, ":", line);
    if (!where.empty()) absl::StrAppend(&where, ": ");
    return absl::InvalidArgumentError(absl::StrCat(where, field, ": ", message));
  }

  absl::Status Check() const {
    if (manifest_.items_size() == 0) return Error("items", "empty (list what to tune)");
    for (int i = 0; i < manifest_.items_size(); ++i) RETURN_IF_ERROR(CheckItem(i));
    if (!manifest_.arch().empty() && !IsGpuArch(manifest_.arch())) {
      return Error("arch", absl::StrCat("'", manifest_.arch(),
                                        "' is not an architecture like sm_90 or sm_90a"));
    }
    return absl::OkStatus();
  }

 private:
  // Checks one item. Strings are made only for an error: a manifest sent
  // over RPC may list a million items, each checked here.
  absl::Status CheckItem(int i) const {
    const v1::ManifestItem& item = manifest_.items(i);
    const auto field = [i](auto... rest) { return absl::StrCat("items[", i, "]", rest...); };
    if (item.family().empty()) return Error(field(".family"), "must be set");
    if (!IsFamilyName(item.family())) {
      return Error(field(".family"),
                   absl::StrCat("'", item.family(), "' is not a family name ([a-z][a-z0-9_]*)"));
    }
    for (int j = 0; j < item.dims_size(); ++j) {
      const v1::ManifestItem::DimValues& dim = item.dims(j);
      if (dim.name().empty()) return Error(field(".dims[", j, "].name"), "must be set");
      if (!IsIdentifier(dim.name())) {
        return Error(field(".dims[", j, "].name"),
                     absl::StrCat("'", dim.name(), "' is not an identifier"));
      }
      if (dim.values_size() == 0) {
        return Error(field(".dims[", j, "].values"), "empty (list at least one value)");
      }
      for (int v = 0; v < dim.values_size(); ++v) {
        if (dim.values(v) <= 0) {
          return Error(field(".dims[", j, "].values[", v, "]"),
                       absl::StrCat(dim.values(v), " is not positive"));
        }
      }
      if (const std::optional<Repeat> again = FirstRepeat(dim.values())) {
        return Error(field(".dims[", j, "].values[", again->later, "]"),
                     absl::StrCat(dim.values(again->later), " is listed twice"));
      }
    }
    if (const std::optional<Repeat> again = FirstRepeat(
            item.dims(), [](const v1::ManifestItem::DimValues& dim) -> const std::string& {
              return dim.name();
            })) {
      return Error(field(".dims[", again->later, "].name"),
                   absl::StrCat("'", item.dims(again->later).name(), "' is also dims[",
                                again->earlier, "]"));
    }
    for (int d = 0; d < item.dtypes_size(); ++d) {
      const v1::DType dtype = item.dtypes(d);
      if (dtype == v1::DTYPE_UNSPECIFIED) {
        return Error(field(".dtypes[", d, "]"), "DTYPE_UNSPECIFIED is not a dtype");
      }
      if (!v1::DType_IsValid(dtype)) {
        return Error(field(".dtypes[", d, "]"), absl::StrCat("unknown ", DTypeName(dtype)));
      }
    }
    if (const std::optional<Repeat> again = FirstRepeat(item.dtypes())) {
      return Error(field(".dtypes[", again->later, "]"),
                   absl::StrCat(DTypeName(static_cast<v1::DType>(item.dtypes(again->later))),
                                " is listed twice"));
    }
    return absl::OkStatus();
  }

  const v1::Manifest& manifest_;
  std::string origin_;
  const TextFormat::ParseInfoTree* locations_;
};

absl::Status Error(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// Checks item `i` against its family; returns the dtypes it stands for.
// Strings are made only for an error, as in ManifestChecker.
absl::StatusOr<std::vector<v1::DType>> CheckItemAgainstFamily(const v1::ManifestItem& item, int i,
                                                              const v1::KernelFamily& family) {
  const auto field = [i](auto... rest) { return absl::StrCat("items[", i, "]", rest...); };
  const auto dim_names = [&family] {
    std::vector<std::string> names;
    for (const v1::ProblemDimension& dim : family.dims()) names.push_back(dim.name());
    return absl::StrJoin(names, ", ");
  };
  for (int j = 0; j < item.dims_size(); ++j) {
    const v1::ManifestItem::DimValues& values = item.dims(j);
    const auto dim =
        std::find_if(family.dims().begin(), family.dims().end(),
                     [&](const v1::ProblemDimension& d) { return d.name() == values.name(); });
    if (dim == family.dims().end()) {
      return Error(field(".dims[", j, "]"),
                   absl::StrCat("'", values.name(), "' is not a dim of family '", family.name(),
                                "' (dims: ", dim_names(), ")"));
    }
    for (int v = 0; v < values.values_size(); ++v) {
      const int64_t value = values.values(v);
      if (dim->min() > 0 && value < dim->min()) {
        return Error(
            field(".dims[", j, "].values[", v, "]"),
            absl::StrCat(value, " is below the min ", dim->min(), " of dim '", dim->name(), "'"));
      }
      if (dim->max() > 0 && value > dim->max()) {
        return Error(
            field(".dims[", j, "].values[", v, "]"),
            absl::StrCat(value, " is above the max ", dim->max(), " of dim '", dim->name(), "'"));
      }
    }
  }
  for (const v1::ProblemDimension& dim : family.dims()) {
    const bool given =
        std::any_of(item.dims().begin(), item.dims().end(),
                    [&](const v1::ManifestItem::DimValues& d) { return d.name() == dim.name(); });
    if (!given) {
      return Error(field(".dims"),
                   absl::StrCat("missing '", dim.name(), "' of family '", family.name(), "'"));
    }
  }
  std::vector<v1::DType> dtypes;
  if (item.dtypes_size() == 0) {
    for (int dtype : family.dtypes()) dtypes.push_back(static_cast<v1::DType>(dtype));
    return dtypes;
  }
  for (int d = 0; d < item.dtypes_size(); ++d) {
    const v1::DType dtype = item.dtypes(d);
    if (std::find(family.dtypes().begin(), family.dtypes().end(), dtype) == family.dtypes().end()) {
      std::vector<std::string> supported;
      for (int known : family.dtypes()) {
        supported.push_back(DTypeName(static_cast<v1::DType>(known)));
      }
      return Error(field(".dtypes[", d, "]"),
                   absl::StrCat(DTypeName(dtype), " is not supported by family '", family.name(),
                                "' (", absl::StrJoin(supported, ", "), ")"));
    }
    dtypes.push_back(dtype);
  }
  return dtypes;
}

}  // namespace

int64_t SaturatingMultiply(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > std::numeric_limits<int64_t>::max() / b ? std::numeric_limits<int64_t>::max() : a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

namespace {

std::string ProblemKey(const ManifestProblem& problem) {
  return absl::StrCat(problem.family, "\n", FormatDims(problem.problem.dims()), "\n",
                      DTypeName(problem.problem.dtype()));
}

}  // namespace

absl::StatusOr<v1::Manifest> LoadManifestFile(const std::string& path) {
  v1::Manifest manifest;
  TextFormat::ParseInfoTree locations;
  RETURN_IF_ERROR(ParseTextProtoFile(path, manifest, locations));
  RETURN_IF_ERROR(ManifestChecker(manifest, path, &locations).Check());
  return manifest;
}

absl::Status ValidateManifest(const v1::Manifest& manifest, absl::string_view origin) {
  return ManifestChecker(manifest, origin, nullptr).Check();
}

absl::StatusOr<ManifestCount> CountManifest(
    const v1::Manifest& manifest,
    const absl::flat_hash_map<std::string, v1::KernelFamily>& families) {
  RETURN_IF_ERROR(ValidateManifest(manifest, ""));
  ManifestCount count;
  count.items.reserve(static_cast<size_t>(manifest.items_size()));
  for (int i = 0; i < manifest.items_size(); ++i) {
    const v1::ManifestItem& item = manifest.items(i);
    const auto family = families.find(item.family());
    if (family == families.end()) {
      std::vector<std::string> known;
      for (const auto& [name, unused] : families) known.push_back(name);
      std::sort(known.begin(), known.end());
      return Error(absl::StrCat("items[", i, "].family"),
                   absl::StrCat("unknown family '", item.family(), "' (known: ",
                                known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
    }
    ManifestCount::Item& counted = count.items.emplace_back();
    counted.family = &family->second;
    ASSIGN_OR_RETURN(counted.dtypes, CheckItemAgainstFamily(item, i, family->second));
    counted.problems_per_dtype = 1;
    for (const v1::ManifestItem::DimValues& dim : item.dims()) {
      counted.problems_per_dtype =
          SaturatingMultiply(counted.problems_per_dtype, dim.values_size());
    }
    count.problems = SaturatingAdd(count.problems,
                                   SaturatingMultiply(counted.problems_per_dtype,
                                                      static_cast<int64_t>(counted.dtypes.size())));
  }
  return count;
}

absl::Status CheckManifestCount(const ManifestCount& count) {
  if (count.problems <= kMaxManifestProblems) return absl::OkStatus();
  return Error("items", absl::StrCat("more than ", kMaxManifestProblems, " problems (",
                                     CountText(count.problems), ")"));
}

absl::StatusOr<std::vector<ManifestProblem>> ExpandManifest(
    const v1::Manifest& manifest,
    const absl::flat_hash_map<std::string, v1::KernelFamily>& families) {
  ASSIGN_OR_RETURN(const ManifestCount count, CountManifest(manifest, families));
  RETURN_IF_ERROR(CheckManifestCount(count));

  std::vector<ManifestProblem> problems;
  std::unordered_set<std::string> seen;
  for (int i = 0; i < manifest.items_size(); ++i) {
    const v1::ManifestItem& item = manifest.items(i);
    const int dim_count = item.dims_size();
    std::vector<int> digits(dim_count, 0);
    while (true) {
      for (v1::DType dtype : count.items[static_cast<size_t>(i)].dtypes) {
        ManifestProblem problem;
        problem.family = item.family();
        problem.item = i;
        for (int j = 0; j < dim_count; ++j) {
          (*problem.problem.mutable_dims())[item.dims(j).name()] = item.dims(j).values(digits[j]);
        }
        problem.problem.set_dtype(dtype);
        if (seen.insert(ProblemKey(problem)).second) problems.push_back(std::move(problem));
      }
      int j = dim_count - 1;
      for (; j >= 0; --j) {
        if (++digits[j] < item.dims(j).values_size()) break;
        digits[j] = 0;
      }
      if (j < 0) break;
    }
  }
  return problems;
}

std::string CountText(int64_t count) {
  return count == std::numeric_limits<int64_t>::max() ? "more than 2^63" : absl::StrCat(count);
}

int ShardOf(const ManifestProblem& problem, int count) {
  if (count <= 1) return 0;
  const std::string digest = Sha256Hex(ProblemKey(problem));
  uint64_t value = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = digest[i];
    value = (value << 4) | static_cast<uint64_t>(absl::ascii_isdigit(c) ? c - '0' : c - 'a' + 10);
  }
  return static_cast<int>(value % static_cast<uint64_t>(count));
}

absl::StatusOr<std::vector<ManifestProblem>> ShardProblems(
    const std::vector<ManifestProblem>& problems, int index, int count) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard count ", count, " is negative"));
  }
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard index ", index, " is negative"));
  }
  if (count == 0) {
    if (index != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard index ", index, " without a shard count"));
    }
    return problems;
  }
  if (index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard index ", index, " is not below the shard count ", count));
  }
  std::vector<ManifestProblem> shard;
  for (const ManifestProblem& problem : problems) {
    if (ShardOf(problem, count) == index) shard.push_back(problem);
  }
  return shard;
}

}  // namespace autotune::kernels
