#include "kernels/family_loader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/closest_name.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "kernels/compile_request.h"
#include "kernels/expression.h"
#include "kernels/include_check.h"
#include "kernels/search_space.h"
#include "kernels/tensor_map.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

using google::protobuf::TextFormat;

// The problems of parsing a text-format file: the first syntax error (the
// parse stops there) and every field the message type does not have (the
// parse goes on past those, skipping them), with the closest known name.
class TextProblems final : public google::protobuf::io::ErrorCollector {
 public:
  TextProblems(std::string path, const google::protobuf::Descriptor* root)
      : path_(std::move(path)), root_(root) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = At(line, column, absl::StrCat(message, EnumHint(message)));
  }

  // Protobuf reports a skipped unknown field as a warning:
  // Message type "autotune.v1.Buffer" has no field named "shap".
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    const std::vector<std::string> quoted = Quoted(message);
    if (!absl::StrContains(message, "has no field named") || quoted.size() != 2) {
      unknown_fields_.push_back(At(line, column, message));
      return;
    }
    const google::protobuf::Descriptor* type =
        root_->file()->pool()->FindMessageTypeByName(quoted[0]);
    std::vector<std::string> known;
    for (int i = 0; type != nullptr && i < type->field_count(); ++i) {
      known.push_back(type->field(i)->name());
    }
    const absl::string_view type_name = absl::StripPrefix(quoted[0], "autotune.v1.");
    unknown_fields_.push_back(At(
        line, column - static_cast<int>(quoted[1].size()),
        absl::StrCat(type_name, " has no field '", quoted[1], "'", DidYouMean(quoted[1], known))));
  }

  const std::string& error() const { return error_; }
  const std::vector<std::string>& unknown_fields() const { return unknown_fields_; }

 private:
  // Zero-based from protobuf; -1 when not at a position.
  std::string At(int line, int column, absl::string_view message) const {
    return line < 0
               ? absl::StrCat(path_, ": ", message)
               : absl::StrCat(path_, ":", line + 1, ":", std::max(column, 0) + 1, ": ", message);
  }

  static std::vector<std::string> Quoted(absl::string_view message) {
    std::vector<std::string> parts = absl::StrSplit(message, '"');
    std::vector<std::string> quoted;
    for (size_t i = 1; i < parts.size(); i += 2) quoted.push_back(parts[i]);
    return quoted;
  }

  // Unknown enumeration value of "FLAOT32" for field "dtypes".: the values
  // of the first enum field of that name under the root message.
  std::string EnumHint(const std::string& message) const {
    const std::vector<std::string> quoted = Quoted(message);
    if (!absl::StartsWith(message, "Unknown enumeration value") || quoted.size() != 2) return "";
    std::vector<const google::protobuf::Descriptor*> types = {root_};
    for (size_t t = 0; t < types.size() && t < 64; ++t) {
      for (int i = 0; i < types[t]->field_count(); ++i) {
        const google::protobuf::FieldDescriptor* field = types[t]->field(i);
        if (field->message_type() != nullptr) types.push_back(field->message_type());
        if (field->enum_type() == nullptr || field->name() != quoted[1]) continue;
        std::vector<std::string> values;
        for (int v = 0; v < field->enum_type()->value_count(); ++v) {
          values.push_back(field->enum_type()->value(v)->name());
        }
        return DidYouMean(quoted[0], values);
      }
    }
    return "";
  }

  std::string path_;
  const google::protobuf::Descriptor* root_;
  std::string error_;
  std::vector<std::string> unknown_fields_;
};

// "kernel", "ns::kernel", "::ns::kernel".
bool IsQualifiedName(absl::string_view name) {
  if (absl::StartsWith(name, "::")) name.remove_prefix(2);
  if (name.empty()) return false;
  for (absl::string_view part : absl::StrSplit(name, "::")) {
    if (!IsIdentifier(part)) return false;
  }
  return true;
}

// A header's name: parts of [A-Za-z0-9_][A-Za-z0-9_.-]* joined by '/', so
// never absolute, never "..", never empty between slashes.
bool IsHeaderName(absl::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part.empty() || !(absl::ascii_isalnum(part[0]) || part[0] == '_')) return false;
    for (char c : part) {
      if (!(absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-')) return false;
    }
  }
  return true;
}

// Why `path`, a file named in a descriptor, may not be read (absolute or
// going up a folder), or nullopt. The files of a family sit beside its
// descriptor or below it.
std::optional<std::string> OutsideDescriptorFolder(absl::string_view path) {
  if (absl::StartsWith(path, "/")) {
    return absl::StrCat("'", path, "' is absolute; name a file beside the descriptor or below it");
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::StrCat("'", path,
                          "' goes up a folder (..); name a file beside the descriptor or below it");
    }
  }
  return std::nullopt;
}

