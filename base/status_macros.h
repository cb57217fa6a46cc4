// Early-return helpers for absl::Status / absl::StatusOr, which the Abseil
// release in Debian 12 does not ship.
//
//   RETURN_IF_ERROR(store.Put(entry));
//   ASSIGN_OR_RETURN(auto family, store.GetFamily(name));
#ifndef AUTOTUNE_BASE_STATUS_MACROS_H_
#define AUTOTUNE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define AUTOTUNE_CONCAT_INNER_(a, b) a##b
#define AUTOTUNE_CONCAT_(a, b) AUTOTUNE_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                            \
  do {                                                   \
    ::absl::Status autotune_status_ = (expr);            \
    if (!autotune_status_.ok()) return autotune_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(AUTOTUNE_CONCAT_(autotune_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)        \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // AUTOTUNE_BASE_STATUS_MACROS_H_
