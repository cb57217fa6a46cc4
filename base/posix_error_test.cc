#include "base/posix_error.h"

#include <cerrno>
#include <cstring>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;

struct ErrnoCase {
  int error_number;
  absl::StatusCode code;
  friend void PrintTo(const ErrnoCase& c, std::ostream* os) {
    *os << c.error_number << " (" << std::strerror(c.error_number) << ")";
  }
};

class PosixErrorTest : public ::testing::TestWithParam<ErrnoCase> {};

TEST_P(PosixErrorTest, MapsErrnoToItsCodeAndNamesContextAndReason) {
  const ErrnoCase& c = GetParam();
  EXPECT_EQ(PosixErrorCode(c.error_number), c.code);
  EXPECT_THAT(
      PosixError("cannot open /x/cache.db", c.error_number),
      StatusIs(c.code, absl::StrCat("cannot open /x/cache.db: ", std::strerror(c.error_number))));
}

INSTANTIATE_TEST_SUITE_P(
    Table, PosixErrorTest,
    ::testing::Values(ErrnoCase{ENOENT, absl::StatusCode::kNotFound},
                      ErrnoCase{EACCES, absl::StatusCode::kPermissionDenied},
                      ErrnoCase{EPERM, absl::StatusCode::kPermissionDenied},
                      ErrnoCase{EROFS, absl::StatusCode::kPermissionDenied},
                      ErrnoCase{EEXIST, absl::StatusCode::kAlreadyExists},
                      ErrnoCase{ENOSPC, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{EDQUOT, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{ENOMEM, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{EMFILE, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{ENFILE, absl::StatusCode::kResourceExhausted},
                      ErrnoCase{EAGAIN, absl::StatusCode::kUnavailable},
                      ErrnoCase{EWOULDBLOCK, absl::StatusCode::kUnavailable},
                      ErrnoCase{EINTR, absl::StatusCode::kUnavailable},
                      ErrnoCase{EBUSY, absl::StatusCode::kUnavailable},
                      ErrnoCase{EIO, absl::StatusCode::kInternal},
                      ErrnoCase{ENOTDIR, absl::StatusCode::kFailedPrecondition},
                      ErrnoCase{EISDIR, absl::StatusCode::kFailedPrecondition},
                      ErrnoCase{ELOOP, absl::StatusCode::kFailedPrecondition},
                      ErrnoCase{EINVAL, absl::StatusCode::kInvalidArgument},
                      ErrnoCase{ENAMETOOLONG, absl::StatusCode::kInvalidArgument},
                      ErrnoCase{ECONNREFUSED, absl::StatusCode::kInternal},
                      ErrnoCase{EPIPE, absl::StatusCode::kInternal},
                      ErrnoCase{0, absl::StatusCode::kInternal}));

TEST(PosixErrorTest, UnknownErrnoStillNamesTheNumber) {
  EXPECT_THAT(PosixError("poll", 99999),
              StatusIs(absl::StatusCode::kInternal, "poll: Unknown error 99999"));
}

}  // namespace
}  // namespace autotune
