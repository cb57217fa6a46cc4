#include "service/rpc/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

// Found on e01f360: any Host was served, so a web page whose DNS name was
// rebound to 127.0.0.1 could call the API with the page's credentials.
TEST_F(HttpServerTest, OnlyLoopbackNamesAndTheListenHostAreServed) {
  for (const std::string host : {"localhost", "LocalHost:8080", "127.0.0.1", "[::1]:9464"}) {
    EXPECT_EQ(HttpCall(port_, "GET", "/api/x", {"Host: " + host}).status, 200) << host;
  }
  EXPECT_EQ(HttpCall(port_, "GET", "/api/x", {""}).status, 200) << "no Host header (HTTP/1.0)";
  for (const std::string& host :
       std::vector<std::string>{"evil.example", "evil.example:" + std::to_string(port_),
                                "127.0.0.1.evil.example", "", "[::2]"}) {
    const HttpAnswer refused = HttpCall(port_, "GET", "/api/x", {"Host: " + host});
    EXPECT_EQ(refused.status, 403) << host;
    EXPECT_THAT(refused.body, HasSubstr("is not served here")) << host;
    EXPECT_THAT(refused.body, Not(HasSubstr("api GET"))) << host;
  }
  ASSERT_OK_AND_ASSIGN(
      auto named, HttpServer::Start("127.0.0.1:0", {{"/api", Echo("api")}}, {"autotune.internal"}));
  const int port = std::stoi(named->address().substr(named->address().rfind(':') + 1));
  EXPECT_EQ(HttpCall(port, "GET", "/api/x", {"Host: autotune.internal:9464"}).status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/api/x", {"Host: other.internal"}).status, 403);
}

// Found on e01f360: civetweb answered CORS preflights for any origin.
TEST_F(HttpServerTest, NoCorsHeaderIsEverSentAndNoPreflightAllowed) {
  const HttpAnswer preflight =
      HttpCall(port_, "OPTIONS", "/api/invalidate",
               {"Origin: https://evil.example", "Access-Control-Request-Method: POST",
                "Access-Control-Request-Headers: content-type, authorization"});
  EXPECT_THAT(preflight.headers, Not(HasSubstr("Access-Control-Allow")));
  EXPECT_NE(preflight.status, 200);
  const HttpAnswer get = HttpCall(port_, "GET", "/api/x", {"Origin: https://evil.example"});
  EXPECT_EQ(get.status, 200);
  EXPECT_THAT(get.headers, Not(HasSubstr("Access-Control-Allow")));
}

// Found on e01f360: four idle TCP connections held all four threads, and
// no request was answered until they went.
TEST_F(HttpServerTest, TwoHundredIdleConnectionsDoNotStopARequest) {
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);  // and never a byte
  }
  const absl::Time start = absl::Now();
  const HttpAnswer answer = HttpCall(port_, "GET", "/api/x");
  const absl::Duration took = absl::Now() - start;
  for (int fd : idle) close(fd);
  EXPECT_EQ(answer.status, 200);
  EXPECT_LT(took, absl::Milliseconds(HttpServer::kRequestTimeoutMs))
      << "the request waited for an idle connection to time out";
}

TEST(HttpServerStartTest, AnAddressInUseIsUnavailableNamingIt) {
  ASSERT_OK_AND_ASSIGN(auto first, HttpServer::Start("127.0.0.1:0", {}));
  EXPECT_THAT(HttpServer::Start(first->address(), {}),
              StatusIs(absl::StatusCode::kUnavailable,
                       absl::StrCat("--http-listen ", first->address(),
                                    ": cannot listen: address already in use")));
}

}  // namespace
}  // namespace autotune::service
