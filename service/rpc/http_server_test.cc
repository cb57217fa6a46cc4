#include "service/rpc/http_server.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace autotune::service {
namespace {

using ::autotune::testing::HttpAnswer;
using ::autotune::testing::HttpCall;
using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// Answers with the route's name and what it was given.
HttpHandler Echo(const std::string& name) {
  return [name](const HttpRequest& request) {
    std::string body = absl::StrCat(name, " ", request.method, " ", request.path,
                                    " body=", request.body, " auth=", request.authorization);
    for (const auto& [key, value] : request.query)
      absl::StrAppend(&body, " ", key, "=[", value, "]");
    HttpResponse response;
    response.content_type = "text/plain";
    response.body = body;
    response.headers = {{"X-Route", name}};
    return response;
  };
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(server_, HttpServer::Start("127.0.0.1:0", {{"/api", Echo("api")},
                                                                    {"/api/jobs", Echo("jobs")},
                                                                    {"/admin", Echo("admin")}}));
    const std::string& address = server_->address();
    ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port_)) << address;
    ASSERT_GT(port_, 0);
  }
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpServerTest, ARequestGoesToTheLongestRouteAboveItsPath) {
  EXPECT_THAT(HttpCall(port_, "GET", "/api/entries").body, HasSubstr("api GET /api/entries"));
  EXPECT_THAT(HttpCall(port_, "GET", "/api/jobs/7").body, HasSubstr("jobs GET /api/jobs/7"));
  EXPECT_THAT(HttpCall(port_, "GET", "/api").body, HasSubstr("api GET /api "));
  EXPECT_EQ(HttpCall(port_, "GET", "/apical").status, 404) << "a route is a folder, not a prefix";
  EXPECT_EQ(HttpCall(port_, "GET", "/").status, 404);
}

TEST_F(HttpServerTest, TheHandlerGetsTheDecodedQueryHeadersAndBody) {
  const HttpAnswer answer =
      HttpCall(port_, "POST", "/api/entries?dims=n%3D512%2Cb%3D8&family=rms+norm",
               {"Authorization: Bearer abc", "Content-Type: application/json"}, "{\"x\":1}");
  EXPECT_EQ(answer.status, 200);
  EXPECT_THAT(answer.body, HasSubstr("body={\"x\":1} auth=Bearer abc"));
  EXPECT_THAT(answer.body, HasSubstr("dims=[n=512,b=8]"));
  EXPECT_THAT(answer.body, HasSubstr("family=[rms norm]"));
  EXPECT_THAT(answer.headers, HasSubstr("X-Route: api"));
  EXPECT_THAT(answer.headers, HasSubstr("Cache-Control: no-store"));
  EXPECT_THAT(answer.headers, HasSubstr("X-Content-Type-Options: nosniff"));
}

TEST_F(HttpServerTest, ABodyOverTheLimitNeverReachesAHandler) {
  const std::string body(HttpServer::kMaxBodyBytes + 1, 'x');
  const HttpAnswer answer = HttpCall(port_, "POST", "/api/invalidate", {}, body);
  EXPECT_EQ(answer.status, 413);
  EXPECT_THAT(answer.body, Not(HasSubstr("api POST")));
}

TEST(HttpServerStartTest, AnAddressInUseIsUnavailableNamingIt) {
  ASSERT_OK_AND_ASSIGN(auto first, HttpServer::Start("127.0.0.1:0", {}));
  EXPECT_THAT(HttpServer::Start(first->address(), {}),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat("--http-listen ", first->address()))));
}

}  // namespace
}  // namespace autotune::service
