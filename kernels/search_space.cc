#include "kernels/search_space.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "kernels/expression.h"
#include "kernels/tensor_map.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// CUDA's own launch limits, whatever the device.
constexpr std::array<int64_t, 3> kMaxGrid = {2147483647, 65535, 65535};
constexpr std::array<int64_t, 3> kMaxBlock = {1024, 1024, 64};

std::string ProblemLabel(const v1::Problem& problem) {
  return absl::StrCat("problem ", FormatDims(problem.dims()), " ", DTypeName(problem.dtype()));
}

// Only called for a dtype the problem validated, so the row exists.
std::vector<std::string> DTypeMacros(v1::DType dtype) {
  return {absl::StrCat("-DAUTOTUNE_DTYPE=", FindDType(dtype)->cuda_type),
          absl::StrCat("-DAUTOTUNE_DTYPE_", absl::AsciiStrToUpper(DTypeName(dtype)), "=1"),
          absl::StrCat("-DAUTOTUNE_DTYPE_BYTES=", DTypeBytes(dtype))};
}

// The name expression and options of the config whose values (in params
// order) are `values`; see the binding notes in the header.
CompileInputs CompileInputsOf(const v1::KernelFamily& family, const std::vector<int64_t>& values,
                              v1::DType dtype) {
  CompileInputs inputs;
  inputs.options.assign(family.compile_options().begin(), family.compile_options().end());
  if (family.binding() == v1::TEMPLATE_ARGUMENTS) {
    inputs.name_expression =
        absl::StrCat(family.kernel_name(), "<", absl::StrJoin(values, ", "), ">");
  } else {
    inputs.name_expression = family.kernel_name();
    for (int p = 0; p < family.params_size(); ++p) {
      inputs.options.push_back(absl::StrCat("-D", family.params(p).name(), "=", values[p]));
    }
  }
  for (std::string& macro : DTypeMacros(dtype)) inputs.options.push_back(std::move(macro));
  return inputs;
}

// An expression of the descriptor with the path of the field it came from.
struct Field {
  std::string path;
  Expression expression;
  bool uses_params = false;
};

// Why a config (or the problem) cannot run: `reason` is the aggregate key of
// SearchSpace::dropped, `detail` the message with the offending value.
struct Failure {
  std::string reason;
  std::string detail;
};

// An architecture as the constraints see it: sm_90a is {90, true}.
struct ArchNumber {
  int number = 0;
  bool specific = false;
};

absl::StatusOr<ArchNumber> ParseArch(absl::string_view arch) {
  ArchNumber parsed;
  absl::string_view digits = arch;
  if (IsGpuArch(arch) && absl::ConsumePrefix(&digits, "sm_")) {
    parsed.specific = absl::ConsumeSuffix(&digits, "a");
    absl::ConsumeSuffix(&digits, "f");
    if (absl::SimpleAtoi(digits, &parsed.number)) return parsed;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("target arch '", arch, "' is not a GPU architecture like sm_90"));
}

// Evaluates family expressions for one problem, config after config.
class ConfigResolver {
 public:
  // The family's expressions parsed; SetProblem before anything else.
  static absl::StatusOr<ConfigResolver> Parse(const v1::KernelFamily& family,
                                              const DeviceLimits& limits) {
    ConfigResolver resolver(family, limits);
    RETURN_IF_ERROR(resolver.ParseAll());
    return resolver;
  }
  static absl::StatusOr<ConfigResolver> Create(const v1::KernelFamily& family,
                                               const v1::Problem& problem,
                                               const DeviceLimits& limits) {
    ASSIGN_OR_RETURN(ConfigResolver resolver, Parse(family, limits));
    resolver.SetProblem(problem);
    return resolver;
  }

  // Evaluates for `problem` from now on (the expressions stay parsed); it
  // must hold every dim of the family and outlive the calls that follow.
  void SetProblem(const v1::Problem& problem) {
    problem_ = &problem;
    for (int d = 0; d < family_.dims_size(); ++d) {
      values_[static_cast<size_t>(d)] =
          static_cast<double>(problem.dims().at(family_.dims(d).name()));
    }
    values_[static_cast<size_t>(family_.dims_size())] =
        static_cast<double>(DTypeBytes(problem.dtype()));
  }

