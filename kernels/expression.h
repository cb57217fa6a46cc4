// Arithmetic expressions of kernel family descriptors: buffer shapes, launch
// geometry, dynamic shared memory, constraints, scalar values and the bytes
// and flops of a call. Parsing and evaluation are done by muparser; this
// module restricts the names an expression may use, adds the functions
// descriptors need and turns muparser's exceptions into absl::Status.
//
//   ASSIGN_OR_RETURN(Expression grid,
//                    Expression::Parse("ceil_div(n, BLOCK)", {"n", "BLOCK"}));
//   ASSIGN_OR_RETURN(int64_t blocks, grid.EvaluateInteger({{"n", 1000}, {"BLOCK", 256}}));
//   // blocks == 4
//
// The language is muparser's: numbers (1, 2.5, 1e3), + - * / ^ (power),
// comparisons < <= > >= == != (1 or 0), && ||, `c ? a : b`, parentheses and
// the built-in functions (min, max, abs, rint, sqrt, log2, sum, ...). Added
// here:
//   a % b            remainder with the sign of a (fmod), same precedence as *
//   !x               1 when x is 0, else 0
//   ceil_div(a, b)   ceil(a / b), exact for integers
//   round_up(a, b)   the smallest multiple of b that is >= a
//   is_pow2(x)       1 when x is a positive integer power of two (1, 2, 4, ...)
//   ceil(x), floor(x)
// Assignment (`x = 4`) is rejected: a constraint written `BLOCK = 64` would
// otherwise overwrite the variable and always hold.
//
// Thread-safety: an Expression owns its own muparser parser, and muparser
// parsers are not thread-safe (evaluation writes into the parser's stack and
// into the bound variables). Evaluate* are therefore non-const; use one
// Expression per thread (copies are independent and cheap to make).
#ifndef AUTOTUNE_KERNELS_EXPRESSION_H_
#define AUTOTUNE_KERNELS_EXPRESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace autotune::kernels {

// The variable every family expression may use: the element size in bytes of
// the problem's dtype (4 for FLOAT32, 2 for FLOAT16, ...).
inline constexpr absl::string_view kDTypeBytesVariable = "dtype_bytes";

// The variables a family's constraints (and only they) may also use: the
// architecture the variant is compiled for, as its number (90 for sm_90,
// sm_90a and sm_90f) and whether it is arch-specific (1 for the "a" of
// sm_90a, whose instructions such as wgmma run on that one architecture
// only; else 0). A config whose code needs sm_90a says so in a constraint,
// e.g. "WGMMA == 0 || (arch == 90 && arch_specific == 1)".
inline constexpr absl::string_view kArchVariable = "arch";
inline constexpr absl::string_view kArchSpecificVariable = "arch_specific";
inline constexpr absl::string_view kTargetVariables[] = {kArchVariable, kArchSpecificVariable};

// The variable a family's launch geometry (and only it) may also use: the
// multiprocessor count of the device the kernel runs on, so that a
// persistent kernel launches one block per SM, e.g. grid
// "min(ceil_div(M, BM) * ceil_div(N, BN), sm_count)". Where the device is not
// known (a compile-only job, a lookup that names no device) it is
// kUnknownSmCount, a value no grid reaches: such a kernel then gets one block
// per tile, which it must run correctly (a persistent kernel's result may
// never depend on its grid).
inline constexpr absl::string_view kSmCountVariable = "sm_count";
inline constexpr double kUnknownSmCount = 2147483647;

// The longest expression text accepted. A descriptor's expressions are a
// line each; a limit keeps a hostile one (a descriptor sent over RPC) from
// costing the daemon more than its size.
inline constexpr size_t kMaxExpressionChars = 4096;

// True for the names of functions and constants of the expression language
// ("min", "ceil_div", "_pi", ...): such names cannot be variables.
bool IsExpressionBuiltinName(absl::string_view name);

class Expression {
 public:
  // Variable name -> value. Names the expression does not use are ignored.
  using Variables = absl::flat_hash_map<std::string, double>;

  // Parses `text`, which may use only the variables in `allowed_names`.
  // INVALID_ARGUMENT:
  //   "unknown name 'BLCK' (known: BLOCK, batch, n)"  (known names sorted)
  //   "unknown function 'foo' (functions: abs, ...)"
  //   "syntax error in 'n +': Unexpected end of expression at position 4"
  //   "syntax error at position 7 in '2 * (n': Missing parenthesis"
  //   "empty expression"
  //   "the expression is 5000 characters long, at most 4096"
  //   "assignment '=' at position 6 in 'BLOCK = 64' (compare with '==')"
  //   "'n, 2' has 2 comma-separated values; an expression has one"
  //   "'min' is a function name, not a variable" (an allowed name clashes)
  static absl::StatusOr<Expression> Parse(absl::string_view text,
                                          const std::vector<std::string>& allowed_names);

  // Copies parse the text again into a parser of their own; moves keep the
  // parser (bound variables live on the heap, so their addresses survive).
  // A moved-from Expression may only be destroyed or assigned to.
  Expression(const Expression& other);
  Expression& operator=(const Expression& other);
  Expression(Expression&& other) noexcept;
  Expression& operator=(Expression&& other) noexcept;
  ~Expression();

  const std::string& text() const;
  // The variables the expression uses, sorted, each once.
  const std::vector<std::string>& variables() const;
  bool Uses(absl::string_view name) const;

  // The value of the expression. INVALID_ARGUMENT "no value for 'n'" when a
  // used variable is missing from `values`, or the message of an error
  // raised by a function ("ceil_div(a, b): b is 0"). A non-finite result
  // (1/0) is returned as such; EvaluateInteger rejects it.
  absl::StatusOr<double> Evaluate(const Variables& values);

  // For values that must be integers (shapes, grid, block, bytes).
  // INVALID_ARGUMENT "'n / 3' = 2.5 is not an integer", "... is not finite",
  // "... is out of range" (beyond +-2^53, where doubles skip integers).
  // Results within 1e-9 (relative) of an integer count as that integer.
  absl::StatusOr<int64_t> EvaluateInteger(const Variables& values);

  // For constraints: true when the value is non-zero. A non-finite value is
  // an error ("... is not finite"), not a pass.
  absl::StatusOr<bool> EvaluateCondition(const Variables& values);

  // The same, with the values by position, for loops that evaluate many
  // expressions over many configs (a search space's expansion) without a
  // lookup by name per variable per call. BindPositions resolves each
  // variable the expression uses to its position in `names`, once
  // (INVALID_ARGUMENT "no value for 'n' in '...'" when one is not there);
  // the *At calls then read it from `values`, which must hold a value for
  // every name bound to. A copy is bound as its original was.
  absl::Status BindPositions(absl::Span<const std::string> names);
  absl::StatusOr<double> EvaluateAt(absl::Span<const double> values);
  absl::StatusOr<bool> EvaluateConditionAt(absl::Span<const double> values);

 private:
  struct State;
  explicit Expression(std::unique_ptr<State> state);
  // Evaluates with the bound variables' slots already filled.
  absl::StatusOr<double> EvaluateSlots();
  absl::StatusOr<bool> Condition(absl::StatusOr<double> value) const;

  std::unique_ptr<State> state_;
};

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_EXPRESSION_H_
