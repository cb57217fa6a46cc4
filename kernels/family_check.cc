#include "kernels/family_check.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "kernels/cubin.h"
#include "kernels/search_space.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

// Compiler logs are cut to this many lines per finding.
constexpr int kMaxLogLines = 30;
// Pointers and tensor maps as the worker and the loader pass them.
constexpr int64_t kPointerBytes = 8;
constexpr int64_t kTensorMapBytes = 128;

struct Argument {
  std::string what;   // "buffer 'x'", "scalar 'n' (int32)"
  std::string field;  // the descriptor's: "buffers[0]", "scalars[1]"
  int64_t bytes = 0;
  bool scalar = false;
};

std::vector<Argument> ArgumentsOf(const v1::KernelFamily& family, const CheckCompile& compile) {
  std::vector<Argument> arguments;
  for (int i = 0; i < family.buffers_size(); ++i) {
    arguments.push_back({.what = absl::StrCat("buffer '", family.buffers(i).name(), "'"),
                         .field = absl::StrCat("buffers[", i, "]"),
                         .bytes = kPointerBytes});
  }
  if (!compile.reference) {
    for (int i = 0; i < family.tensor_maps_size(); ++i) {
      arguments.push_back(
          {.what = absl::StrCat("tensor map over '", family.tensor_maps(i).buffer(), "'"),
           .field = absl::StrCat("tensor_maps[", i, "]"),
           .bytes = kTensorMapBytes});
    }
  }
  for (int i = 0; i < family.scalars_size(); ++i) {
    const v1::ScalarArgument& scalar = family.scalars(i);
    const v1::DType dtype =
        scalar.dtype() == v1::DTYPE_UNSPECIFIED ? compile.dtype : scalar.dtype();
    arguments.push_back(
        {.what = absl::StrCat("scalar '", scalar.name(), "' (", DTypeName(dtype), ")"),
         .field = absl::StrCat("scalars[", i, "]"),
         .bytes = DTypeBytes(dtype),
         .scalar = true});
  }
  return arguments;
}

}  // namespace

std::vector<int64_t> TunedKernelParameterBytes(const v1::KernelFamily& family, v1::DType dtype) {
  CheckCompile tuned;
  tuned.dtype = dtype;
  std::vector<int64_t> bytes;
  for (const Argument& argument : ArgumentsOf(family, tuned)) {
    bytes.push_back(argument.bytes);
  }
  return bytes;
}

namespace {

// What to write for an argument the kernel takes as `bytes` bytes.
std::string SizeFix(const Argument& argument, int64_t bytes) {
  if (!argument.scalar) {
    return argument.bytes == kTensorMapBytes
               ? "declare that parameter `const __grid_constant__ CUtensorMap`"
               : "declare that parameter a pointer";
  }
  std::vector<std::string> dtypes;
  for (int d = v1::DType_MIN; d <= v1::DType_MAX; ++d) {
    const auto dtype = static_cast<v1::DType>(d);
    if (!v1::DType_IsValid(d) || dtype == v1::DTYPE_UNSPECIFIED) continue;
    const std::string name = v1::DType_Name(dtype);  // the first name of an alias
    if (DTypeBytes(dtype) == bytes && absl::c_find(dtypes, name) == dtypes.end()) {
      dtypes.push_back(name);
    }
  }
  if (dtypes.empty()) return "or change the kernel's parameter to match";
  return absl::StrCat("give ", argument.field, " `dtype: ", absl::StrJoin(dtypes, "` or `dtype: "),
                      "`, or change the kernel's parameter to match");
}

// The parameter-list finding, or "" when the kernel takes what it is passed;
// `field` gets the descriptor field it is about.
std::string CompareArguments(const std::vector<int64_t>& sizes,
                             const std::vector<Argument>& arguments, std::string* field) {
  const auto listed = [](const std::vector<Argument>& all) {
    std::vector<std::string> parts;
    for (const Argument& argument : all) {
      parts.push_back(absl::StrCat(argument.what, " ", argument.bytes, " B"));
    }
    return absl::StrJoin(parts, ", ");
  };
  if (sizes.size() != arguments.size()) {
    return absl::StrCat("the kernel takes ", sizes.size(), " parameters (",
                        absl::StrJoin(sizes, ", "), " bytes); the service passes ",
                        arguments.size(), ": ", listed(arguments),
                        " (buffers, then tensor maps, then scalars)");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] != arguments[i].bytes) {
      *field = arguments[i].field;
      return absl::StrCat("the kernel's parameter ", i + 1, " (of ", sizes.size(),
                          ", counted from 1) is ", sizes[i], " bytes; the service passes ",
                          arguments[i].what, " there, ", arguments[i].bytes,
                          " bytes: ", SizeFix(arguments[i], sizes[i]));
    }
  }
  return "";
}

