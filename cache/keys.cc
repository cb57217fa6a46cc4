#include "cache/keys.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cache/strings.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace autotune::cache {
namespace {

struct DTypeNames {
  v1::DType dtype;
  std::string_view short_name;
  std::string_view long_name;  // the enum name, lower-cased
};

constexpr std::array<DTypeNames, 10> kDTypeNames = {{
    {v1::FLOAT32, "fp32", "float32"},
    {v1::FLOAT16, "fp16", "float16"},
    {v1::BFLOAT16, "bf16", "bfloat16"},
    {v1::FLOAT64, "fp64", "float64"},
    {v1::INT8, "int8", "int8"},
    {v1::INT32, "int32", "int32"},
    {v1::INT64, "int64", "int64"},
    {v1::UINT8, "uint8", "uint8"},
    {v1::FLOAT8_E4M3, "fp8e4m3", "float8_e4m3"},
    {v1::FLOAT8_E5M2, "fp8e5m2", "float8_e5m2"},
}};

bool IsIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  if (!absl::ascii_isalpha(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // EVP_Digest only fails on allocation failure inside OpenSSL; there is no
  // sensible digest to return then.
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string CanonicalDims(const google::protobuf::Map<std::string, int64_t>& dims) {
  std::vector<std::pair<absl::string_view, int64_t>> sorted;
  sorted.reserve(dims.size());
  for (const auto& [name, value] : dims) sorted.emplace_back(name, value);
  std::sort(sorted.begin(), sorted.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

absl::StatusOr<std::map<std::string, int64_t>> ParseDims(std::string_view std_text) {
  const absl::string_view text = ToAbsl(std_text);
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

std::string FamilyContentHash(const v1::KernelFamily& family) {
  v1::KernelFamily copy = family;
  copy.clear_source_file();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream output(&bytes);
    google::protobuf::io::CodedOutputStream coded(&output);
    // Map fields (none today) and unknown fields would otherwise serialize
    // in an unspecified order and change the hash between runs.
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
  }
  return Sha256Hex(bytes);
}

std::string_view DTypeName(v1::DType dtype) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.dtype == dtype) return names.short_name;
  }
  return dtype == v1::DTYPE_UNSPECIFIED ? "unspecified" : "unknown";
}

absl::StatusOr<v1::DType> ParseDType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(ToAbsl(name)));
  for (const DTypeNames& names : kDTypeNames) {
    if (lower == names.short_name || lower == names.long_name) return names.dtype;
  }
  std::vector<absl::string_view> known;
  for (const DTypeNames& names : kDTypeNames) known.push_back(ToAbsl(names.short_name));
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", ToAbsl(name), "' (expected one of ", absl::StrJoin(known, ", "), ")"));
}

absl::StatusOr<int64_t> NvrtcVersionNumber(std::string_view std_version) {
  const absl::string_view version = ToAbsl(std_version);
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

}  // namespace autotune::cache