  // Fails when an expression that no param affects is invalid for the
  // problem, or the reference launch is.
  absl::Status CheckProblem() {
    const auto error = [&](const Failure& failure) {
      return absl::InvalidArgumentError(
          absl::StrCat(failure.detail, " (", ProblemLabel(*problem_), ")"));
    };
    for (size_t axis = 0; axis < grid_.size(); ++axis) {
      if (grid_[axis].uses_params) continue;
      if (auto failure = EvalGrid(grid_[axis], axis, nullptr)) return error(*failure);
    }
    for (size_t axis = 0; axis < block_.size(); ++axis) {
      if (block_[axis].uses_params) continue;
      if (auto failure = EvalBlock(block_[axis], axis, nullptr)) return error(*failure);
    }
    if (shared_.has_value() && !shared_->uses_params) {
      if (auto failure = EvalShared(*shared_, nullptr)) return error(*failure);
    }
    for (std::vector<Field>& shape : shapes_) {
      for (Field& extent : shape) {
        if (extent.uses_params) continue;
        if (auto failure = EvalInteger(extent, 1, kNoLimit, "", nullptr)) return error(*failure);
      }
    }
    for (size_t i = 0; i < scalars_.size(); ++i) {
      if (scalars_[i].uses_params) continue;
      if (auto failure = EvalScalar(i, nullptr)) return error(*failure);
    }
    for (std::optional<Field>* count : {&bytes_, &flops_}) {
      if ((*count)->uses_params) continue;
      if (auto failure = EvalCount(**count, nullptr)) return error(*failure);
    }
    if (auto failure = EvalLaunch(reference_grid_, reference_block_, reference_shared_,
                                  "reference.launch", &reference_launch_)) {
      return error(*failure);
    }
    return absl::OkStatus();
  }

  const v1::LaunchDims& reference_launch() const { return reference_launch_; }

  std::vector<std::string> ReferenceOptions() const {
    return ReferenceCompileInputs(family_, problem_->dtype()).options;
  }

  // Resolves the config with `param_values` (in params order). Returns the
  // variant; otherwise sets `failed_constraint` to the first constraint that
  // failed, or `failure` when the config passed the constraints but cannot
  // run.
  std::optional<Variant> Resolve(int64_t index, const std::vector<int64_t>& param_values,
                                 int* failed_constraint, Failure* failure) {
    for (int p = 0; p < family_.params_size(); ++p) {
      values_[first_param_ + static_cast<size_t>(p)] = static_cast<double>(param_values[p]);
    }
    for (size_t i = 0; i < constraints_.size(); ++i) {
      absl::StatusOr<bool> holds = constraints_[i].expression.EvaluateConditionAt(values_);
      if (!holds.ok() || !*holds) {
        *failed_constraint = static_cast<int>(i);
        return std::nullopt;
      }
    }
    Variant variant;
    variant.index = index;
    variant.param_values = param_values;
    if (auto f = EvalLaunch(grid_, block_, shared_, "launch", &variant.launch)) {
      *failure = *std::move(f);
      return std::nullopt;
    }
    for (int b = 0; b < family_.buffers_size(); ++b) {
      if (auto f = EvalBuffer(b, &variant.buffers.emplace_back())) {
        *failure = *std::move(f);
        return std::nullopt;
      }
    }
    for (int t = 0; t < family_.tensor_maps_size(); ++t) {
      if (auto f = EvalTensorMap(t, variant.buffers, variant.launch.add_tensor_maps())) {
        *failure = *std::move(f);
        return std::nullopt;
      }
    }
    for (size_t s = 0; s < scalars_.size(); ++s) {
      if (auto f = EvalScalar(s, &variant.scalars.emplace_back())) {
        *failure = *std::move(f);
        return std::nullopt;
      }
    }
    if (auto f = EvalCount(*bytes_, &variant.bytes_per_call)) {
      *failure = *std::move(f);
      return std::nullopt;
    }
    if (auto f = EvalCount(*flops_, &variant.flops_per_call)) {
      *failure = *std::move(f);
      return std::nullopt;
    }

    auto& config = *variant.config.mutable_params();
    for (int p = 0; p < family_.params_size(); ++p) {
      config[family_.params(p).name()] = param_values[p];
    }
    CompileInputs inputs = CompileInputsOf(family_, param_values, problem_->dtype());
    variant.name_expression = std::move(inputs.name_expression);
    variant.compile_options = std::move(inputs.options);
    return variant;
  }

 private:
  ConfigResolver(const v1::KernelFamily& family, const DeviceLimits& limits)
      : family_(family), limits_(limits) {}

