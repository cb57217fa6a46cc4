#include "proto/problem.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace autotune {
namespace {

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {v1::FLOAT32, "fp32", "float32", 4, "float", false},
    {v1::FLOAT16, "fp16", "float16", 2, "__half", false},
    {v1::BFLOAT16, "bf16", "bfloat16", 2, "__nv_bfloat16", false},
    {v1::FLOAT64, "fp64", "float64", 8, "double", false},
    {v1::INT8, "int8", "int8", 1, "signed char", true},
    {v1::INT32, "int32", "int32", 4, "int", true},
    {v1::INT64, "int64", "int64", 8, "long long", true},
    {v1::UINT8, "uint8", "uint8", 1, "unsigned char", true},
    {v1::FLOAT8_E4M3, "fp8e4m3", "float8_e4m3", 1, "__nv_fp8_e4m3", false},
    {v1::FLOAT8_E5M2, "fp8e5m2", "float8_e5m2", 1, "__nv_fp8_e5m2", false},
}};

}  // namespace

const DTypeInfo* FindDType(v1::DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

std::string DTypeName(v1::DType dtype) {
  if (const DTypeInfo* info = FindDType(dtype)) return std::string(info->name);
  if (dtype == v1::DTYPE_UNSPECIFIED) return "unspecified";
  return absl::StrCat("dtype ", static_cast<int>(dtype));
}

std::string DTypeNameList() {
  std::vector<absl::string_view> names;
  for (const DTypeInfo& info : kDTypes) names.push_back(info.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<v1::DType> ParseDType(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  for (const DTypeInfo& info : kDTypes) {
    if (lower == info.name || lower == info.long_name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", text, "' (expected one of ", DTypeNameList(), ")"));
}

int64_t DTypeBytes(v1::DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info == nullptr ? 0 : info->bytes;
}

std::string FormatDims(const google::protobuf::Map<std::string, int64_t>& dims) {
  std::vector<std::pair<absl::string_view, int64_t>> sorted;
  sorted.reserve(dims.size());
  for (const auto& [name, value] : dims) sorted.emplace_back(name, value);
  std::sort(sorted.begin(), sorted.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

absl::StatusOr<std::map<std::string, int64_t>> ParseDims(absl::string_view text) {
  std::map<std::string, int64_t> dims;
  if (absl::StripAsciiWhitespace(text).empty()) return dims;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("dims: empty item in '", text, "'"));
    }
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("dims: '", item, "' has no value"));
    }
    const absl::string_view name = absl::StripAsciiWhitespace(item.substr(0, eq));
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(eq + 1));
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("dims: '", item, "' has no name"));
    }
    if (!IsIdentifier(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dims: '", name, "' is not a name (letters, digits, '_')"));
    }
    if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("dims: '", name, "' has no value"));
    }
    int64_t number = 0;
    if (!absl::SimpleAtoi(value, &number)) {
      return absl::InvalidArgumentError(absl::StrCat("dims: '", item, "' is not an integer"));
    }
    if (!dims.emplace(std::string(name), number).second) {
      return absl::InvalidArgumentError(absl::StrCat("dims: '", name, "' is given twice"));
    }
  }
  return dims;
}

