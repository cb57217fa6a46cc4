#include "service/rpc/auth.h"

#include <unistd.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"
#include "service/rpc/admission.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::_;
using ::testing::HasSubstr;

AuthOptions Rules(std::vector<std::string> peer_roles, std::vector<std::string> cert_roles = {},
                  std::string anonymous_role = "none") {
  AuthOptions options;
  options.peer_roles = std::move(peer_roles);
  options.cert_roles = std::move(cert_roles);
  options.anonymous_role = std::move(anonymous_role);
  return options;
}

TEST(MethodRolesTest, EveryMethodOfTheServiceHasARoleAndNoOtherIsListed) {
  const google::protobuf::ServiceDescriptor* service =
      v1::LookupRequest::descriptor()->file()->FindServiceByName("Autotune");
  ASSERT_NE(service, nullptr);
  std::set<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) {
    methods.insert(service->method(i)->name());
    EXPECT_TRUE(RequiredRole(service->method(i)->name()).has_value())
        << service->method(i)->name() << " has no role";
  }
  for (const auto& [name, role] : MethodRoles()) {
    EXPECT_TRUE(methods.contains(name)) << name << " is not a method of the service";
  }
  EXPECT_EQ(RequiredRole("Lookup"), Role::kReader);
  EXPECT_EQ(RequiredRole("SubmitJob"), Role::kTuner);
  EXPECT_EQ(RequiredRole("Invalidate"), Role::kAdmin);
  EXPECT_FALSE(RequiredRole("NoSuchMethod").has_value());
}

TEST(TokenFileTest, ParsesRolesIdsHashesAndExpiries) {
  const std::string text =
      absl::StrCat("# tokens\n", "reader dashboards ", TokenHash("a"), "\n", "\n", "tuner ci ",
                   TokenHash("b"), " expires=2027-01-31T00:00:00Z  # nightly\n");
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> tokens, ParseTokenFile(text, "tokens"));
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].role, Role::kReader);
  EXPECT_EQ(tokens[0].id, "dashboards");
  EXPECT_EQ(tokens[0].hash, TokenHash("a"));
  EXPECT_FALSE(tokens[0].expires.has_value());
  EXPECT_EQ(tokens[1].role, Role::kTuner);
  ASSERT_TRUE(tokens[1].expires.has_value());
}