// The names of the __global__ functions `source` defines, in order: the
// identifier before the first '(' after each "__global__" that is not an
// attribute such as __launch_bounds__(256) (a lexical look, enough for a
// hint).
std::vector<std::string> GlobalFunctions(absl::string_view source) {
  std::vector<std::string> names;
  for (size_t at = source.find("__global__"); at != source.npos;
       at = source.find("__global__", at + 1)) {
    size_t from = at + 10;
    while (true) {
      const size_t paren = source.find('(', from);
      if (paren == source.npos) return names;
      size_t end = paren;
      while (end > from && absl::ascii_isspace(source[end - 1])) --end;
      size_t begin = end;
      while (begin > from && (absl::ascii_isalnum(source[begin - 1]) || source[begin - 1] == '_')) {
        --begin;
      }
      const absl::string_view name = source.substr(begin, end - begin);
      if (!absl::StartsWith(name, "__")) {
        if (!name.empty()) names.emplace_back(name);
        break;
      }
      const size_t close = source.find(')', paren);  // the attribute's arguments
      if (close == source.npos) return names;
      from = close + 1;
    }
  }
  return names;
}

// The compiler's messages, without blank lines and the closing count, cut
// to kMaxLogLines; with a hint for a header that is not shipped.
std::string CompileFailure(const v1::KernelFamily& family, const CheckCompile& compile,
                           absl::string_view log, std::string* finding_field) {
  std::vector<std::string> lines;
  int kept = 0;
  int cut = 0;
  std::string hint;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (absl::StrContains(line, " detected in the compilation of ")) continue;
    if (absl::StrContains(line, "cannot open source file") && hint.empty()) {
      hint =
          "sources are single files: a header of your own goes into the descriptor "
          "(headers { name: \"x.h\" file: \"x.h\" }), and only the toolkit's headers are found "
          "besides";
    }
    if (kept < kMaxLogLines) {
      lines.emplace_back(line);
      ++kept;
    } else {
      ++cut;
    }
  }
  if (cut > 0) lines.push_back(absl::StrCat("... ", cut, " more lines"));
  const std::string& name =
      compile.reference ? family.reference().kernel_name() : family.kernel_name();
  absl::string_view base = absl::string_view(name).substr(0, name.find('<'));
  if (const size_t colon = base.rfind(':'); colon != base.npos) base.remove_prefix(colon + 1);
  const absl::string_view unqualified = base;
  bool named = absl::StrContains(family.source(), unqualified);
  for (const v1::SourceHeader& header : family.headers()) {
    named = named || absl::StrContains(header.text(), unqualified);
  }
  const char* field = compile.reference ? "reference.kernel_name" : "kernel_name";
  // The field to change: the headers when one is missing, else the kernel's name
  // when that is what NVRTC could not find.
  if (!hint.empty()) *finding_field = "headers";
  if (!named) {
    if (finding_field->empty()) *finding_field = field;
    hint = absl::StrCat(field, " '", name, "' does not appear in ", ProgramName(family));
  } else if (absl::StrContains(log, "__nv_name_map") || absl::StrContains(log, "name expression")) {
    if (finding_field->empty()) *finding_field = field;
    // The name is in the source, but not as a kernel NVRTC can find ("layernorm"
    // where the kernel is "layernorm_fwd").
    const std::vector<std::string> kernels = GlobalFunctions(family.source());
    hint = absl::StrCat(field, " '", name, "' names no kernel of ", ProgramName(family),
                        kernels.empty() ? ""
                                        : absl::StrCat("; its __global__ functions: ",
                                                       absl::StrJoin(kernels, ", ")));
  }
  std::string message = absl::StrCat("does not compile:\n  ", absl::StrJoin(lines, "\n  "));
  if (!hint.empty()) absl::StrAppend(&message, "\n  (", hint, ")");
  return message;
}

void Add(CheckFinding finding, std::vector<CheckFinding>& findings) {
  for (CheckFinding& found : findings) {
    if (found.part == finding.part && found.message == finding.message &&
        found.field == finding.field) {
      found.dtypes.insert(found.dtypes.end(), finding.dtypes.begin(), finding.dtypes.end());
      return;
    }
  }
  findings.push_back(std::move(finding));
}

}  // namespace