bool IsIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  if (!absl::ascii_isalpha(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

bool IsFamilyName(absl::string_view name) {
  if (name.empty() || !absl::ascii_islower(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
  });
}

bool IsGpuArch(absl::string_view arch) {
  if (!absl::ConsumePrefix(&arch, "sm_")) return false;
  if (!arch.empty() && (arch.back() == 'a' || arch.back() == 'f')) arch.remove_suffix(1);
  return arch.size() >= 2 && arch.size() <= 3 &&
         std::all_of(arch.begin(), arch.end(), [](char c) { return absl::ascii_isdigit(c); });
}

bool ArchRunsOn(absl::string_view arch, int compute_capability) {
  if (!IsGpuArch(arch)) return false;
  absl::string_view digits = arch.substr(3);
  const bool family = digits.back() == 'f';
  if (digits.back() == 'a' || family) digits.remove_suffix(1);
  int built = 0;
  if (!absl::SimpleAtoi(digits, &built)) return false;
  if (family) return built / 10 == compute_capability / 10 && built <= compute_capability;
  return built == compute_capability;
}

absl::StatusOr<int64_t> NvrtcVersionNumber(absl::string_view version) {
  const std::vector<absl::string_view> parts = absl::StrSplit(version, '.');
  int64_t major = 0;
  int64_t minor = 0;
  const auto all_digits = [](absl::string_view s) {
    return !s.empty() && s.size() <= 6 &&
           std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
  };
  if (parts.size() != 2 || !all_digits(parts[0]) || !all_digits(parts[1]) ||
      !absl::SimpleAtoi(parts[0], &major) || !absl::SimpleAtoi(parts[1], &minor) || minor >= 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvrtc version '", version, "' is not MAJOR.MINOR (e.g. \"12.8\")"));
  }
  return major * 1000 + minor;
}

std::string ProblemContext(absl::string_view family, const v1::Problem& problem) {
  return absl::StrCat(family, " ", FormatDims(problem.dims()), " ", DTypeName(problem.dtype()));
}

absl::Status ValidateProblem(const v1::KernelFamily& family, const v1::Problem& problem,
                             absl::string_view field) {
  std::vector<std::string> dim_names;
  for (const v1::ProblemDimension& dim : family.dims()) dim_names.push_back(dim.name());
  const std::string known = absl::StrJoin(dim_names, ", ");
  for (const v1::ProblemDimension& dim : family.dims()) {
    const auto it = problem.dims().find(dim.name());
    if (it == problem.dims().end()) {
      // A misspelt dim is both missing and unknown: name the one given too.
      std::vector<std::string> unknown;
      for (const auto& [name, value] : problem.dims()) {
        if (std::find(dim_names.begin(), dim_names.end(), name) == dim_names.end()) {
          unknown.push_back(absl::StrCat("'", name, "'"));
        }
      }
      std::sort(unknown.begin(), unknown.end());
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".dims: missing '", dim.name(), "' (family '", family.name(),
          "' has dims: ", known, ")",
          unknown.empty()
              ? ""
              : absl::StrCat("; ", absl::StrJoin(unknown, ", "),
                             unknown.size() == 1 ? " is not one of them" : " are not among them")));
    }
    const std::string dim_field = absl::StrCat(field, ".dims['", dim.name(), "']");
    const int64_t value = it->second;
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(dim_field, ": ", value, " is not positive"));
    }
    if (dim.min() > 0 && value < dim.min()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dim_field, ": ", value, " is below the min ", dim.min()));
    }
    if (dim.max() > 0 && value > dim.max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dim_field, ": ", value, " is above the max ", dim.max()));
    }
    if (static_cast<double>(value) > kMaxExactInteger) {
      return absl::InvalidArgumentError(absl::StrCat(dim_field, ": ", value, " is out of range"));
    }
  }
  // Sorted, so the first unknown dim reported does not depend on map order.
  std::vector<std::string> given;
  for (const auto& [name, value] : problem.dims()) given.push_back(name);
  std::sort(given.begin(), given.end());
  for (const std::string& name : given) {
    if (std::find(dim_names.begin(), dim_names.end(), name) == dim_names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".dims['", name,
                                                     "']: not a dim of family '", family.name(),
                                                     "' (dims: ", known, ")"));
    }
  }
  if (std::find(family.dtypes().begin(), family.dtypes().end(), problem.dtype()) ==
      family.dtypes().end()) {
    std::vector<std::string> supported;
    for (int dtype : family.dtypes()) supported.push_back(DTypeName(static_cast<v1::DType>(dtype)));
    return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: ", DTypeName(problem.dtype()),
                                                   " is not supported by family '", family.name(),
                                                   "' (", absl::StrJoin(supported, ", "), ")"));
  }
  return absl::OkStatus();
}

int64_t ConfigCount(const v1::KernelFamily& family) {
  int64_t count = 1;
  for (const v1::TunableParameter& param : family.params()) {
    if (__builtin_mul_overflow(count, static_cast<int64_t>(param.values_size()), &count)) {
      return std::numeric_limits<int64_t>::max();
    }
  }
  return count;
}

std::string SerializeDeterministically(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream output(&bytes);
    google::protobuf::io::CodedOutputStream coded(&output);
    // Map fields and unknown fields would otherwise serialize in an
    // unspecified order.
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }  // the streams trim `bytes` to what was written when they go
  return bytes;
}

std::string FamilyContentHash(const v1::KernelFamily& family) {
  v1::KernelFamily copy = family;
  copy.clear_source_file();
  for (v1::SourceHeader& header : *copy.mutable_headers()) header.clear_file();
  return Sha256Hex(SerializeDeterministically(copy));
}

}  // namespace autotune