// The toolkit's include folder, found once: the one NVRTC would get here
// (include_check.h).
const std::string& ToolkitIncludeFolder() {
  static const std::string* const folder = new std::string(ToolkitIncludeDir(""));
  return *folder;
}

// Reads `file`, named in the descriptor at `descriptor`, which must lie in
// the descriptor's folder or below it: not absolute, not going up, and not
// a link that leads out of it (a checked-out repository can hold a link to
// the reader's private files).
absl::StatusOr<std::string> ReadBesideDescriptor(const std::string& descriptor,
                                                 const std::string& file) {
  if (std::optional<std::string> why = OutsideDescriptorFolder(file)) {
    return absl::InvalidArgumentError(*why);
  }
  const std::filesystem::path folder = std::filesystem::path(descriptor).parent_path();
  const std::filesystem::path named = (folder / file).lexically_normal();
  std::error_code error;
  const std::filesystem::path real_folder =
      std::filesystem::canonical(folder.empty() ? std::filesystem::path(".") : folder, error);
  const std::filesystem::path real_file =
      error ? std::filesystem::path() : std::filesystem::canonical(named, error);
  if (error) {
    // Missing or unreadable: ReadFile says which, naming the path.
    return ReadFile(named.string());
  }
  const std::string inside = real_folder.string() == "/" ? "/" : real_folder.string() + "/";
  if (!absl::StartsWith(real_file.string(), inside)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", file, "' leads to '", real_file.string(),
                     "' (through a link), outside the descriptor's folder"));
  }
  return ReadFile(real_file.string());
}

// Checks one family; errors are "origin[:line]: field: message".
class FamilyChecker {
 public:
  FamilyChecker(const v1::KernelFamily& family, absl::string_view origin,
                const TextFormat::ParseInfoTree* locations)
      : family_(family), origin_(origin), locations_(locations) {}

