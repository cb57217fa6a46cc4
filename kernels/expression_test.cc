#include "kernels/expression.h"

#include <cctype>
#include <cstdint>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

const std::vector<std::string> kNames = {"n", "BLOCK", "batch", "dtype_bytes"};

struct ValueCase {
  std::string text;
  double expected;
};

// Test names in ctest show the case; only name characters survive there.
std::string CaseName(const std::string& text) {
  std::string name;
  for (char c : text) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

void PrintTo(const ValueCase& c, std::ostream* os) { *os << CaseName(c.text); }

class ExpressionValueTest : public ::testing::TestWithParam<ValueCase> {};

TEST_P(ExpressionValueTest, Evaluates) {
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse(GetParam().text, kNames));
  ASSERT_OK_AND_ASSIGN(
      double value,
      expression.Evaluate({{"n", 1000}, {"BLOCK", 256}, {"batch", 3}, {"dtype_bytes", 2}}));
  EXPECT_DOUBLE_EQ(value, GetParam().expected) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Language, ExpressionValueTest,
    ::testing::Values(ValueCase{"n * dtype_bytes", 2000},  //
                      ValueCase{"ceil_div(n, BLOCK)", 4}, ValueCase{"ceil_div(1024, 256)", 4},
                      ValueCase{"ceil_div(-7, 2)", -3}, ValueCase{"ceil_div(7, -2)", -3},
                      ValueCase{"ceil_div(-7, -2)", 4}, ValueCase{"round_up(n, BLOCK)", 1024},
                      ValueCase{"round_up(1024, 256)", 1024}, ValueCase{"min(n, BLOCK, batch)", 3},
                      ValueCase{"max(n, BLOCK)", 1000}, ValueCase{"is_pow2(BLOCK)", 1},
                      ValueCase{"is_pow2(n)", 0}, ValueCase{"is_pow2(1)", 1},
                      ValueCase{"is_pow2(0)", 0}, ValueCase{"is_pow2(2.5)", 0},
                      ValueCase{"ceil(n / 3)", 334}, ValueCase{"floor(n / 3)", 333},
                      ValueCase{"n % BLOCK", 232}, ValueCase{"n % BLOCK == 0", 0},
                      ValueCase{"2 + 7 % 4 * 2", 8},  // % binds like *
                      ValueCase{"!(n > BLOCK)", 0}, ValueCase{"!0", 1}, ValueCase{"n != BLOCK", 1},
                      ValueCase{"BLOCK <= 256 && batch >= 3", 1},
                      ValueCase{"n < 10 || batch == 3", 1}, ValueCase{"batch > 2 ? BLOCK : n", 256},
                      ValueCase{"2^10", 1024}, ValueCase{"log2(BLOCK)", 8},
                      ValueCase{"1e3 + 0.5", 1000.5}));