  absl::Status ParseAll() {
    std::vector<std::string> dim_names;
    for (const v1::ProblemDimension& dim : family_.dims()) dim_names.push_back(dim.name());
    dim_names.emplace_back(kDTypeBytesVariable);
    std::vector<std::string> names = dim_names;
    for (const v1::TunableParameter& param : family_.params()) names.push_back(param.name());

    ASSIGN_OR_RETURN(const ArchNumber target, ParseArch(limits_.arch));
    // Every value an expression may read, by position: the dims, the dtype's
    // bytes, the params, then the target's. Each field's expression is bound
    // to these positions when it is parsed.
    names_ = names;
    first_param_ = dim_names.size();
    names_.emplace_back(kArchVariable);
    names_.emplace_back(kArchSpecificVariable);
    names_.emplace_back(kSmCountVariable);
    values_.assign(names_.size(), 0.0);
    values_[names_.size() - 3] = target.number;
    values_[names_.size() - 2] = target.specific ? 1 : 0;
    values_[names_.size() - 1] =
        limits_.sm_count > 0 ? static_cast<double>(limits_.sm_count) : kUnknownSmCount;
    std::vector<std::string> constraint_names = names;
    for (absl::string_view name : kTargetVariables) constraint_names.emplace_back(name);
    for (int i = 0; i < family_.constraints_size(); ++i) {
      ASSIGN_OR_RETURN(Field field, ParseField(absl::StrCat("constraints[", i, "]"),
                                               family_.constraints(i), constraint_names));
      constraints_.push_back(std::move(field));
    }
    std::vector<std::string> launch_names = names;
    launch_names.emplace_back(kSmCountVariable);
    RETURN_IF_ERROR(
        ParseLaunch(family_.launch(), "launch", launch_names, &grid_, &block_, &shared_));
    RETURN_IF_ERROR(ParseLaunch(family_.reference().launch(), "reference.launch", dim_names,
                                &reference_grid_, &reference_block_, &reference_shared_));
    for (int b = 0; b < family_.buffers_size(); ++b) {
      ASSIGN_OR_RETURN(shapes_.emplace_back(), ParseFields(absl::StrCat("buffers[", b, "].shape"),
                                                           family_.buffers(b).shape(), names));
    }
    for (int t = 0; t < family_.tensor_maps_size(); ++t) {
      const v1::TensorMap& map = family_.tensor_maps(t);
      const std::string path = absl::StrCat("tensor_maps[", t, "]");
      const auto buffer =
          std::find_if(family_.buffers().begin(), family_.buffers().end(),
                       [&](const v1::Buffer& b) { return b.name() == map.buffer(); });
      if (buffer == family_.buffers().end()) {  // ValidateFamily refuses it
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".buffer: '", map.buffer(), "' is not a buffer"));
      }
      map_buffers_.push_back(static_cast<int>(buffer - family_.buffers().begin()));
      ASSIGN_OR_RETURN(boxes_.emplace_back(),
                       ParseFields(absl::StrCat(path, ".box"), map.box(), names));
    }
    for (int s = 0; s < family_.scalars_size(); ++s) {
      ASSIGN_OR_RETURN(Field field, ParseField(absl::StrCat("scalars[", s, "].value"),
                                               family_.scalars(s).value(), names));
      scalars_.push_back(std::move(field));
    }
    ASSIGN_OR_RETURN(bytes_, ParseField("bytes_per_call", family_.bytes_per_call(), names));
    ASSIGN_OR_RETURN(flops_, ParseField("flops_per_call", family_.flops_per_call(), names));
    return absl::OkStatus();
  }

  absl::StatusOr<Field> ParseField(std::string path, const std::string& text,
                                   const std::vector<std::string>& names) const {
    absl::StatusOr<Expression> expression = Expression::Parse(text, names);
    if (!expression.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", expression.status().message()));
    }
    // Each name an expression may use is one of names_ (ParseAll).
    if (absl::Status bound = expression->BindPositions(names_); !bound.ok()) {
      return absl::InternalError(absl::StrCat(path, ": ", bound.message()));
    }
    const bool uses_params =
        std::any_of(family_.params().begin(), family_.params().end(),
                    [&](const v1::TunableParameter& p) { return expression->Uses(p.name()); });
    return Field{std::move(path), *std::move(expression), uses_params};
  }

  // One field per expression of `texts`, with paths "<path>[j]".
  absl::StatusOr<std::vector<Field>> ParseFields(
      const std::string& path, const google::protobuf::RepeatedPtrField<std::string>& texts,
      const std::vector<std::string>& names) const {
    std::vector<Field> fields;
    for (int j = 0; j < texts.size(); ++j) {
      ASSIGN_OR_RETURN(Field field, ParseField(absl::StrCat(path, "[", j, "]"), texts[j], names));
      fields.push_back(std::move(field));
    }
    return fields;
  }

  absl::Status ParseLaunch(const v1::LaunchGeometry& launch, const std::string& path,
                           const std::vector<std::string>& names, std::vector<Field>* grid,
                           std::vector<Field>* block, std::optional<Field>* shared) const {
    const auto count_ok = [](int n) { return n >= 1 && n <= 3; };
    if (!count_ok(launch.grid_size()) || !count_ok(launch.block_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": needs 1 to 3 grid and 1 to 3 block expressions"));
    }
    for (int i = 0; i < launch.grid_size(); ++i) {
      ASSIGN_OR_RETURN(Field field,
                       ParseField(absl::StrCat(path, ".grid[", i, "]"), launch.grid(i), names));
      grid->push_back(std::move(field));
    }
    for (int i = 0; i < launch.block_size(); ++i) {
      ASSIGN_OR_RETURN(Field field,
                       ParseField(absl::StrCat(path, ".block[", i, "]"), launch.block(i), names));
      block->push_back(std::move(field));
    }
    if (!launch.dynamic_shared_bytes().empty()) {
      ASSIGN_OR_RETURN(*shared, ParseField(absl::StrCat(path, ".dynamic_shared_bytes"),
                                           launch.dynamic_shared_bytes(), names));
    }
    return absl::OkStatus();
  }

  // An integer in [min, max]; `max_reason` says what exceeding max means.
  std::optional<Failure> EvalInteger(Field& field, int64_t min, int64_t max,
                                     absl::string_view max_reason, int64_t* out) {
    absl::StatusOr<double> value = field.expression.EvaluateAt(values_);
    const std::string& text = field.expression.text();
    if (!value.ok()) {
      return Failure{absl::StrCat(field.path, ": cannot be evaluated"),
                     absl::StrCat(field.path, ": ", value.status().message())};
    }
    const double v = *value;
    const auto fail = [&](absl::string_view what) {
      return Failure{absl::StrCat(field.path, ": ", what),
                     absl::StrCat(field.path, ": '", text, "' = ", v, " is ", what)};
    };
    if (!std::isfinite(v)) return fail("not finite");
    const double rounded = std::nearbyint(v);
    if (std::fabs(v - rounded) > 1e-9 * std::max(1.0, std::fabs(rounded))) {
      return fail("not an integer");
    }
    if (std::fabs(rounded) > kMaxExactInteger) return fail("out of range");
    const auto integer = static_cast<int64_t>(rounded);
    if (integer < min) return fail(min == 1 ? "not positive" : "negative");
    if (integer > max) {
      return Failure{absl::StrCat(field.path, ": ", max_reason),
                     absl::StrCat(field.path, ": '", text, "' = ", integer, " is ", max_reason)};
    }
    if (out != nullptr) *out = integer;
    return std::nullopt;
  }

  std::optional<Failure> EvalGrid(Field& field, size_t axis, int64_t* out) {
    return EvalInteger(field, 1, kMaxGrid[axis],
                       absl::StrCat("above the CUDA limit (", kMaxGrid[axis], ")"), out);
  }

  std::optional<Failure> EvalBlock(Field& field, size_t axis, int64_t* out) {
    return EvalInteger(field, 1, kMaxBlock[axis],
                       absl::StrCat("above the CUDA limit (", kMaxBlock[axis], ")"), out);
  }

  std::optional<Failure> EvalShared(Field& field, int64_t* out) {
    const int64_t max = limits_.max_dynamic_shared_bytes;
    return EvalInteger(field, 0, max, absl::StrCat("above the device limit (", max, " bytes)"),
                       out);
  }

  std::optional<Failure> EvalLaunch(std::vector<Field>& grid, std::vector<Field>& block,
                                    std::optional<Field>& shared, const std::string& path,
                                    v1::LaunchDims* launch) {
    launch->Clear();
    for (size_t axis = 0; axis < grid.size(); ++axis) {
      int64_t value = 0;
      if (auto failure = EvalGrid(grid[axis], axis, &value)) return failure;
      launch->add_grid(value);
    }
    int64_t threads = 1;
    for (size_t axis = 0; axis < block.size(); ++axis) {
      int64_t value = 0;
      if (auto failure = EvalBlock(block[axis], axis, &value)) return failure;
      launch->add_block(value);
      threads *= value;  // at most 1024 * 1024 * 64
    }
    if (threads > limits_.max_threads_per_block) {
      const std::string reason = absl::StrCat("more threads per block than the device limit (",
                                              limits_.max_threads_per_block, ")");
      return Failure{absl::StrCat(path, ".block: ", reason),
                     absl::StrCat(path, ".block: ", threads, " threads per block, ", reason)};
    }
    if (shared.has_value()) {
      int64_t bytes = 0;
      if (auto failure = EvalShared(*shared, &bytes)) return failure;
      launch->set_dynamic_shared_bytes(bytes);
    }
    return std::nullopt;
  }

  std::optional<Failure> EvalBuffer(int b, BufferExtent* extent) {
    const v1::Buffer& buffer = family_.buffers(b);
    extent->name = buffer.name();
    extent->dtype = buffer.dtype() == v1::DTYPE_UNSPECIFIED ? problem_->dtype() : buffer.dtype();
    int64_t elements = 1;
    bool overflow = false;
    for (Field& field : shapes_[b]) {
      int64_t value = 0;
      if (auto failure = EvalInteger(field, 1, kNoLimit, "", &value)) return failure;
      extent->shape.push_back(value);
      overflow = overflow || __builtin_mul_overflow(elements, value, &elements);
    }
    int64_t bytes = 0;
    overflow = overflow || __builtin_mul_overflow(elements, DTypeBytes(extent->dtype), &bytes);
    if (overflow) {
      const std::string path = absl::StrCat("buffers[", b, "]");
      return Failure{absl::StrCat(path, ": size overflows int64"),
                     absl::StrCat(path, ": size overflows int64 (shape ",
                                  absl::StrJoin(extent->shape, " x "), ")")};
    }
    extent->elements = elements;
    extent->bytes = bytes;
    return std::nullopt;
  }

  // Tensor map t over its buffer (as evaluated for this config), passed
  // after the buffers and the tensor maps before it.
  std::optional<Failure> EvalTensorMap(int t, const std::vector<BufferExtent>& buffers,
                                       v1::TensorMapLayout* layout) {
    const v1::TensorMap& map = family_.tensor_maps(t);
    const std::string path = absl::StrCat("tensor_maps[", t, "]");
    const int b = map_buffers_[t];
    layout->set_buffer(b);
    layout->set_argument(family_.buffers_size() + t);
    layout->set_dtype(buffers[b].dtype);
    layout->set_swizzle(map.swizzle());
    for (int64_t extent : buffers[b].shape) layout->add_shape(extent);
    for (Field& field : boxes_[t]) {
      int64_t value = 0;
      if (auto failure =
              EvalInteger(field, 1, kMaxTensorMapBox,
                          absl::StrCat("above the TMA limit (", kMaxTensorMapBox, ")"), &value)) {
        return failure;
      }
      layout->add_box(static_cast<int32_t>(value));
    }
    if (absl::Status status = CheckTensorMapLayout(*layout); !status.ok()) {
      return Failure{absl::StrCat(path, ": breaks a TMA rule"),
                     absl::StrCat(path, " over '", map.buffer(), "': ", status.message())};
    }
    return std::nullopt;
  }

  std::optional<Failure> EvalScalar(size_t s, ScalarValue* out) {
    const v1::ScalarArgument& scalar = family_.scalars(static_cast<int>(s));
    Field& field = scalars_[s];
    const v1::DType dtype =
        scalar.dtype() == v1::DTYPE_UNSPECIFIED ? problem_->dtype() : scalar.dtype();
    double value = 0;
    const DTypeInfo* info = FindDType(dtype);
    if (info != nullptr && info->is_integer) {
      int64_t integer = 0;
      if (auto failure = EvalInteger(field, -kNoLimit, kNoLimit, "", &integer)) {
        return failure;
      }
      value = static_cast<double>(integer);
    } else {
      absl::StatusOr<double> result = field.expression.EvaluateAt(values_);
      if (!result.ok()) {
        return Failure{absl::StrCat(field.path, ": cannot be evaluated"),
                       absl::StrCat(field.path, ": ", result.status().message())};
      }
      if (!std::isfinite(*result)) {
        return Failure{absl::StrCat(field.path, ": not finite"),
                       absl::StrCat(field.path, ": '", field.expression.text(), "' = ", *result,
                                    " is not finite")};
      }
      value = *result;
    }
    if (out != nullptr) *out = ScalarValue{scalar.name(), dtype, value};
    return std::nullopt;
  }

  std::optional<Failure> EvalCount(Field& field, double* out) {
    absl::StatusOr<double> value = field.expression.EvaluateAt(values_);
    if (!value.ok()) {
      return Failure{absl::StrCat(field.path, ": cannot be evaluated"),
                     absl::StrCat(field.path, ": ", value.status().message())};
    }
    if (!std::isfinite(*value) || *value < 0) {
      return Failure{absl::StrCat(field.path, ": not a finite value >= 0"),
                     absl::StrCat(field.path, ": '", field.expression.text(), "' = ", *value,
                                  " is not a finite value >= 0")};
    }
    if (out != nullptr) *out = *value;
    return std::nullopt;
  }

  const v1::KernelFamily& family_;
  const v1::Problem* problem_ = nullptr;  // the one SetProblem named last
  DeviceLimits limits_;
  std::vector<std::string> names_;  // what values_ holds, position by position
  std::vector<double> values_;
  size_t first_param_ = 0;  // the position of the first param in names_
  std::vector<Field> constraints_;
  std::vector<Field> grid_, block_;
  std::optional<Field> shared_;
  std::vector<Field> reference_grid_, reference_block_;
  std::optional<Field> reference_shared_;
  std::vector<std::vector<Field>> shapes_;  // per buffer
  std::vector<std::vector<Field>> boxes_;   // per tensor map
  std::vector<int> map_buffers_;            // per tensor map: its buffer's index
  std::vector<Field> scalars_;
  std::optional<Field> bytes_;
  std::optional<Field> flops_;
  v1::LaunchDims reference_launch_;
};

}  // namespace

