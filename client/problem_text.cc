#include "client/problem_text.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace autotune::client {
namespace {

struct DTypeNames {
  v1::DType dtype;
  absl::string_view short_name;
};

constexpr DTypeNames kDTypes[] = {
    {v1::FLOAT32, "fp32"},        {v1::FLOAT16, "fp16"}, {v1::BFLOAT16, "bf16"},
    {v1::FLOAT64, "fp64"},        {v1::INT8, "int8"},    {v1::INT32, "int32"},
    {v1::INT64, "int64"},         {v1::UINT8, "uint8"},  {v1::FLOAT8_E4M3, "fp8e4m3"},
    {v1::FLOAT8_E5M2, "fp8e5m2"},
};

bool IsIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  if (!absl::ascii_isalpha(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> ParseDimsText(absl::string_view text) {
  std::map<std::string, int64_t> dims;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("no dimensions; expected name=value,name=value");
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError("empty item; expected name=value,name=value");
    }
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not name=value"));
    }
    const absl::string_view name = absl::StripAsciiWhitespace(item.substr(0, eq));
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(eq + 1));
    if (!IsIdentifier(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a dimension name (letters, digits, '_')"));
    }
    int64_t number = 0;
    if (!absl::SimpleAtoi(value, &number)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension '", name, "' has value '", value, "', not an integer"));
    }
    if (!dims.emplace(std::string(name), number).second) {
      return absl::InvalidArgumentError(absl::StrCat("dimension '", name, "' is given twice"));
    }
  }
  return dims;
}

absl::StatusOr<v1::DType> ParseDTypeText(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  for (const DTypeNames& names : kDTypes) {
    if (lower == names.short_name || lower == absl::AsciiStrToLower(v1::DType_Name(names.dtype))) {
      return names.dtype;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", text, "'; expected one of ", DTypeShortNameList()));
}

absl::string_view DTypeShortName(v1::DType dtype) {
  for (const DTypeNames& names : kDTypes) {
    if (names.dtype == dtype) return names.short_name;
  }
  return "unspecified";
}

std::string DTypeShortNameList() {
  std::vector<absl::string_view> names;
  for (const DTypeNames& entry : kDTypes) names.push_back(entry.short_name);
  return absl::StrJoin(names, ", ");
}

std::string FormatParams(const google::protobuf::Map<std::string, int64_t>& params) {
  std::vector<std::pair<std::string, int64_t>> sorted(params.begin(), params.end());
  std::sort(sorted.begin(), sorted.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

std::string FormatDevice(const v1::Device& device) {
  std::vector<std::string> details;
  if (device.compute_capability() > 0) {
    details.push_back(absl::StrCat("sm_", device.compute_capability()));
  }
  if (device.sm_count() > 0) details.push_back(absl::StrCat(device.sm_count(), " SMs"));
  std::string name = device.name().empty() ? "any device" : device.name();
  if (details.empty()) return name;
  return absl::StrCat(name, " (", absl::StrJoin(details, ", "), ")");
}

}  // namespace autotune::client
