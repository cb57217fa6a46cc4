// GoogleTest matchers for absl::Status and absl::StatusOr (test-only).
//
//   EXPECT_THAT(store.Get(key), StatusIs(absl::StatusCode::kNotFound,
//                                        HasSubstr("no entry")));
//   ASSERT_OK(store.Put(entry));
//   ASSERT_OK_AND_ASSIGN(auto entry, store.Get(key));
#ifndef AUTOTUNE_BASE_STATUS_MATCHERS_H_
#define AUTOTUNE_BASE_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER_P2(StatusIs, code, message_matcher, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& status = ::autotune::testing::GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code &&
         ::testing::Matches(message_matcher)(std::string(status.message()));
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = ::autotune::testing::GetStatus(arg);
  *result_listener << "status is " << status;
  return status.ok();
}

}  // namespace autotune::testing

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::autotune::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::autotune::testing::IsOk())

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(AUTOTUNE_CONCAT_(autotune_statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  ASSERT_TRUE(statusor.ok()) << statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // AUTOTUNE_BASE_STATUS_MATCHERS_H_
