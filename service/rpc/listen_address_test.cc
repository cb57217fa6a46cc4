#include "service/rpc/listen_address.h"

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ListenAddressTest, UnixSocketNeedsAbsolutePath) {
  ASSERT_OK_AND_ASSIGN(ListenAddress address,
                       ParseListenAddress("unix:///run/autotune.sock", false, false));
  EXPECT_EQ(address.kind, ListenAddress::Kind::kUnix);
  EXPECT_EQ(address.path, "/run/autotune.sock");
  EXPECT_EQ(address.uri, "unix:///run/autotune.sock");
  EXPECT_THAT(ParseListenAddress("unix:relative.sock", false, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("absolute path")));
}

struct TcpCase {
  const char* text;
  bool tls;
  bool insecure;
  bool ok;
  const char* error;
};

class TcpListenTest : public ::testing::TestWithParam<TcpCase> {};

TEST_P(TcpListenTest, SafetyRules) {
  const TcpCase& c = GetParam();
  absl::StatusOr<ListenAddress> address = ParseListenAddress(c.text, c.tls, c.insecure);
  if (c.ok) {
    ASSERT_OK(address);
    EXPECT_EQ(address->kind, ListenAddress::Kind::kTcp);
  } else {
    EXPECT_THAT(address, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.error)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, TcpListenTest,
    ::testing::Values(TcpCase{"127.0.0.1:7700", false, true, true, ""},
                      TcpCase{"127.8.9.1:7700", false, true, true, ""},
                      TcpCase{"[::1]:7700", false, true, true, ""},
                      TcpCase{"localhost:0", false, true, true, ""},
                      TcpCase{"0.0.0.0:7700", true, false, true, ""},
                      TcpCase{"127.0.0.1:7700", false, false, false, "--insecure"},
                      TcpCase{"0.0.0.0:7700", false, true, false, "non-loopback"},
                      TcpCase{"10.1.2.3:7700", false, true, false, "non-loopback"},
                      TcpCase{"[::]:7700", false, true, false, "non-loopback"},
                      TcpCase{"127.0.0.1:99999", false, true, false, "0..65535"},
                      TcpCase{"127.0.0.1:http", false, true, false, "0..65535"},
                      TcpCase{"127.0.0.1", false, true, false, "host:port"},
                      TcpCase{"::1:7700", false, true, false, "brackets"},
                      TcpCase{"http://127.0.0.1:80", false, true, false, "scheme"}));

TEST(ListenAddressTest, LoopbackHosts) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("LocalHost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("example.com"));
  EXPECT_FALSE(IsLoopbackHost("::"));
}

}  // namespace
}  // namespace autotune::service