absl::StatusOr<SearchSpace> ExpandSearchSpace(const v1::KernelFamily& family,
                                              const v1::Problem& problem,
                                              const DeviceLimits& limits) {
  RETURN_IF_ERROR(ValidateProblem(family, problem));
  SearchSpace space;
  space.total_configs = ConfigCount(family);
  if (space.total_configs > kMaxConfigsPerFamily) {
    return absl::InvalidArgumentError(absl::StrCat("params: ", space.total_configs,
                                                   " configs, more than the limit of ",
                                                   kMaxConfigsPerFamily));
  }
  ASSIGN_OR_RETURN(ConfigResolver resolver, ConfigResolver::Create(family, problem, limits));
  RETURN_IF_ERROR(resolver.CheckProblem());
  space.reference_launch = resolver.reference_launch();
  space.reference_name = family.reference().kernel_name();
  space.reference_compile_options = resolver.ReferenceOptions();
  space.rejected_by_constraint.assign(family.constraints_size(), 0);

  const int param_count = family.params_size();
  std::vector<int> digits(param_count, 0);
  std::vector<int64_t> values(param_count, 0);
  for (int64_t index = 0; index < space.total_configs; ++index) {
    for (int p = 0; p < param_count; ++p) values[p] = family.params(p).values(digits[p]);
    int failed_constraint = -1;
    Failure failure;
    std::optional<Variant> variant = resolver.Resolve(index, values, &failed_constraint, &failure);
    if (variant.has_value()) {
      ++space.after_constraints;
      space.variants.push_back(*std::move(variant));
    } else if (failed_constraint >= 0) {
      ++space.rejected_by_constraint[failed_constraint];
    } else {
      ++space.after_constraints;
      ++space.dropped[failure.reason];
    }
    for (int p = param_count - 1; p >= 0; --p) {
      if (++digits[p] < family.params(p).values_size()) break;
      digits[p] = 0;
    }
  }
  return space;
}