  absl::Status Error(absl::string_view field, absl::string_view message) const {
    const int line = locations_ == nullptr ? 0 : FieldLine(family_, *locations_, field);
    if (line > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin_, ":", line, ": ", field, ": ", message));
    }
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": ", field, ": ", message));
  }

  // Runs every check; the error, when there is one, lists the unknown
  // fields, then each section's first problem (each item's, for params,
  // dims, buffers and scalars) on a line of its own, in the order of the
  // header comment. compilable() tells whether the problems leave what a
  // compile reads intact.
  absl::Status Check() {
    // The problems in what the compiles read: of both kernels, of the tuned
    // kernel's alone (its name, its params), of the reference's alone.
    size_t before = problems_.size();
    Note(CheckNames());
    size_t tuned_problems = problems_.size() - before;
    before = problems_.size();
    // A source_file that could not be read was noted already.
    if (!source_file_failed_) Note(CheckSource());
    Note(CheckIncludes("source", family_.source()));
    Note(CheckIncludes("reference.source", family_.reference().source()));
    Note(CheckHeaders());
    size_t shared_problems = problems_.size() - before;  // source_file, source, headers
    before = problems_.size();
    CheckParams();
    tuned_problems += problems_.size() - before;
    CheckDims();
    // With a param or dim named wrong, every expression using it would be
    // reported too: those wait until the names are right. Other problems of
    // the declarations (values, bounds) leave the names usable.
    declarations_failed_ = names_failed_;
    before = problems_.size();
    Note(CheckDTypes());
    shared_problems += problems_.size() - before;
    BuildVariableNames();
    CheckBuffers();
    CheckScalars();
    Note(CheckTensorMaps());
    std::vector<std::string> launch_names = config_names_;
    launch_names.emplace_back(kSmCountVariable);
    Note(CheckLaunch("launch", family_.has_launch(), family_.launch(), launch_names));
    std::vector<std::string> constraint_names = config_names_;
    for (absl::string_view name : kTargetVariables) constraint_names.emplace_back(name);
    for (int i = 0; i < family_.constraints_size(); ++i) {
      Note(CheckExpression(absl::StrCat("constraints[", i, "]"), family_.constraints(i),
                           constraint_names));
    }
    before = problems_.size();
    Note(CheckReference());
    const size_t reference_problems = problems_.size() - before;
    Note(CheckTolerances());
    Note(CheckRequiredExpression("bytes_per_call", family_.bytes_per_call()));
    Note(CheckRequiredExpression("flops_per_call", family_.flops_per_call()));
    if (!v1::ParamBinding_IsValid(family_.binding())) {
      Note(Error("binding", absl::StrCat("unknown value ", family_.binding())));
      ++tuned_problems;
    }
    if (!v1::CacheState_IsValid(family_.cache_state())) {
      Note(Error("cache_state", absl::StrCat("unknown value ", family_.cache_state())));
    }
    before = problems_.size();
    Note(CheckCompileOptions());
    shared_problems += problems_.size() - before;
    tuned_compilable_ = shared_problems == 0 && tuned_problems == 0;
    reference_compilable_ = shared_problems == 0 && reference_problems == 0;
    return Result();
  }

  bool tuned_compilable() const { return tuned_compilable_; }
  bool reference_compilable() const { return reference_compilable_; }

  // Fields the parse skipped (ParseTextProtoFile): listed first.
  void NoteUnknownFields(std::vector<std::string> unknown) { unknown_fields_ = std::move(unknown); }

  // Keeps `status`'s message when it is an error.
  void Note(const absl::Status& status) {
    if (!status.ok()) problems_.emplace_back(status.message());
  }

  // Notes the result of claiming a name; whether it was OK.
  bool NoteName(const absl::Status& status) {
    Note(status);
    names_failed_ = names_failed_ || !status.ok();
    return status.ok();
  }

  // Notes a problem with the descriptor's source_file (LoadFamilyFile).
  void NoteSourceFileProblem(absl::string_view message) {
    Note(Error("source_file", message));
    source_file_failed_ = true;
  }

  // INVALID_ARGUMENT with every problem noted so far, one per line; OK when
  // none was.
  absl::Status Result() const {
    if (problems_.empty() && unknown_fields_.empty()) return absl::OkStatus();
    std::vector<std::string> lines = unknown_fields_;
    lines.insert(lines.end(), problems_.begin(), problems_.end());
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }

 private:
  absl::Status CheckNames() {
    if (family_.name().empty()) return Error("name", "must be set");
    if (!IsFamilyName(family_.name())) {
      return Error("name", absl::StrCat("'", family_.name(), "' must match [a-z][a-z0-9_]*"));
    }
    if (family_.kernel_name().empty()) return Error("kernel_name", "must be set (the entry point)");
    if (!IsQualifiedName(family_.kernel_name())) {
      return Error("kernel_name",
                   absl::StrCat("'", family_.kernel_name(), "' is not a C++ identifier"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckSource() const {
    if (family_.source().empty()) return Error("source", "must be set (the CUDA source text)");
    if (static_cast<int64_t>(family_.source().size()) > kMaxSourceBytes) {
      return Error("source", absl::StrCat(family_.source().size(),
                                          " bytes, more than the limit of ", kMaxSourceBytes));
    }
    return absl::OkStatus();
  }

  // Params, dims, buffers and scalars share one namespace in expressions.
  absl::Status ClaimName(const std::string& field, const std::string& name) {
    if (name.empty()) return Error(absl::StrCat(field, ".name"), "must be set");
    if (!IsIdentifier(name)) {
      return Error(absl::StrCat(field, ".name"),
                   absl::StrCat("'", name, "' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"));
    }
    if (name == kDTypeBytesVariable || name == kSmCountVariable ||
        absl::c_linear_search(kTargetVariables, name) || IsExpressionBuiltinName(name)) {
      return Error(absl::StrCat(field, ".name"),
                   absl::StrCat("'", name, "' is reserved (a name of the expression language)"));
    }
    const auto [it, inserted] = claimed_names_.emplace(name, field);
    if (!inserted) {
      return Error(absl::StrCat(field, ".name"),
                   absl::StrCat("'", name, "' is also the name of ", it->second));
    }
    return absl::OkStatus();
  }

  // Each param's name and whether it lists values (every param's problem),
  // then the values together (the first problem).
  void CheckParams() {
    if (family_.params_size() == 0) {
      Note(Error("params", "empty (a family needs at least one tunable parameter)"));
      return;
    }
    bool listed = true;
    for (int i = 0; i < family_.params_size(); ++i) {
      const v1::TunableParameter& param = family_.params(i);
      const std::string field = absl::StrCat("params[", i, "]");
      if (NoteName(ClaimName(field, param.name())) && absl::StartsWith(param.name(), "AUTOTUNE_")) {
        NoteName(Error(absl::StrCat(field, ".name"),
                       absl::StrCat("'", param.name(), "' is reserved (AUTOTUNE_ macros)")));
      }
      if (param.values_size() == 0) {
        Note(Error(absl::StrCat(field, ".values"), "empty (list at least one value)"));
        listed = false;
      }
    }
    if (listed) Note(CheckParamValues());
  }

  absl::Status CheckParamValues() const {
    // Before the values are looked at one by one: a descriptor sent over RPC
    // may list millions.
    const int64_t count = ConfigCount(family_);
    if (count > kMaxConfigsPerFamily) {
      return Error(
          "params",
          absl::StrCat(count == std::numeric_limits<int64_t>::max() ? std::string("more than 2^63")
                                                                    : absl::StrCat(count),
                       " configs, more than the limit of ", kMaxConfigsPerFamily));
    }
    for (int i = 0; i < family_.params_size(); ++i) {
      const v1::TunableParameter& param = family_.params(i);
      const std::string field = absl::StrCat("params[", i, "]");
      absl::flat_hash_set<int64_t> seen;
      seen.reserve(param.values_size());
      for (int j = 0; j < param.values_size(); ++j) {
        const int64_t value = param.values(j);
        if (std::fabs(static_cast<double>(value)) > kMaxExactInteger) {
          return Error(absl::StrCat(field, ".values[", j, "]"),
                       absl::StrCat(value, " is out of range (|value| <= 2^53)"));
        }
        if (!seen.insert(value).second) {
          return Error(absl::StrCat(field, ".values[", j, "]"),
                       absl::StrCat(value, " is listed twice"));
        }
      }
    }
    return CheckDefaultConfig();
  }

  // One value of each parameter's list, for every parameter.
  absl::Status CheckDefaultConfig() const {
    if (!family_.has_default_config()) return absl::OkStatus();
    const auto& given = family_.default_config().params();
    for (const auto& [name, value] : given) {
      const v1::TunableParameter* param = nullptr;
      for (const v1::TunableParameter& p : family_.params()) {
        if (p.name() == name) param = &p;
      }
      if (param == nullptr) {
        return Error(absl::StrCat("default_config.params[\"", name, "\"]"),
                     "is not a parameter of the family");
      }
      if (std::find(param->values().begin(), param->values().end(), value) ==
          param->values().end()) {
        return Error(absl::StrCat("default_config.params[\"", name, "\"]"),
                     absl::StrCat(value, " is not one of its values"));
      }
    }
    for (const v1::TunableParameter& p : family_.params()) {
      if (!given.contains(p.name())) {
        return Error("default_config", absl::StrCat("gives no value for '", p.name(), "'"));
      }
    }
    return absl::OkStatus();
  }

  // Every dim's problem.
  void CheckDims() {
    if (family_.dims_size() == 0) {
      Note(Error("dims", "empty (a family needs at least one problem dimension)"));
      return;
    }
    for (int i = 0; i < family_.dims_size(); ++i) {
      const v1::ProblemDimension& dim = family_.dims(i);
      const std::string field = absl::StrCat("dims[", i, "]");
      NoteName(ClaimName(field, dim.name()));
      if (dim.min() < 0) {
        Note(Error(absl::StrCat(field, ".min"), "negative"));
      } else if (dim.max() < 0) {
        Note(Error(absl::StrCat(field, ".max"), "negative"));
      } else if (dim.min() > 0 && dim.max() > 0 && dim.min() > dim.max()) {
        Note(Error(field, absl::StrCat("min ", dim.min(), " is above max ", dim.max())));
      }
    }
  }

  absl::Status CheckDTypes() {
    if (family_.dtypes_size() == 0) return Error("dtypes", "empty (list the supported dtypes)");
    for (int i = 0; i < family_.dtypes_size(); ++i) {
      const v1::DType dtype = family_.dtypes(i);
      const std::string field = absl::StrCat("dtypes[", i, "]");
      if (dtype == v1::DTYPE_UNSPECIFIED) return Error(field, "DTYPE_UNSPECIFIED is not a dtype");
      if (!v1::DType_IsValid(dtype))
        return Error(field, absl::StrCat("unknown ", DTypeName(dtype)));
      for (int k = 0; k < i; ++k) {
        if (family_.dtypes(k) == dtype) {
          return Error(field, absl::StrCat(DTypeName(dtype), " is listed twice"));
        }
      }
    }
    return absl::OkStatus();
  }

  void BuildVariableNames() {
    for (const v1::ProblemDimension& dim : family_.dims()) dim_names_.push_back(dim.name());
    dim_names_.emplace_back(kDTypeBytesVariable);
    config_names_ = dim_names_;
    for (const v1::TunableParameter& param : family_.params())
      config_names_.push_back(param.name());
  }

  absl::Status CheckExpression(const std::string& field, const std::string& text,
                               const std::vector<std::string>& names) const {
    if (declarations_failed_) return absl::OkStatus();
    absl::StatusOr<Expression> expression = Expression::Parse(text, names);
    if (!expression.ok()) return Error(field, expression.status().message());
    return absl::OkStatus();
  }

  absl::Status CheckRequiredExpression(const std::string& field, const std::string& text) const {
    if (text.empty()) {
      return Error(field, "must be set (an expression of dims and params; \"0\" if none)");
    }
    return CheckExpression(field, text, config_names_);
  }

  absl::Status CheckOptionalDType(const std::string& field, v1::DType dtype) const {
    if (!v1::DType_IsValid(dtype)) return Error(field, absl::StrCat("unknown ", DTypeName(dtype)));
    return absl::OkStatus();
  }

  // Each buffer's first problem, then whether one is an output.
  void CheckBuffers() {
    if (family_.buffers_size() == 0) {
      Note(Error("buffers", "empty (a kernel needs buffers)"));
      return;
    }
    bool has_output = false;
    for (int i = 0; i < family_.buffers_size(); ++i) {
      const v1::Buffer& buffer = family_.buffers(i);
      has_output = has_output || buffer.role() == v1::OUT || buffer.role() == v1::INOUT;
      Note(CheckBuffer(absl::StrCat("buffers[", i, "]"), buffer));
    }
    if (!has_output) {
      Note(Error("buffers", "no OUT or INOUT buffer (results are compared with the reference)"));
    }
  }

  absl::Status CheckBuffer(const std::string& field, const v1::Buffer& buffer) {
    if (!NoteName(ClaimName(field, buffer.name()))) return absl::OkStatus();
    RETURN_IF_ERROR(CheckOptionalDType(absl::StrCat(field, ".dtype"), buffer.dtype()));
    if (buffer.role() == v1::BUFFER_ROLE_UNSPECIFIED) {
      return Error(absl::StrCat(field, ".role"), "must be IN, OUT, INOUT or SCRATCH");
    }
    if (!v1::BufferRole_IsValid(buffer.role())) {
      return Error(absl::StrCat(field, ".role"), absl::StrCat("unknown value ", buffer.role()));
    }
    if (buffer.role() == v1::SCRATCH && buffer.has_fill()) {
      return Error(absl::StrCat(field, ".fill"),
                   "a SCRATCH buffer starts zeroed and is never filled; leave fill unset");
    }
    if (buffer.shape_size() == 0) {
      return Error(absl::StrCat(field, ".shape"), "empty (one expression per dimension)");
    }
    for (int j = 0; j < buffer.shape_size(); ++j) {
      RETURN_IF_ERROR(
          CheckExpression(absl::StrCat(field, ".shape[", j, "]"), buffer.shape(j), config_names_));
    }
    const v1::Fill& fill = buffer.fill();
    const std::string fill_field = absl::StrCat(field, ".fill");
    if (!v1::Fill::Kind_IsValid(fill.kind())) {
      return Error(absl::StrCat(fill_field, ".kind"), absl::StrCat("unknown value ", fill.kind()));
    }
    if (!std::isfinite(fill.low()) || !std::isfinite(fill.high())) {
      return Error(fill_field, "low and high must be finite");
    }
    if (fill.kind() == v1::Fill::UNIFORM && !(fill.low() < fill.high())) {
      return Error(fill_field, absl::StrCat("UNIFORM needs low < high (low ", fill.low(), ", high ",
                                            fill.high(), ")"));
    }
    if (fill.kind() == v1::Fill::NORMAL && fill.high() < 0) {
      return Error(absl::StrCat(fill_field, ".high"), "NORMAL stddev is negative");
    }
    return absl::OkStatus();
  }

  absl::Status CheckTensorMaps() {
    if (family_.tensor_maps_size() > kMaxTensorMaps) {
      return Error("tensor_maps",
                   absl::StrCat(family_.tensor_maps_size(), " tensor maps, more than the limit of ",
                                kMaxTensorMaps));
    }
    for (int i = 0; i < family_.tensor_maps_size(); ++i) {
      const v1::TensorMap& map = family_.tensor_maps(i);
      const std::string field = absl::StrCat("tensor_maps[", i, "]");
      const auto buffer =
          std::find_if(family_.buffers().begin(), family_.buffers().end(),
                       [&](const v1::Buffer& b) { return b.name() == map.buffer(); });
      if (buffer == family_.buffers().end()) {
        return Error(absl::StrCat(field, ".buffer"),
                     absl::StrCat("'", map.buffer(), "' is not one of the family's buffers"));
      }
      if (buffer->shape_size() > kMaxTensorMapRank) {
        return Error(absl::StrCat(field, ".buffer"),
                     absl::StrCat("'", map.buffer(), "' has ", buffer->shape_size(),
                                  " dims; a tensor map has at most ", kMaxTensorMapRank));
      }
      if (map.box_size() != buffer->shape_size()) {
        return Error(absl::StrCat(field, ".box"),
                     absl::StrCat(map.box_size(), " expressions for the ", buffer->shape_size(),
                                  " dims of '", map.buffer(), "' (one each, outermost first)"));
      }
      for (int j = 0; j < map.box_size(); ++j) {
        RETURN_IF_ERROR(
            CheckExpression(absl::StrCat(field, ".box[", j, "]"), map.box(j), config_names_));
      }
      if (!v1::TensorMapSwizzle_IsValid(map.swizzle())) {
        return Error(absl::StrCat(field, ".swizzle"),
                     absl::StrCat("unknown value ", map.swizzle()));
      }
    }
    return absl::OkStatus();
  }

  // Each scalar's first problem.
  void CheckScalars() {
    for (int i = 0; i < family_.scalars_size(); ++i) {
      Note(CheckScalar(absl::StrCat("scalars[", i, "]"), family_.scalars(i)));
    }
  }

  absl::Status CheckScalar(const std::string& field, const v1::ScalarArgument& scalar) {
    if (!NoteName(ClaimName(field, scalar.name()))) return absl::OkStatus();
    RETURN_IF_ERROR(CheckOptionalDType(absl::StrCat(field, ".dtype"), scalar.dtype()));
    if (scalar.value().empty()) return Error(absl::StrCat(field, ".value"), "must be set");
    RETURN_IF_ERROR(CheckExpression(absl::StrCat(field, ".value"), scalar.value(), config_names_));
    RETURN_IF_ERROR(CheckIntegerConstant(field, scalar));
    return absl::OkStatus();
  }

  // An integer scalar whose value is a constant must be a whole number: a
  // '1e-5' for an INT32 would reach the kernel as 0 (or fail every job's
  // warmup), so it is refused here, with the fix.
  absl::Status CheckIntegerConstant(const std::string& field,
                                    const v1::ScalarArgument& scalar) const {
    const v1::DType dtype = scalar.dtype();
    if (declarations_failed_ ||
        (dtype != v1::INT8 && dtype != v1::INT32 && dtype != v1::INT64 && dtype != v1::UINT8)) {
      return absl::OkStatus();
    }
    absl::StatusOr<Expression> expression = Expression::Parse(scalar.value(), config_names_);
    if (!expression.ok() || !expression->variables().empty()) return absl::OkStatus();
    absl::StatusOr<double> value = expression->Evaluate({});
    if (!value.ok() || std::nearbyint(*value) == *value) return absl::OkStatus();
    return Error(
        absl::StrCat(field, ".value"),
        absl::StrCat("'", scalar.value(), "' = ", *value, " is not an integer, and ", scalar.name(),
                     " is ", DTypeName(dtype), " (a fraction needs dtype: FLOAT32)"));
  }

  absl::Status CheckLaunch(const std::string& field, bool present, const v1::LaunchGeometry& launch,
                           const std::vector<std::string>& names) const {
    if (!present) return Error(field, "must be set (grid and block expressions)");
    const auto check_dims = [&](const char* part,
                                const google::protobuf::RepeatedPtrField<std::string>& exprs) {
      const std::string part_field = absl::StrCat(field, ".", part);
      if (exprs.empty() || exprs.size() > 3) {
        return Error(part_field, absl::StrCat(exprs.size(), " expressions; give 1 to 3 (x, y, z)"));
      }
      for (int i = 0; i < exprs.size(); ++i) {
        RETURN_IF_ERROR(CheckExpression(absl::StrCat(part_field, "[", i, "]"), exprs[i], names));
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(check_dims("grid", launch.grid()));
    RETURN_IF_ERROR(check_dims("block", launch.block()));
    if (!launch.dynamic_shared_bytes().empty()) {
      RETURN_IF_ERROR(CheckExpression(absl::StrCat(field, ".dynamic_shared_bytes"),
                                      launch.dynamic_shared_bytes(), names));
    }
    return absl::OkStatus();
  }

  absl::Status CheckReference() const {
    if (!family_.has_reference()) {
      return Error("reference", "must be set (results are checked against a reference kernel)");
    }
    const v1::ReferenceKernel& reference = family_.reference();
    if (reference.kernel_name().empty()) return Error("reference.kernel_name", "must be set");
    if (!IsQualifiedName(reference.kernel_name())) {
      return Error("reference.kernel_name",
                   absl::StrCat("'", reference.kernel_name(), "' is not a C++ identifier"));
    }
    return CheckLaunch("reference.launch", reference.has_launch(), reference.launch(), dim_names_);
  }

  absl::Status CheckTolerances() const {
    for (int i = 0; i < family_.tolerances_size(); ++i) {
      const v1::Tolerance& tolerance = family_.tolerances(i);
      const std::string field = absl::StrCat("tolerances[", i, "]");
      const v1::DType dtype = tolerance.dtype();
      if (dtype == v1::DTYPE_UNSPECIFIED)
        return Error(absl::StrCat(field, ".dtype"), "must be set");
      if (std::find(family_.dtypes().begin(), family_.dtypes().end(), dtype) ==
          family_.dtypes().end()) {
        return Error(absl::StrCat(field, ".dtype"),
                     absl::StrCat(DTypeName(dtype), " is not in dtypes"));
      }
      for (int k = 0; k < i; ++k) {
        if (family_.tolerances(k).dtype() == dtype) {
          return Error(absl::StrCat(field, ".dtype"),
                       absl::StrCat(DTypeName(dtype), " already has tolerances[", k, "]"));
        }
      }
      if (!std::isfinite(tolerance.rtol()) || tolerance.rtol() < 0) {
        return Error(absl::StrCat(field, ".rtol"), "must be finite and >= 0");
      }
      if (!std::isfinite(tolerance.atol()) || tolerance.atol() < 0) {
        return Error(absl::StrCat(field, ".atol"), "must be finite and >= 0");
      }
    }
    for (int i = 0; i < family_.dtypes_size(); ++i) {
      const v1::DType dtype = family_.dtypes(i);
      const bool covered =
          std::any_of(family_.tolerances().begin(), family_.tolerances().end(),
                      [dtype](const v1::Tolerance& t) { return t.dtype() == dtype; });
      if (!covered) {
        return Error(absl::StrCat("dtypes[", i, "]"),
                     absl::StrCat("no tolerance for ", DTypeName(dtype),
                                  " (add a tolerances entry with rtol and atol)"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckCompileOptions() const {
    for (int i = 0; i < family_.compile_options_size(); ++i) {
      const std::string& option = family_.compile_options(i);
      const std::string field = absl::StrCat("compile_options[", i, "]");
      if (absl::StripAsciiWhitespace(option).empty()) return Error(field, "empty option");
      if (absl::Status allowed = CheckCompileOption(option); !allowed.ok()) {
        return Error(field, allowed.message());
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckHeaders() const {
    if (family_.headers_size() > kMaxSourceHeaders) {
      return Error("headers", absl::StrCat(family_.headers_size(),
                                           " headers, more than the limit of ", kMaxSourceHeaders));
    }
    std::set<std::string> names;
    for (int i = 0; i < family_.headers_size(); ++i) {
      const v1::SourceHeader& header = family_.headers(i);
      const std::string field = absl::StrCat("headers[", i, "]");
      if (!IsHeaderName(header.name())) {
        return Error(absl::StrCat(field, ".name"),
                     absl::StrCat("'", header.name().substr(0, 200),
                                  "' is not a header name (parts of [A-Za-z0-9_][A-Za-z0-9_.-]* "
                                  "joined by '/', at most 200 characters)"));
      }
      if (!names.insert(header.name()).second) {
        return Error(absl::StrCat(field, ".name"),
                     absl::StrCat("'", header.name(), "' is named twice"));
      }
      if (header.text().empty()) {
        return Error(absl::StrCat(field, ".text"), "empty (the header's text, or its file)");
      }
      if (static_cast<int64_t>(header.text().size()) > kMaxSourceBytes) {
        return Error(
            absl::StrCat(field, ".text"),
            absl::StrCat(header.text().size(), " bytes, more than the limit of ", kMaxSourceBytes));
      }
      RETURN_IF_ERROR(CheckIncludes(absl::StrCat(field, " (", header.name(), ")"), header.text()));
    }
    return absl::OkStatus();
  }

  absl::Status CheckIncludes(absl::string_view field, absl::string_view source) const {
    IncludeRules rules{.shipped = {}, .toolkit_include_dir = ToolkitIncludeFolder()};
    for (const v1::SourceHeader& header : family_.headers()) rules.shipped.push_back(header.name());
    if (std::optional<IncludeProblem> found = FindForbiddenInclude(source, rules)) {
      return Error(field, absl::StrCat("line ", found->line, ": ", found->message));
    }
    return absl::OkStatus();
  }

  const v1::KernelFamily& family_;
  std::string origin_;
  const TextFormat::ParseInfoTree* locations_;
  std::map<std::string, std::string> claimed_names_;  // name -> "params[0]" etc.
  std::vector<std::string> dim_names_;                // dims + dtype_bytes
  std::vector<std::string> config_names_;             // dims + dtype_bytes + params
  std::vector<std::string> problems_;                 // "origin[:line]: field: message"
  bool source_file_failed_ = false;
  std::vector<std::string> unknown_fields_;
  bool tuned_compilable_ = false;
  bool reference_compilable_ = false;
  bool names_failed_ = false;         // a name that could not be claimed
  bool declarations_failed_ = false;  // a param or dim: expressions are not checked
};

}  // namespace

absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message& message,
                                TextFormat::ParseInfoTree& locations,
                                std::vector<std::string>* unknown_fields) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  TextProblems problems(path, message.GetDescriptor());
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&problems);
  parser.WriteLocationsTo(&locations);
  parser.AllowUnknownField(true);
  if (!parser.ParseFromString(text, &message)) {
    // The syntax error, after the unknown fields before it.
    std::vector<std::string> lines = problems.unknown_fields();
    lines.push_back(problems.error().empty()
                        ? absl::StrCat(path, ": not a valid text-format ", message.GetTypeName())
                        : problems.error());
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  if (problems.unknown_fields().empty()) return absl::OkStatus();
  if (unknown_fields != nullptr) {
    *unknown_fields = problems.unknown_fields();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrJoin(problems.unknown_fields(), "\n"));
}

int FieldLine(const google::protobuf::Message& message, const TextFormat::ParseInfoTree& locations,
              absl::string_view field_path) {
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const TextFormat::ParseInfoTree* tree = &locations;
  int line = -1;
  for (absl::string_view part : absl::StrSplit(field_path, '.')) {
    if (tree == nullptr || descriptor == nullptr) break;
    absl::string_view name = part;
    int index = 0;
    if (const size_t bracket = part.find('['); bracket != absl::string_view::npos) {
      name = part.substr(0, bracket);
      absl::string_view digits = part.substr(bracket + 1);
      if (!digits.empty() && digits.back() == ']') digits.remove_suffix(1);
      if (!absl::SimpleAtoi(digits, &index) || index < 0) break;
    }
    const google::protobuf::FieldDescriptor* field = descriptor->FindFieldByName(std::string(name));
    if (field == nullptr) break;
    int location_index = field->is_repeated() ? index : -1;
    TextFormat::ParseLocation location = tree->GetLocation(field, location_index);
    // A list (`values: [1, 2]`) is recorded once, at its first value.
    while (location.line < 0 && location_index > 0) {
      location = tree->GetLocation(field, --location_index);
    }
    if (location.line < 0) break;
    line = location.line;
    if (field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
        location_index == (field->is_repeated() ? index : -1)) {
      tree = tree->GetTreeForNested(field, location_index);
      descriptor = field->message_type();
    } else {
      tree = nullptr;
    }
  }
  return line + 1;
}

absl::StatusOr<FamilyFile> ReadFamilyFile(const std::string& path) {
  FamilyFile file;
  v1::KernelFamily& family = file.family;
  auto locations = std::make_shared<TextFormat::ParseInfoTree>();
  std::vector<std::string> unknown_fields;
  RETURN_IF_ERROR(ParseTextProtoFile(path, family, *locations, &unknown_fields));
  file.locations = locations;
  FamilyChecker checker(family, path, locations.get());
  checker.NoteUnknownFields(std::move(unknown_fields));
  if (!family.source_file().empty()) {
    if (!family.source().empty()) {
      checker.NoteSourceFileProblem("set source or source_file, not both");
    } else if (absl::StatusOr<std::string> source =
                   ReadBesideDescriptor(path, family.source_file());
               !source.ok()) {
      checker.NoteSourceFileProblem(source.status().message());
    } else if (source->empty()) {
      checker.NoteSourceFileProblem(absl::StrCat("'", family.source_file(), "' is empty"));
    } else {
      family.set_source(*std::move(source));
    }
  } else if (family.source().empty()) {
    checker.NoteSourceFileProblem("must be set (or source)");
  }
  for (int i = 0; i < family.headers_size(); ++i) {
    v1::SourceHeader& header = *family.mutable_headers(i);
    if (header.file().empty()) continue;
    const std::string field = absl::StrCat("headers[", i, "].file");
    if (!header.text().empty()) {
      checker.Note(checker.Error(field, "set text or file, not both"));
      continue;
    }
    absl::StatusOr<std::string> text = ReadBesideDescriptor(path, header.file());
    if (!text.ok()) {
      checker.Note(checker.Error(field, text.status().message()));
      continue;
    }
    header.set_text(*std::move(text));
  }
  file.problems = checker.Check();
  file.tuned_compilable = checker.tuned_compilable();
  file.reference_compilable = checker.reference_compilable();
  return file;
}

int FamilyFile::Line(absl::string_view field_path) const {
  return locations == nullptr ? 0 : FieldLine(family, *locations, field_path);
}

absl::StatusOr<v1::KernelFamily> LoadFamilyFile(const std::string& path) {
  ASSIGN_OR_RETURN(FamilyFile file, ReadFamilyFile(path));
  RETURN_IF_ERROR(file.problems);
  return std::move(file.family);
}

absl::Status ValidateFamily(const v1::KernelFamily& family, absl::string_view origin) {
  return FamilyChecker(family, origin, nullptr).Check();
}

absl::StatusOr<std::vector<v1::KernelFamily>> LoadFamilyDirectory(const std::string& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a directory"));
  }
  std::vector<std::string> file_names;
  for (auto it = std::filesystem::directory_iterator(dir, error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    const std::filesystem::path& file = it->path();
    if (file.extension() == ".textproto" && it->is_regular_file(error)) {
      file_names.push_back(file.filename().string());
    }
  }
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot list '", dir, "': ", error.message()));
  }
  std::sort(file_names.begin(), file_names.end());

  std::vector<v1::KernelFamily> families;
  std::map<std::string, std::string> path_by_name;
  for (const std::string& file_name : file_names) {
    const std::string path = (std::filesystem::path(dir) / file_name).string();
    ASSIGN_OR_RETURN(v1::KernelFamily family, LoadFamilyFile(path));
    const auto [it, inserted] = path_by_name.emplace(family.name(), path);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "family '", family.name(), "' is defined twice: ", it->second, " and ", path));
    }
    families.push_back(std::move(family));
  }
  return families;
}

}  // namespace autotune::kernels
