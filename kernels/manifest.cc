#include "kernels/manifest.h"

#include <algorithm>
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
  absl::Status CheckItem(int i) const {
    const v1::ManifestItem& item = manifest_.items(i);
    const std::string field = absl::StrCat("items[", i, "]");
    if (item.family().empty()) return Error(absl::StrCat(field, ".family"), "must be set");
    if (!IsFamilyName(item.family())) {
      return Error(absl::StrCat(field, ".family"),
                   absl::StrCat("'", item.family(), "' is not a family name ([a-z][a-z0-9_]*)"));
    }
    // Sets, not pairwise scans: a manifest sent over RPC may list millions.
    absl::flat_hash_map<std::string, int> dim_names;
    for (int j = 0; j < item.dims_size(); ++j) {
      const v1::ManifestItem::DimValues& dim = item.dims(j);
      const std::string dim_field = absl::StrCat(field, ".dims[", j, "]");
      if (dim.name().empty()) return Error(absl::StrCat(dim_field, ".name"), "must be set");
      if (!IsIdentifier(dim.name())) {
        return Error(absl::StrCat(dim_field, ".name"),
                     absl::StrCat("'", dim.name(), "' is not an identifier"));
      }
      if (const auto [earlier, added] = dim_names.emplace(dim.name(), j); !added) {
        return Error(absl::StrCat(dim_field, ".name"),
                     absl::StrCat("'", dim.name(), "' is also dims[", earlier->second, "]"));
      }
      if (dim.values_size() == 0) {
        return Error(absl::StrCat(dim_field, ".values"), "empty (list at least one value)");
      }
      absl::flat_hash_set<int64_t> values;
      for (int v = 0; v < dim.values_size(); ++v) {
        if (dim.values(v) <= 0) {
          return Error(absl::StrCat(dim_field, ".values[", v, "]"),
                       absl::StrCat(dim.values(v), " is not positive"));
        }
        if (!values.insert(dim.values(v)).second) {
          return Error(absl::StrCat(dim_field, ".values[", v, "]"),
                       absl::StrCat(dim.values(v), " is listed twice"));
        }
      }
    }
    absl::flat_hash_set<int> dtypes;
    for (int d = 0; d < item.dtypes_size(); ++d) {
      const v1::DType dtype = item.dtypes(d);
      const std::string dtype_field = absl::StrCat(field, ".dtypes[", d, "]");
      if (dtype == v1::DTYPE_UNSPECIFIED) {
        return Error(dtype_field, "DTYPE_UNSPECIFIED is not a dtype");
      }
      if (!v1::DType_IsValid(dtype))
        return Error(dtype_field, absl::StrCat("unknown ", DTypeName(dtype)));
      if (!dtypes.insert(dtype).second) {
        return Error(dtype_field, absl::StrCat(DTypeName(dtype), " is listed twice"));
      }
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

// Checks `item` against its family; returns the dtypes it stands for.
absl::StatusOr<std::vector<v1::DType>> CheckItemAgainstFamily(const v1::ManifestItem& item,
                                                              const std::string& field,
                                                              const v1::KernelFamily& family) {
  std::vector<std::string> dim_names;
  for (const v1::ProblemDimension& dim : family.dims()) dim_names.push_back(dim.name());
  for (int j = 0; j < item.dims_size(); ++j) {
    const v1::ManifestItem::DimValues& values = item.dims(j);
    const std::string dim_field = absl::StrCat(field, ".dims[", j, "]");
    const auto dim =
        std::find_if(family.dims().begin(), family.dims().end(),
                     [&](const v1::ProblemDimension& d) { return d.name() == values.name(); });
    if (dim == family.dims().end()) {
      return Error(dim_field,
                   absl::StrCat("'", values.name(), "' is not a dim of family '", family.name(),
                                "' (dims: ", absl::StrJoin(dim_names, ", "), ")"));
    }
    for (int v = 0; v < values.values_size(); ++v) {
      const int64_t value = values.values(v);
      const std::string value_field = absl::StrCat(dim_field, ".values[", v, "]");
      if (dim->min() > 0 && value < dim->min()) {
        return Error(value_field, absl::StrCat(value, " is below the min ", dim->min(), " of dim '",
                                               dim->name(), "'"));
      }
      if (dim->max() > 0 && value > dim->max()) {
        return Error(value_field, absl::StrCat(value, " is above the max ", dim->max(), " of dim '",
                                               dim->name(), "'"));
      }
    }
  }
  for (const std::string& name : dim_names) {
    const bool given =
        std::any_of(item.dims().begin(), item.dims().end(),
                    [&](const v1::ManifestItem::DimValues& d) { return d.name() == name; });
    if (!given) {
      return Error(absl::StrCat(field, ".dims"),
                   absl::StrCat("missing '", name, "' of family '", family.name(), "'"));
    }
  }
  std::vector<v1::DType> dtypes;
  if (item.dtypes_size() == 0) {
    for (int dtype : family.dtypes()) dtypes.push_back(static_cast<v1::DType>(dtype));
    return dtypes;
  }
  std::vector<std::string> supported;
  for (int dtype : family.dtypes()) supported.push_back(DTypeName(static_cast<v1::DType>(dtype)));
  for (int d = 0; d < item.dtypes_size(); ++d) {
    const v1::DType dtype = item.dtypes(d);
    if (std::find(family.dtypes().begin(), family.dtypes().end(), dtype) == family.dtypes().end()) {
      return Error(absl::StrCat(field, ".dtypes[", d, "]"),
                   absl::StrCat(DTypeName(dtype), " is not supported by family '", family.name(),
                                "' (", absl::StrJoin(supported, ", "), ")"));
    }
    dtypes.push_back(dtype);
  }
  return dtypes;
}

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

absl::StatusOr<std::vector<ManifestProblem>> ExpandManifest(
    const v1::Manifest& manifest,
    const absl::flat_hash_map<std::string, v1::KernelFamily>& families) {
  RETURN_IF_ERROR(ValidateManifest(manifest, ""));
  std::vector<std::vector<v1::DType>> item_dtypes;
  int64_t total = 0;
  for (int i = 0; i < manifest.items_size(); ++i) {
    const v1::ManifestItem& item = manifest.items(i);
    const std::string field = absl::StrCat("items[", i, "]");
    const auto family = families.find(item.family());
    if (family == families.end()) {
      std::vector<std::string> known;
      for (const auto& [name, unused] : families) known.push_back(name);
      std::sort(known.begin(), known.end());
      return Error(absl::StrCat(field, ".family"),
                   absl::StrCat("unknown family '", item.family(), "' (known: ",
                                known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
    }
    ASSIGN_OR_RETURN(std::vector<v1::DType> dtypes,
                     CheckItemAgainstFamily(item, field, family->second));
    int64_t count = static_cast<int64_t>(dtypes.size());
    for (const v1::ManifestItem::DimValues& dim : item.dims()) {
      count = count > kMaxManifestProblems ? count : count * dim.values_size();
    }
    total += std::min(count, kMaxManifestProblems + 1);
    if (total > kMaxManifestProblems) {
      return Error("items", absl::StrCat("more than ", kMaxManifestProblems, " problems"));
    }
    item_dtypes.push_back(std::move(dtypes));
  }

  std::vector<ManifestProblem> problems;
  std::unordered_set<std::string> seen;
  for (int i = 0; i < manifest.items_size(); ++i) {
    const v1::ManifestItem& item = manifest.items(i);
    const int dim_count = item.dims_size();
    std::vector<int> digits(dim_count, 0);
    while (true) {
      for (v1::DType dtype : item_dtypes[i]) {
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
