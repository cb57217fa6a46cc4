#include "kernels/expression.h"

#include <muParser.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/closest_name.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

// Doubles represent every integer up to 2^53 exactly; beyond that integer
// results of expressions cannot be trusted.

// Raised by the functions added below; muparser lets exceptions of the
// callbacks pass through Eval() unchanged.
struct FunctionError {
  std::string message;
};

bool IsExactInteger(double v) {
  return std::isfinite(v) && std::trunc(v) == v && std::fabs(v) <= kMaxExactInteger;
}

double CeilDiv(double a, double b) {
  if (b == 0) throw FunctionError{"ceil_div(a, b): b is 0"};
  if (IsExactInteger(a) && IsExactInteger(b)) {
    const auto ia = static_cast<int64_t>(a);
    const auto ib = static_cast<int64_t>(b);
    int64_t q = ia / ib;
    if (ia % ib != 0 && ((ia < 0) == (ib < 0))) ++q;
    return static_cast<double>(q);
  }
  return std::ceil(a / b);
}

double RoundUp(double a, double b) {
  if (b == 0) throw FunctionError{"round_up(a, b): b is 0"};
  return CeilDiv(a, b) * b;
}

double IsPow2(double x) {
  if (!IsExactInteger(x) || x < 1) return 0;
  const auto i = static_cast<int64_t>(x);
  return (i & (i - 1)) == 0 ? 1 : 0;
}

double Ceil(double x) { return std::ceil(x); }
double Floor(double x) { return std::floor(x); }
double Mod(double a, double b) {
  if (b == 0) throw FunctionError{"a % b: b is 0"};
  return std::fmod(a, b);
}
double Not(double x) { return x == 0 ? 1 : 0; }

// Descriptor expressions use only the functions below plus muparser's own;
// every parser is set up the same way.
void AddFunctions(mu::Parser& parser) {
  parser.DefineFun("ceil_div", CeilDiv);
  parser.DefineFun("round_up", RoundUp);
  parser.DefineFun("is_pow2", IsPow2);
  parser.DefineFun("ceil", Ceil);
  parser.DefineFun("floor", Floor);
  parser.DefineOprt("%", Mod, mu::prMUL_DIV, mu::oaLEFT, /*a_bAllowOpt=*/true);
  parser.DefineInfixOprt("!", Not);
}

const std::set<std::string>& BuiltinNames() {
  static const std::set<std::string>* const names = [] {
    auto* result = new std::set<std::string>();
    mu::Parser parser;
    AddFunctions(parser);
    for (const auto& [name, callback] : parser.GetFunDef()) result->insert(name);
    for (const auto& [name, value] : parser.GetConst()) result->insert(name);
    return result;
  }();
  return *names;
}

std::vector<std::string> FunctionNames() {
  std::vector<std::string> names;
  mu::Parser parser;
  AddFunctions(parser);
  for (const auto& [name, callback] : parser.GetFunDef()) names.push_back(name);
  return names;  // std::map keys: sorted
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// Whether `name` occurs in `text` as a whole identifier directly followed
// (after spaces) by '('.
bool CalledAsFunction(absl::string_view text, absl::string_view name) {
  for (size_t pos = text.find(name); pos != absl::string_view::npos;
       pos = text.find(name, pos + 1)) {
    const size_t end = pos + name.size();
    if (pos > 0 && IsNameChar(text[pos - 1])) continue;
    if (end < text.size() && IsNameChar(text[end])) continue;
    size_t next = end;
    while (next < text.size() && absl::ascii_isspace(text[next])) ++next;
    if (next < text.size() && text[next] == '(') return true;
  }
  return false;
}

// muparser's `=` assigns to a variable; comparisons use ==, <=, >=, !=.
absl::Status RejectAssignment(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool next_is_eq = i + 1 < text.size() && text[i + 1] == '=';
    if ((c == '=' || c == '<' || c == '>' || c == '!') && next_is_eq) {
      ++i;
      continue;
    }
    if (c == '=') {
      return absl::InvalidArgumentError(
          absl::StrCat("assignment '=' at position ", i, " in '", text, "' (compare with '==')"));
    }
  }
  return absl::OkStatus();
}