namespace {

// The config's values in params order, and its index among all configs.
struct ConfigPosition {
  int64_t index = 0;
  std::vector<int64_t> values;
};

absl::StatusOr<ConfigPosition> PositionOf(const v1::KernelFamily& family,
                                          const v1::Config& config) {
  ConfigPosition position;
  for (const v1::TunableParameter& param : family.params()) {
    const auto it = config.params().find(param.name());
    if (it == config.params().end()) {
      return absl::InvalidArgumentError(absl::StrCat("config: missing '", param.name(), "'"));
    }
    const auto found = std::find(param.values().begin(), param.values().end(), it->second);
    if (found == param.values().end()) {
      return absl::InvalidArgumentError(absl::StrCat("config: ", param.name(), "=", it->second,
                                                     " is not a value of the param (",
                                                     absl::StrJoin(param.values(), ", "), ")"));
    }
    position.index = position.index * param.values_size() + (found - param.values().begin());
    position.values.push_back(it->second);
  }
  std::vector<std::string> extra;
  for (const auto& [name, value] : config.params()) {
    const bool known =
        std::any_of(family.params().begin(), family.params().end(),
                    [&name = name](const v1::TunableParameter& p) { return p.name() == name; });
    if (!known) extra.push_back(name);
  }
  if (!extra.empty()) {
    std::sort(extra.begin(), extra.end());
    return absl::InvalidArgumentError(absl::StrCat(
        "config: '", extra.front(), "' is not a param of family '", family.name(), "'"));
  }
  return position;
}

}  // namespace

