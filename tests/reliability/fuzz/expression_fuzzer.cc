// Descriptor expressions (kernels/expression.h): muparser behind our
// checks. The first line is the expression; the bytes after it give the
// variables' values.
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/expression.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string text = input.substr(0, newline);
  absl::StatusOr<autotune::kernels::Expression> expression =
      autotune::kernels::Expression::Parse(text, {"n", "BLOCK", "dtype_bytes"});
  if (!expression.ok()) return 0;
  autotune::kernels::Expression::Variables values = {
      {"n", 4096}, {"BLOCK", 128}, {"dtype_bytes", 2}};
  if (newline != std::string::npos) {
    const std::string rest = input.substr(newline + 1);
    double numbers[3] = {0, 0, 0};
    std::memcpy(numbers, rest.data(), std::min(rest.size(), sizeof(numbers)));
    values = {{"n", numbers[0]}, {"BLOCK", numbers[1]}, {"dtype_bytes", numbers[2]}};
  }
  expression->Evaluate(values).IgnoreError();
  expression->EvaluateInteger(values).IgnoreError();
  expression->EvaluateCondition(values).IgnoreError();
  autotune::kernels::Expression copy = *expression;  // parses the text again
  copy.Evaluate(values).IgnoreError();
  return 0;
}