std::string FormatNumber(double v) { return absl::StrCat(v); }

// Identifiers muparser met that are not allowed variables. muparser asks
// this factory for storage for each; the names are then reported.
struct UnknownNames {
  std::vector<std::string> names;
  std::vector<std::unique_ptr<double>> slots;
};

double* RecordUnknownName(const char* name, void* user_data) {
  auto* unknown = static_cast<UnknownNames*>(user_data);
  unknown->names.emplace_back(name);
  unknown->slots.push_back(std::make_unique<double>(0));
  return unknown->slots.back().get();
}

}  // namespace

bool IsExpressionBuiltinName(absl::string_view name) {
  return BuiltinNames().count(std::string(name)) > 0;
}

struct Expression::State {
  std::string text;
  std::vector<std::string> allowed_names;
  // One slot per allowed name, bound with DefineVar: the vector is sized
  // once before binding and never resized, so the pointers stay valid.
  std::vector<double> slots;
  std::vector<std::string> used;                            // sorted
  std::vector<std::pair<std::string, double*>> used_slots;  // same order as `used`
  std::vector<size_t> positions;                            // per used slot, after BindPositions
  UnknownNames unknown;
  mu::Parser parser;
};

absl::StatusOr<Expression> Expression::Parse(absl::string_view text,
                                             const std::vector<std::string>& allowed_names) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("empty expression");
  }
  if (text.size() > kMaxExpressionChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the expression is ", text.size(), " characters long, at most ", kMaxExpressionChars));
  }
  if (absl::Status status = RejectAssignment(text); !status.ok()) return status;
  for (const std::string& name : allowed_names) {
    if (IsExpressionBuiltinName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is a function name, not a variable"));
    }
  }

  auto state = std::make_unique<State>();
  state->text = std::string(text);
  state->allowed_names = allowed_names;
  state->slots.assign(allowed_names.size(), 0.0);
  const auto known_names = [&] {
    std::vector<std::string> sorted = allowed_names;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    return absl::StrCat("(known: ", sorted.empty() ? "none" : absl::StrJoin(sorted, ", "), ")");
  };
  const auto unknown_name_error = [&](const std::string& name) {
    if (CalledAsFunction(text, name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown function '", name, "' (functions: ", absl::StrJoin(FunctionNames(), ", "), ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown name '", name, "'", DidYouMean(name, allowed_names), " ", known_names()));
  };

  try {
    mu::Parser& parser = state->parser;
    AddFunctions(parser);
    for (size_t i = 0; i < allowed_names.size(); ++i) {
      parser.DefineVar(allowed_names[i], &state->slots[i]);
    }
    parser.SetVarFactory(RecordUnknownName, &state->unknown);
    parser.SetExpr(state->text);
    // Parses the whole expression (syntax, arity) without evaluating it.
    const mu::varmap_type& used = parser.GetUsedVar();
    if (!state->unknown.names.empty()) return unknown_name_error(state->unknown.names.front());
    // muparser evaluates "a, b" to several results and returns the last.
    if (parser.GetNumResults() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' has ", parser.GetNumResults(),
                       " comma-separated values; an expression has one"));
    }
    for (const auto& [name, slot] : used) {
      state->used.push_back(name);
      state->used_slots.emplace_back(name, slot);
    }
  } catch (const mu::ParserError& error) {
    if (!state->unknown.names.empty()) return unknown_name_error(state->unknown.names.front());
    const std::string message = error.GetMsg();
    if (error.GetPos() < 0 || message.find("position") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("syntax error in '", text, "': ", message));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("syntax error at position ", error.GetPos(), " in '", text, "': ", message));
  } catch (const FunctionError& error) {
    // Constant parts are folded while parsing, e.g. ceil_div(1, 0).
    return absl::InvalidArgumentError(absl::StrCat(error.message, " in '", text, "'"));
  }
  return Expression(std::move(state));
}