CompileInputs ReferenceCompileInputs(const v1::KernelFamily& family, v1::DType dtype) {
  CompileInputs inputs;
  inputs.name_expression = family.reference().kernel_name();
  inputs.options.assign(family.compile_options().begin(), family.compile_options().end());
  for (std::string& macro : DTypeMacros(dtype)) inputs.options.push_back(std::move(macro));
  inputs.options.push_back("-DAUTOTUNE_REFERENCE=1");
  return inputs;
}

absl::StatusOr<CompileInputs> CompileInputsFor(const v1::KernelFamily& family,
                                               const v1::Config& config, v1::DType dtype) {
  if (FindDType(dtype) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", std::string(DTypeName(dtype)), " is not a known dtype"));
  }
  ASSIGN_OR_RETURN(ConfigPosition position, PositionOf(family, config));
  return CompileInputsOf(family, position.values, dtype);
}

struct FamilyConfigResolver::State {
  ConfigResolver resolver;  // its problem is set again by each Resolve
};

absl::StatusOr<FamilyConfigResolver> FamilyConfigResolver::Create(const v1::KernelFamily& family,
                                                                  const DeviceLimits& limits) {
  ASSIGN_OR_RETURN(ConfigResolver resolver, ConfigResolver::Parse(family, limits));
  FamilyConfigResolver created;
  created.family_ = &family;
  created.state_ = std::make_unique<State>(State{std::move(resolver)});
  return created;
}

