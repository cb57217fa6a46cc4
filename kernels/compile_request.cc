#include "kernels/compile_request.h"

#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace autotune::kernels {
namespace {

// A netstring: "<decimal length>:<bytes>,".
void AppendField(std::string* out, const std::string& field) {
  absl::StrAppend(out, field.size(), ":", field, ",");
}

}  // namespace

std::string CompileKey(const CompileRequest& request, const std::string& nvrtc_version) {
  std::string bytes = "autotune.compile.v1";
  AppendField(&bytes, request.source);
  AppendField(&bytes, request.name_expression);
  AppendField(&bytes, absl::StrCat(request.options.size()));
  for (const std::string& option : request.options) AppendField(&bytes, option);
  AppendField(&bytes, request.arch);
  AppendField(&bytes, nvrtc_version);
  return Sha256Hex(bytes);
}

}  // namespace autotune::kernels