std::string ProgramName(const v1::KernelFamily& family) {
  if (!family.source_file().empty()) {
    return std::filesystem::path(family.source_file()).filename().string();
  }
  return absl::StrCat(family.name(), ".cu");
}

std::vector<std::string> FamilyWarnings(const v1::KernelFamily& family) {
  std::vector<std::string> warnings;
  if (!family.has_default_config()) {
    warnings.push_back(
        "default_config: not set; a lookup that misses has no config to fall back on, and "
        "reports cannot say how much tuning gained (give each param the value you would "
        "choose by hand)");
  }
  return warnings;
}

absl::StatusOr<std::vector<CheckCompile>> CheckCompiles(const v1::KernelFamily& family,
                                                        const std::string& arch, bool tuned) {
  v1::Config config;
  std::string part;
  if (family.has_default_config()) {
    config = family.default_config();
    part = "default config";
  } else {
    for (const v1::TunableParameter& param : family.params()) {
      if (param.values_size() > 0) (*config.mutable_params())[param.name()] = param.values(0);
    }
    part = "first values";
  }
  std::vector<std::string> values;
  for (const v1::TunableParameter& param : family.params()) {
    const auto it = config.params().find(param.name());
    if (it != config.params().end()) values.push_back(absl::StrCat(param.name(), "=", it->second));
  }
  absl::StrAppend(&part, " ", absl::StrJoin(values, ", "));

  std::vector<SourceHeader> headers;
  for (const v1::SourceHeader& header : family.headers()) {
    headers.push_back({header.name(), header.text()});
  }
  const auto add = [&](std::string what, v1::DType dtype, bool reference, const std::string& source,
                       CompileInputs inputs, std::vector<CheckCompile>& compiles) {
    compiles.push_back(
        CheckCompile{.part = std::move(what),
                     .dtype = dtype,
                     .reference = reference,
                     .request = {.source = source,
                                 .program_name = ProgramName(family),
                                 .name_expression = std::move(inputs.name_expression),
                                 .options = std::move(inputs.options),
                                 .arch = arch,
                                 .headers = headers}});
  };
  const std::string& reference_source =
      family.reference().source().empty() ? family.source() : family.reference().source();
  std::vector<CheckCompile> compiles;
  for (int d = 0; d < family.dtypes_size(); ++d) {
    const v1::DType dtype = family.dtypes(d);
    add("reference", dtype, true, reference_source, ReferenceCompileInputs(family, dtype),
        compiles);
    if (!tuned) continue;
    ASSIGN_OR_RETURN(CompileInputs inputs, CompileInputsFor(family, config, dtype));
    add(part, dtype, false, family.source(), std::move(inputs), compiles);
  }
  return compiles;
}

void AddFindings(const v1::KernelFamily& family, const CheckCompile& compile,
                 const CompileOutput& output, std::vector<CheckFinding>& findings) {
  CheckFinding finding{.part = compile.part, .dtypes = {compile.dtype}, .message = {}, .field = {}};
  if (!output.compiled) {
    finding.message = CompileFailure(family, compile, output.log, &finding.field);
    Add(std::move(finding), findings);
    return;
  }
  absl::StatusOr<std::vector<int64_t>> sizes =
      KernelParameterSizes(output.cubin, output.lowered_name);
  if (!sizes.ok()) {
    finding.message = std::string(sizes.status().message());
  } else {
    finding.message = CompareArguments(*sizes, ArgumentsOf(family, compile), &finding.field);
  }
  if (!finding.message.empty()) Add(std::move(finding), findings);
}

std::string FindingText(const CheckFinding& finding, absl::string_view origin,
                        const std::function<int(absl::string_view field)>& line_of) {
  std::vector<std::string> dtypes;
  for (v1::DType dtype : finding.dtypes) dtypes.push_back(DTypeName(dtype));
  const int line = line_of != nullptr && !finding.field.empty() ? line_of(finding.field) : 0;
  return absl::StrCat(origin, line > 0 ? absl::StrCat(":", line) : "", ": ",
                      finding.field.empty() ? "" : absl::StrCat(finding.field, ": "), finding.part,
                      " (", absl::StrJoin(dtypes, ", "), "): ", finding.message);
}

absl::Status FindingsStatus(const std::vector<CheckFinding>& findings, absl::string_view origin,
                            const std::function<int(absl::string_view field)>& line_of) {
  if (findings.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  for (const CheckFinding& finding : findings)
    lines.push_back(FindingText(finding, origin, line_of));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

}  // namespace autotune::kernels