TEST(TokenFileTest, ABadLineIsNamedByFileAndLine) {
  const std::string hash = TokenHash("x");
  EXPECT_THAT(
      ParseTokenFile(absl::StrCat("reader a ", hash, "\nwizard b ", hash), "t"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t:2: 'wizard' is not a role")));
  EXPECT_THAT(ParseTokenFile("reader a plaintext-token", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t:1: 'plaintext-token'")));
  EXPECT_THAT(ParseTokenFile(absl::StrCat("reader a ", hash, " expires=tomorrow"), "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t:1: 'expires=tomorrow'")));
  EXPECT_THAT(ParseTokenFile(absl::StrCat("reader a ", hash, "\nadmin a ", TokenHash("y")), "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t:2: id 'a' is already used on line 1")));
  EXPECT_THAT(ParseTokenFile("reader a", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t:1: expected")));
  EXPECT_THAT(ParseTokenFile(absl::StrCat("none a ", hash), "t"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grants nothing")));
}

TEST(NewTokenTest, IsRandomHex) {
  ASSERT_OK_AND_ASSIGN(std::string a, NewToken());
  ASSERT_OK_AND_ASSIGN(std::string b, NewToken());
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_path_ = dir_.File("tokens");
    ASSERT_OK(WriteFileAtomically(
        tokens_path_,
        absl::StrCat("reader dash ", TokenHash("reader-token"), "\n", "tuner ci ",
                     TokenHash("tuner-token"), "\n", "admin ops ", TokenHash("admin-token"), "\n",
                     "admin old ", TokenHash("old-token"), " expires=2020-01-01T00:00:00Z\n"),
        "tokens"));
  }

  std::unique_ptr<Authenticator> Make(AuthOptions options) {
    options.token_file = tokens_path_;
    options.daemon_uid = 1000;
    absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(options);
    EXPECT_OK(auth.status());
    return auth.ok() ? *std::move(auth) : nullptr;
  }
  static CallInfo Bearer(const std::string& token) {
    CallInfo call;
    call.authorization = "Bearer " + token;
    call.peer = "fd:7";
    return call;
  }

  testing::TempDir dir_;
  std::string tokens_path_;
};

// The one entry for gRPC and HTTP calls: the role check, then nothing at all
// once the daemon drains.
TEST_F(AuthenticatorTest, AdmissionAuthorizesUntilTheDaemonDrainsThenRefusesEveryCall) {
  auto auth = Make({});
  Admission admission(auth.get());
  ASSERT_OK_AND_ASSIGN(Caller admin, admission.Admit(Bearer("admin-token"), "Invalidate"));
  EXPECT_EQ(admin.role, Role::kAdmin);
  EXPECT_THAT(admission.Admit(Bearer("reader-token"), "Invalidate"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("needs the admin role")));
  admission.Drain();
  EXPECT_THAT(
      admission.Admit(Bearer("admin-token"), "Invalidate"),
      StatusIs(absl::StatusCode::kUnavailable,
               "autotuned is stopping; Invalidate was not run (call again once it is back)"));
  EXPECT_THAT(admission.Admit(Bearer("reader-token"), "Lookup"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("Lookup was not run")));
}

TEST_F(AuthenticatorTest, ATokenNamesItsRoleAndItsHolder) {
  auto auth = Make({});
  ASSERT_OK_AND_ASSIGN(Caller reader, auth->Authorize(Bearer("reader-token"), "Lookup"));
  EXPECT_EQ(reader.role, Role::kReader);
  EXPECT_EQ(reader.id, "token:dash");
  EXPECT_THAT(auth->Authorize(Bearer("reader-token"), "Invalidate"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       "Invalidate needs the admin role; token:dash has reader"));
  ASSERT_OK(auth->Authorize(Bearer("tuner-token"), "SubmitJob").status());
  ASSERT_OK(auth->Authorize(Bearer("admin-token"), "GarbageCollect").status());
  EXPECT_THAT(auth->Authorize(Bearer("wrong"), "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not in the daemon's token")));
  EXPECT_THAT(
      auth->Authorize(Bearer("old-token"), "Lookup"),
      StatusIs(absl::StatusCode::kUnauthenticated, "token 'old' expired at 2020-01-01T00:00:00Z"));
  CallInfo basic;
  basic.authorization = "Basic abc";
  EXPECT_THAT(auth->Authorize(basic, "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Bearer")));
}

// `autotune admin-url`: a token of the caller's own role, in memory, that
// expires, and that a reload of the token file keeps.
CallInfo Session(const std::string& secret, Transport transport = Transport::kHttp) {
  CallInfo call;
  call.transport = transport;
  call.session = secret;
  return call;
}

// Found on 2bc4d71: the link's token called Backup over gRPC TCP as admin,
// outlived SIGHUP, and served for its whole hour.
TEST_F(AuthenticatorTest, ALoginTokenIsNoBearerTokenAnywhere) {
  auto auth = Make({});
  ASSERT_OK_AND_ASSIGN(const std::string token,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::Hours(1)));
  EXPECT_THAT(auth->Authorize(Bearer(token), "Backup"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not in the daemon's token")));
  CallInfo http = Bearer(token);
  http.transport = Transport::kHttp;
  EXPECT_THAT(auth->Authorize(http, "Lookup"), StatusIs(absl::StatusCode::kUnauthenticated, _));
  // Nor a session secret, nor the token, in the session's place.
  EXPECT_THAT(auth->Identify(Session(token)), StatusIs(absl::StatusCode::kUnauthenticated, _));
}

TEST_F(AuthenticatorTest, ALoginTokenIsSwappedOnceForASessionOfItsRole) {
  auto auth = Make({});
  ASSERT_OK_AND_ASSIGN(const std::string token,
                       auth->AddLoginToken(Role::kTuner, "uid:1000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const LoginSession session,
                       auth->ExchangeLoginToken(token, absl::Minutes(30)));
  EXPECT_EQ(session.caller.id, "login:uid:1000");
  EXPECT_EQ(session.caller.role, Role::kTuner);
  EXPECT_NE(session.secret, token);
  EXPECT_THAT(auth->ExchangeLoginToken(token, absl::Minutes(30)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("used already")));

  ASSERT_OK_AND_ASSIGN(Caller caller, auth->Authorize(Session(session.secret), "SubmitJob"));
  EXPECT_EQ(caller.id, "login:uid:1000");
  EXPECT_THAT(auth->Authorize(Session(session.secret), "Invalidate"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("needs the admin role")));
  // gRPC never looks at a session: the call is anonymous there (none).
  ASSERT_OK_AND_ASSIGN(Caller grpc, auth->Identify(Session(session.secret, Transport::kGrpc)));
  EXPECT_EQ(grpc.role, Role::kNone);
  EXPECT_THAT(auth->Authorize(Bearer(session.secret), "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated, _));
}

TEST_F(AuthenticatorTest, ReloadDropsEveryLoginTokenAndSession) {
  auto auth = Make({});
  ASSERT_OK_AND_ASSIGN(const std::string unused,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const std::string used,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const LoginSession session,
                       auth->ExchangeLoginToken(used, absl::Minutes(30)));
  ASSERT_OK(auth->Identify(Session(session.secret)).status());
  ASSERT_OK(auth->Reload().status());
  EXPECT_THAT(auth->Identify(Session(session.secret)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("session has ended")));
  EXPECT_THAT(auth->ExchangeLoginToken(unused, absl::Minutes(30)),
              StatusIs(absl::StatusCode::kUnauthenticated, _));
  // The token file's tokens stay.
  EXPECT_OK(auth->Authorize(Bearer("reader-token"), "Lookup").status());
}

TEST_F(AuthenticatorTest, EndSessionsDropsOneHoldersSessionsAndLinksOnly) {
  auto auth = Make({});
  ASSERT_OK_AND_ASSIGN(const std::string mine,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const std::string my_spare,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const std::string theirs,
                       auth->AddLoginToken(Role::kReader, "uid:2000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const LoginSession my_session,
                       auth->ExchangeLoginToken(mine, absl::Minutes(30)));
  ASSERT_OK_AND_ASSIGN(const LoginSession their_session,
                       auth->ExchangeLoginToken(theirs, absl::Minutes(30)));
  // A token-file caller ends nothing.
  EXPECT_EQ(auth->EndSessions({.role = Role::kAdmin, .id = "token:ops"}), 0);
  EXPECT_EQ(auth->EndSessions(my_session.caller), 2);
  EXPECT_THAT(auth->Identify(Session(my_session.secret)),
              StatusIs(absl::StatusCode::kUnauthenticated, _));
  EXPECT_THAT(auth->ExchangeLoginToken(my_spare, absl::Minutes(30)),
              StatusIs(absl::StatusCode::kUnauthenticated, _));
  ASSERT_OK_AND_ASSIGN(Caller other, auth->Identify(Session(their_session.secret)));
  EXPECT_EQ(other.id, "login:uid:2000");
}

TEST_F(AuthenticatorTest, LinksAndSessionsExpire) {
  auto auth = Make({});
  ASSERT_OK_AND_ASSIGN(const std::string stale,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::ZeroDuration()));
  EXPECT_THAT(auth->ExchangeLoginToken(stale, absl::Minutes(30)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("expired")));
  ASSERT_OK_AND_ASSIGN(const std::string token,
                       auth->AddLoginToken(Role::kAdmin, "uid:1000", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(const LoginSession session,
                       auth->ExchangeLoginToken(token, absl::ZeroDuration()));
  EXPECT_THAT(auth->Identify(Session(session.secret)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("expired")));
}

TEST_F(AuthenticatorTest, AWrongTokenIsRefusedEvenFromTheSocketsOwner) {
  auto auth = Make({});
  auth->AddPeer(7, PeerCredentials{.pid = 1, .uid = 1000, .gid = 1000});
  CallInfo owner;
  owner.peer = "fd:7";
  ASSERT_OK_AND_ASSIGN(Caller caller, auth->Authorize(owner, "Invalidate"));
  EXPECT_EQ(caller.id, "uid:1000");
  EXPECT_EQ(caller.role, Role::kAdmin);
  EXPECT_THAT(auth->Authorize(Bearer("wrong"), "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  // A token the owner presents is what counts: it may act as a reader.
  EXPECT_THAT(auth->Authorize(Bearer("reader-token"), "Invalidate"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST_F(AuthenticatorTest, PeerRulesMapUidsThenGids) {
  auto auth = Make(Rules({"gid:50=tuner", "uid:2000=reader", "uid:1000=none"}));
  auth->AddPeer(3, PeerCredentials{.pid = 1, .uid = 2000, .gid = 50});
  auth->AddPeer(4, PeerCredentials{.pid = 1, .uid = 3000, .gid = 50});
  auth->AddPeer(5, PeerCredentials{.pid = 1, .uid = 1000, .gid = 1000});
  auth->AddPeer(6, PeerCredentials{.pid = 1, .uid = 4000, .gid = 4000});
  const auto role_of = [&](const std::string& peer) {
    CallInfo call;
    call.peer = peer;
    absl::StatusOr<Caller> caller = auth->Identify(call);
    return caller.ok() ? caller->role : Role::kNone;
  };
  EXPECT_EQ(role_of("fd:3"), Role::kReader);  // its uid rule, before its gid's
  EXPECT_EQ(role_of("fd:4"), Role::kTuner);
  EXPECT_EQ(role_of("fd:5"), Role::kNone);  // the daemon's uid, named by a rule
  EXPECT_EQ(role_of("fd:6"), Role::kNone);  // nothing says: anonymous
  CallInfo unknown;
  unknown.peer = "fd:6";
  EXPECT_THAT(auth->Authorize(unknown, "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Lookup needs the reader role; uid:4000 has none")));
}

TEST_F(AuthenticatorTest, CertificatesAndAnonymousCallers) {
  auto auth = Make(Rules({}, {"alice=admin"}, "reader"));
  CallInfo alice;
  alice.peer = "ipv4:127.0.0.1:5000";
  alice.cert_common_names = {"alice"};
  ASSERT_OK_AND_ASSIGN(Caller caller, auth->Authorize(alice, "Invalidate"));
  EXPECT_EQ(caller.id, "cert:alice");
  CallInfo bob = alice;
  bob.cert_common_names = {"bob"};
  ASSERT_OK_AND_ASSIGN(Caller anonymous, auth->Authorize(bob, "Lookup"));
  EXPECT_EQ(anonymous.role, Role::kReader);
  EXPECT_EQ(anonymous.id, "cert:bob");
  EXPECT_THAT(auth->Authorize(bob, "SubmitJob"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

TEST_F(AuthenticatorTest, ReloadAppliesEveryGoodLineAndKeepsTheOldTokensOnlyWhenUnreadable) {
  auto auth = Make({});
  ASSERT_OK(auth->Authorize(Bearer("reader-token"), "Lookup").status());
  ASSERT_OK(WriteFileAtomically(tokens_path_, absl::StrCat("reader new ", TokenHash("new-token")),
                                "tokens"));
  ASSERT_OK_AND_ASSIGN(int loaded, auth->Reload());
  EXPECT_EQ(loaded, 1);
  EXPECT_THAT(auth->Authorize(Bearer("reader-token"), "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  ASSERT_OK(auth->Authorize(Bearer("new-token"), "Lookup").status());
  // A bad line is skipped; the others apply, revocations included.
  ASSERT_OK(WriteFileAtomically(
      tokens_path_, absl::StrCat("reader broken\nreader newer ", TokenHash("newer-token"), "\n"),
      "tokens"));
  EXPECT_THAT(auth->Reload(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 tokens loaded; 1 lines skipped, their tokens granting "
                                 "nothing; first: ")));
  EXPECT_THAT(auth->Authorize(Bearer("new-token"), "Lookup"),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  ASSERT_OK(auth->Authorize(Bearer("newer-token"), "Lookup").status());
  // A file that cannot be read at all changes nothing.
  ASSERT_EQ(unlink(tokens_path_.c_str()), 0);
  EXPECT_FALSE(auth->Reload().ok());
  ASSERT_OK(auth->Authorize(Bearer("newer-token"), "Lookup").status());
}

TEST(AuthenticatorOptionsTest, BadRulesNameTheFlag) {
  EXPECT_THAT(
      Authenticator::Create(Rules({"user:1=admin"})),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--peer-role 'user:1=admin'")));
  EXPECT_THAT(
      Authenticator::Create(Rules({"uid:no-such-user-here=admin"})),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no user named 'no-such-user-here'")));
  EXPECT_OK(Authenticator::Create(Rules({"uid:root=admin", "gid:root=reader"})).status());
  EXPECT_THAT(Authenticator::Create(Rules({}, {"alice=root"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'root' is not a role")));
  EXPECT_THAT(Authenticator::Create(Rules({}, {}, "all")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--anonymous-role")));
  AuthOptions missing;
  missing.token_file = "/nonexistent/tokens";
  EXPECT_THAT(Authenticator::Create(missing),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/tokens")));
}

}  // namespace
}  // namespace autotune::service