Expression::Expression(std::unique_ptr<State> state) : state_(std::move(state)) {}

Expression::Expression(const Expression& other) {
  absl::StatusOr<Expression> copy = Parse(other.state_->text, other.state_->allowed_names);
  // The same text with the same names parsed once already.
  if (!copy.ok()) std::abort();
  state_ = std::move(copy->state_);
  state_->positions = other.state_->positions;
}

Expression& Expression::operator=(const Expression& other) {
  if (this != &other) *this = Expression(other);
  return *this;
}

Expression::Expression(Expression&& other) noexcept = default;
Expression& Expression::operator=(Expression&& other) noexcept = default;
Expression::~Expression() = default;

const std::string& Expression::text() const { return state_->text; }

const std::vector<std::string>& Expression::variables() const { return state_->used; }

bool Expression::Uses(absl::string_view name) const {
  return std::binary_search(state_->used.begin(), state_->used.end(), name);
}

absl::StatusOr<double> Expression::Evaluate(const Variables& values) {
  for (auto& [name, slot] : state_->used_slots) {
    const auto it = values.find(name);
    if (it == values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no value for '", name, "' in '", state_->text, "'"));
    }
    *slot = it->second;
  }
  return EvaluateSlots();
}

absl::Status Expression::BindPositions(absl::Span<const std::string> names) {
  std::vector<size_t> positions;
  for (const auto& [name, slot] : state_->used_slots) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no value for '", name, "' in '", state_->text, "'"));
    }
    positions.push_back(static_cast<size_t>(it - names.begin()));
  }
  state_->positions = std::move(positions);
  return absl::OkStatus();
}

absl::StatusOr<double> Expression::EvaluateAt(absl::Span<const double> values) {
  // Unbound, or bound to more names than `values` holds: a caller's bug.
  if (state_->positions.size() != state_->used_slots.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", state_->text, "' is evaluated by position before BindPositions"));
  }
  for (size_t i = 0; i < state_->positions.size(); ++i) {
    if (state_->positions[i] >= values.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no value for '", state_->used_slots[i].first, "' in '", state_->text, "'"));
    }
    *state_->used_slots[i].second = values[state_->positions[i]];
  }
  return EvaluateSlots();
}

absl::StatusOr<double> Expression::EvaluateSlots() {
  try {
    return state_->parser.Eval();
  } catch (const mu::ParserError& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot evaluate '", state_->text, "': ", error.GetMsg()));
  } catch (const FunctionError& error) {
    return absl::InvalidArgumentError(absl::StrCat(error.message, " in '", state_->text, "'"));
  }
}

absl::StatusOr<int64_t> Expression::EvaluateInteger(const Variables& values) {
  absl::StatusOr<double> value = Evaluate(values);
  if (!value.ok()) return value.status();
  const double v = *value;
  if (!std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", state_->text, "' = ", FormatNumber(v), " is not finite"));
  }
  const double rounded = std::nearbyint(v);
  if (std::fabs(v - rounded) > 1e-9 * std::max(1.0, std::fabs(rounded))) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", state_->text, "' = ", FormatNumber(v), " is not an integer"));
  }
  if (std::fabs(rounded) > kMaxExactInteger) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", state_->text, "' = ", FormatNumber(v), " is out of range"));
  }
  return static_cast<int64_t>(rounded);
}

absl::StatusOr<bool> Expression::EvaluateCondition(const Variables& values) {
  return Condition(Evaluate(values));
}

absl::StatusOr<bool> Expression::EvaluateConditionAt(absl::Span<const double> values) {
  return Condition(EvaluateAt(values));
}

absl::StatusOr<bool> Expression::Condition(absl::StatusOr<double> value) const {
  if (!value.ok()) return value.status();
  if (!std::isfinite(*value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", state_->text, "' = ", FormatNumber(*value), " is not finite"));
  }
  return *value != 0;
}

}  // namespace autotune::kernels