TEST(ExpressionTest, UnknownNameListsTheKnownNamesSorted) {
  EXPECT_THAT(Expression::Parse("BLCK * 2", {"n", "BLOCK", "batch"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown name 'BLCK' (did you mean 'BLOCK'?) (known: BLOCK, batch, n)"));
  EXPECT_THAT(
      Expression::Parse("width * 2", {"n", "BLOCK"}),
      StatusIs(absl::StatusCode::kInvalidArgument, "unknown name 'width' (known: BLOCK, n)"));
}

TEST(ExpressionTest, UnknownNameAfterKnownOnes) {
  EXPECT_THAT(Expression::Parse("n * H2 + 1", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown name 'H2' (known: n)"));
}

TEST(ExpressionTest, UnknownFunctionListsTheFunctions) {
  EXPECT_THAT(Expression::Parse("cdiv(n, 4)", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("unknown function 'cdiv' (functions: "),
                                        HasSubstr("ceil_div"), HasSubstr("is_pow2"))));
}

TEST(ExpressionTest, SyntaxErrorsGiveThePosition) {
  EXPECT_THAT(Expression::Parse("n +", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "syntax error in 'n +': Unexpected end of expression at position 4"));
  EXPECT_THAT(Expression::Parse("2 * (n", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("syntax error at position 7 in '2 * (n': ")));
  EXPECT_THAT(Expression::Parse("n n", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position 2")));
  EXPECT_THAT(Expression::Parse("ceil_div(n)", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("syntax error")));
}

TEST(ExpressionTest, SeveralCommaSeparatedValuesAreAnError) {
  EXPECT_THAT(Expression::Parse("n, 2", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "'n, 2' has 2 comma-separated values; an expression has one"));
  EXPECT_OK(Expression::Parse("max(n, 2)", {"n"}));
}

TEST(ExpressionTest, EmptyIsAnError) {
  EXPECT_THAT(Expression::Parse("  ", {"n"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "empty expression"));
}

TEST(ExpressionTest, AssignmentIsRejected) {
  EXPECT_THAT(Expression::Parse("BLOCK = 64", {"BLOCK"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "assignment '=' at position 6 in 'BLOCK = 64' (compare with '==')"));
  EXPECT_OK(Expression::Parse("BLOCK == 64 || BLOCK <= 32 || BLOCK >= 9 || BLOCK != 1", {"BLOCK"}));
}

TEST(ExpressionTest, AllowedNameMustNotBeAFunction) {
  EXPECT_THAT(
      Expression::Parse("min + 1", {"min"}),
      StatusIs(absl::StatusCode::kInvalidArgument, "'min' is a function name, not a variable"));
  EXPECT_TRUE(IsExpressionBuiltinName("ceil_div"));
  EXPECT_TRUE(IsExpressionBuiltinName("max"));
  EXPECT_TRUE(IsExpressionBuiltinName("_pi"));
  EXPECT_FALSE(IsExpressionBuiltinName("BLOCK"));
  EXPECT_FALSE(IsExpressionBuiltinName(kDTypeBytesVariable));
}

TEST(ExpressionTest, ConstantDivisionByZeroInAFunctionFailsAtParse) {
  EXPECT_THAT(
      Expression::Parse("ceil_div(1, 0)", {}),
      StatusIs(absl::StatusCode::kInvalidArgument, "ceil_div(a, b): b is 0 in 'ceil_div(1, 0)'"));
}

TEST(ExpressionTest, FunctionErrorAtEvaluation) {
  ASSERT_OK_AND_ASSIGN(Expression expression,
                       Expression::Parse("ceil_div(n, BLOCK - 64)", {"n", "BLOCK"}));
  EXPECT_THAT(expression.Evaluate({{"n", 10}, {"BLOCK", 64}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "ceil_div(a, b): b is 0 in 'ceil_div(n, BLOCK - 64)'"));
  // The parser is still usable afterwards.
  EXPECT_THAT(expression.Evaluate({{"n", 10}, {"BLOCK", 65}}), IsOkAndHolds(10.0));
}

TEST(ExpressionTest, ReportsTheVariablesItUses) {
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse("n * dtype_bytes + n", kNames));
  EXPECT_THAT(expression.variables(), ElementsAre("dtype_bytes", "n"));
  EXPECT_TRUE(expression.Uses("n"));
  EXPECT_FALSE(expression.Uses("BLOCK"));
  EXPECT_EQ(expression.text(), "n * dtype_bytes + n");
}

TEST(ExpressionTest, MissingValueIsAnErrorAndExtraValuesAreIgnored) {
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse("n + batch", kNames));
  EXPECT_THAT(expression.Evaluate({{"n", 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no value for 'batch' in 'n + batch'"));
  EXPECT_THAT(expression.Evaluate({{"n", 1}, {"batch", 2}, {"unrelated", 5}}), IsOkAndHolds(3.0));
}

struct IntegerCase {
  std::string text;
  double n;
  absl::StatusCode code;
  int64_t expected;     // when OK
  std::string message;  // when not OK
};

void PrintTo(const IntegerCase& c, std::ostream* os) { *os << CaseName(c.text); }

class ExpressionIntegerTest : public ::testing::TestWithParam<IntegerCase> {};

TEST_P(ExpressionIntegerTest, ChecksIntegrality) {
  const IntegerCase& c = GetParam();
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse(c.text, {"n"}));
  absl::StatusOr<int64_t> value = expression.EvaluateInteger({{"n", c.n}});
  if (c.code == absl::StatusCode::kOk) {
    EXPECT_THAT(value, IsOkAndHolds(c.expected)) << c.text;
  } else {
    EXPECT_THAT(value, StatusIs(c.code, c.message)) << c.text;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Integers, ExpressionIntegerTest,
    ::testing::Values(IntegerCase{"n / 4", 1024, absl::StatusCode::kOk, 256, ""},
                      IntegerCase{"n * 0.1 * 10", 3, absl::StatusCode::kOk, 3,
                                  ""},  // 3.0000000000000004
                      IntegerCase{"-n", 5, absl::StatusCode::kOk, -5, ""},
                      IntegerCase{"2^53", 0, absl::StatusCode::kOk, int64_t{1} << 53, ""},
                      IntegerCase{"n / 4", 10, absl::StatusCode::kInvalidArgument, 0,
                                  "'n / 4' = 2.5 is not an integer"},
                      IntegerCase{"n / 0", 10, absl::StatusCode::kInvalidArgument, 0,
                                  "'n / 0' = inf is not finite"},
                      IntegerCase{"2^60 + n", 0, absl::StatusCode::kInvalidArgument, 0,
                                  "'2^60 + n' = 1.15292e+18 is out of range"}));

TEST(ExpressionTest, ConditionIsNonZeroAndRejectsNonFinite) {
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse("n % 4", {"n"}));
  EXPECT_THAT(expression.EvaluateCondition({{"n", 8}}), IsOkAndHolds(false));
  EXPECT_THAT(expression.EvaluateCondition({{"n", 9}}), IsOkAndHolds(true));
  ASSERT_OK_AND_ASSIGN(Expression ratio, Expression::Parse("1 / n", {"n"}));
  EXPECT_THAT(ratio.EvaluateCondition({{"n", 0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'1 / n' = inf is not finite"));
}

TEST(ExpressionTest, CopiesAndMovesKeepTheirOwnBindings) {
  ASSERT_OK_AND_ASSIGN(Expression original, Expression::Parse("n * 2 + BLOCK", kNames));
  Expression copy = original;
  std::vector<Expression> moved;
  moved.push_back(std::move(original));
  for (int i = 0; i < 16; ++i) moved.push_back(copy);  // reallocations move elements
  EXPECT_THAT(copy.Evaluate({{"n", 1}, {"BLOCK", 10}}), IsOkAndHolds(12.0));
  EXPECT_THAT(moved.front().Evaluate({{"n", 2}, {"BLOCK", 10}}), IsOkAndHolds(14.0));
  EXPECT_THAT(moved.back().Evaluate({{"n", 3}, {"BLOCK", 10}}), IsOkAndHolds(16.0));
  // Evaluating the copy must not have changed what the others see.
  EXPECT_THAT(copy.Evaluate({{"n", 1}, {"BLOCK", 0}}), IsOkAndHolds(2.0));

  Expression assigned = *Expression::Parse("1", {});
  assigned = moved.back();
  EXPECT_EQ(assigned.text(), "n * 2 + BLOCK");
  EXPECT_THAT(assigned.Evaluate({{"n", 5}, {"BLOCK", 1}}), IsOkAndHolds(11.0));
}

// By position: bound once to a list of names (in any order, with names the
// expression does not use), then evaluated over values in that order; the
// same answers and errors as by name, and copies keep the binding.
TEST(ExpressionTest, ValuesByPositionAnswerAsByName) {
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse("ceil_div(n, BLOCK) * 2", kNames));
  EXPECT_THAT(expression.EvaluateAt(std::vector<double>{1000, 256}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before BindPositions")));
  const std::vector<std::string> order = {"batch", "BLOCK", "dtype_bytes", "n"};
  ASSERT_OK(expression.BindPositions(order));
  EXPECT_THAT(expression.EvaluateAt(std::vector<double>{7, 256, 2, 1000}), IsOkAndHolds(8.0));
  EXPECT_THAT(expression.Evaluate({{"n", 1000}, {"BLOCK", 256}}), IsOkAndHolds(8.0));
  // Fewer values than the names bound to: the missing one is named.
  EXPECT_THAT(expression.EvaluateAt(std::vector<double>{7, 256}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no value for 'n'")));
  EXPECT_THAT(expression.EvaluateAt(std::vector<double>{7, 0, 2, 1000}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ceil_div")));
  Expression copy = expression;
  EXPECT_THAT(copy.EvaluateAt(std::vector<double>{0, 100, 0, 1000}), IsOkAndHolds(20.0));

  ASSERT_OK_AND_ASSIGN(Expression condition, Expression::Parse("1 / n > 0.5", kNames));
  EXPECT_THAT(condition.BindPositions({"BLOCK"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no value for 'n'")));
  ASSERT_OK(condition.BindPositions({"n"}));
  EXPECT_THAT(condition.EvaluateConditionAt(std::vector<double>{1}), IsOkAndHolds(true));
  EXPECT_THAT(condition.EvaluateConditionAt(std::vector<double>{4}), IsOkAndHolds(false));
  ASSERT_OK_AND_ASSIGN(Expression ratio, Expression::Parse("1 / n", {"n"}));
  ASSERT_OK(ratio.BindPositions({"n"}));
  EXPECT_THAT(ratio.EvaluateConditionAt(std::vector<double>{0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "'1 / n' = inf is not finite"));
}

TEST(ExpressionTest, ParsesConcurrently) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 200; ++i) {
        absl::StatusOr<Expression> expression =
            Expression::Parse("round_up(n, BLOCK) + is_pow2(BLOCK)", kNames);
        absl::StatusOr<Expression> unknown = Expression::Parse("m + 1", kNames);
        if (!expression.ok() || unknown.ok() ||
            *expression->Evaluate({{"n", 100}, {"BLOCK", 64}}) != 129) {
          ++failures[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(failures, ElementsAre(0, 0, 0, 0));
}

TEST(ExpressionTest, CopiesEvaluateConcurrently) {
  ASSERT_OK_AND_ASSIGN(Expression expression, Expression::Parse("ceil_div(n, BLOCK)", kNames));
  std::vector<std::thread> threads;
  std::vector<int64_t> sums(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &sums, copy = expression]() mutable {
      for (int n = 1; n <= 2000; ++n) {
        absl::StatusOr<int64_t> blocks =
            copy.EvaluateInteger({{"n", static_cast<double>(n)}, {"BLOCK", 64.0 * (t + 1)}});
        sums[t] += blocks.ok() ? *blocks : -1000000;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) {
    int64_t expected = 0;
    for (int n = 1; n <= 2000; ++n) expected += (n + 64 * (t + 1) - 1) / (64 * (t + 1));
    EXPECT_EQ(sums[t], expected) << "thread " << t;
  }
}

}  // namespace
}  // namespace autotune::kernels
