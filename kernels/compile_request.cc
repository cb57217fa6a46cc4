#include "kernels/compile_request.h"

#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace autotune::kernels {
namespace {

// A netstring: "<decimal length>:<bytes>,".
void AppendField(std::string* out, const std::string& field) {
  absl::StrAppend(out, field.size(), ":", field, ",");
}

bool IsIdentifier(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

constexpr absl::string_view kAllowed =
    "allowed: -D<NAME>[=<value>], -U<NAME>, -std=c++11|c++14|c++17|c++20, -use_fast_math, "
    "-ftz=, -prec-div=, -prec-sqrt=, -fmad= (true|false), -lineinfo, -maxrregcount=<16..255>, "
    "-default-device, -restrict, -extra-device-vectorization, -w";

}  // namespace

absl::Status CheckCompileOption(absl::string_view option) {
  const auto refuse = [option](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", absl::CHexEscape(option.substr(0, 120)),
                                                   option.size() > 120 ? "..." : "", "' ", why,
                                                   " (", kAllowed, ")"));
  };
  absl::string_view name = option;
  if (!absl::ConsumePrefix(&name, "-")) return refuse("is not an NVRTC option");
  absl::ConsumePrefix(&name, "-");
  if (absl::StartsWith(name, "arch") || absl::StartsWith(name, "gpu-architecture")) {
    return refuse("sets the architecture, which the compiler chooses");
  }
  // -D and -U, joined or with =.
  absl::string_view macro;
  bool define = false;
  if (absl::StartsWith(option, "-D") || absl::ConsumePrefix(&name, "define-macro=")) {
    macro = absl::StartsWith(option, "-D") ? option.substr(2) : name;
    define = true;
  } else if (absl::StartsWith(option, "-U") || absl::ConsumePrefix(&name, "undefine-macro=")) {
    macro = absl::StartsWith(option, "-U") ? option.substr(2) : name;
  }
  if (!macro.empty() || absl::StartsWith(option, "-D") || absl::StartsWith(option, "-U")) {
    const size_t equals = macro.find('=');
    if (!IsIdentifier(macro.substr(0, equals))) return refuse("does not name a C identifier");
    if (equals != absl::string_view::npos && !define) return refuse("undefines with a value");
    if (absl::StrContains(macro, '\n') || absl::StrContains(macro, '\r')) {
      return refuse("holds a line break");
    }
    return absl::OkStatus();
  }
  static constexpr absl::string_view kFlags[] = {"use_fast_math",
                                                 "lineinfo",
                                                 "generate-line-info",
                                                 "default-device",
                                                 "device-as-default-execution-space",
                                                 "restrict",
                                                 "extra-device-vectorization",
                                                 "w",
                                                 "disable-warnings"};
  for (absl::string_view flag : kFlags) {
    if (name == flag) return absl::OkStatus();
  }
  const size_t equals = name.find('=');
  if (equals == absl::string_view::npos) return refuse("is not an allowed NVRTC option");
  const absl::string_view key = name.substr(0, equals);
  const absl::string_view value = name.substr(equals + 1);
  if (key == "std") {
    if (value == "c++11" || value == "c++14" || value == "c++17" || value == "c++20") {
      return absl::OkStatus();
    }
    return refuse("names no language standard NVRTC takes");
  }
  if (key == "ftz" || key == "prec-div" || key == "prec-sqrt" || key == "fmad") {
    if (value == "true" || value == "false") return absl::OkStatus();
    return refuse("takes true or false");
  }
  if (key == "maxrregcount") {
    int count = 0;
    if (absl::SimpleAtoi(value, &count) && count >= 16 && count <= 255) return absl::OkStatus();
    return refuse("takes a register count from 16 to 255");
  }
  return refuse("is not an allowed NVRTC option");
}

std::string CompileKey(const CompileRequest& request, const std::string& nvrtc_version) {
  return CompileKeyer(request.source, request.arch, nvrtc_version, request.headers)
      .Key(request.name_expression, request.options);
}

CompileKeyer::CompileKeyer(const std::string& source, std::string arch, std::string nvrtc_version,
                           std::vector<SourceHeader> headers)
    : arch_(std::move(arch)), nvrtc_version_(std::move(nvrtc_version)) {
  std::string prefix = "autotune.compile.v1";
  AppendField(&prefix, source);
  after_source_.Update(prefix);
  if (!headers.empty()) {
    AppendField(&headers_, absl::StrCat(headers.size()));
    for (const SourceHeader& header : headers) {
      AppendField(&headers_, header.name);
      AppendField(&headers_, header.text);
    }
  }
}

std::string CompileKeyer::Key(const std::string& name_expression,
                              const std::vector<std::string>& options) const {
  std::string bytes;
  AppendField(&bytes, name_expression);
  AppendField(&bytes, absl::StrCat(options.size()));
  for (const std::string& option : options) AppendField(&bytes, option);
  AppendField(&bytes, arch_);
  AppendField(&bytes, nvrtc_version_);
  Sha256 hash = after_source_;
  hash.Update(bytes);
  hash.Update(headers_);
  return hash.HexDigest();
}

}  // namespace autotune::kernels