FamilyConfigResolver::FamilyConfigResolver() = default;
FamilyConfigResolver::FamilyConfigResolver(FamilyConfigResolver&&) noexcept = default;
FamilyConfigResolver& FamilyConfigResolver::operator=(FamilyConfigResolver&&) noexcept = default;
FamilyConfigResolver::~FamilyConfigResolver() = default;

absl::StatusOr<Variant> FamilyConfigResolver::Resolve(const v1::Problem& problem,
                                                      const v1::Config& config) {
  const v1::KernelFamily& family = *family_;
  RETURN_IF_ERROR(ValidateProblem(family, problem));
  ASSIGN_OR_RETURN(ConfigPosition position, PositionOf(family, config));
  ConfigResolver& resolver = state_->resolver;
  resolver.SetProblem(problem);
  RETURN_IF_ERROR(resolver.CheckProblem());
  int failed_constraint = -1;
  Failure failure;
  std::optional<Variant> variant =
      resolver.Resolve(position.index, position.values, &failed_constraint, &failure);
  if (variant.has_value()) return *std::move(variant);
  if (failed_constraint >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("config fails constraints[", failed_constraint,
                                                   "] '", family.constraints(failed_constraint),
                                                   "'"));
  }
  return absl::InvalidArgumentError(absl::StrCat("config cannot run: ", failure.detail));
}

absl::StatusOr<Variant> ResolveConfig(const v1::KernelFamily& family, const v1::Problem& problem,
                                      const v1::Config& config, const DeviceLimits& limits) {
  RETURN_IF_ERROR(ValidateProblem(family, problem));
  RETURN_IF_ERROR(PositionOf(family, config).status());
  ASSIGN_OR_RETURN(FamilyConfigResolver resolver, FamilyConfigResolver::Create(family, limits));
  return resolver.Resolve(problem, config);
}

}  // namespace autotune::kernels
