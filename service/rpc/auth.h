// Who may call what: the role each RPC needs, and who a caller is.
//
// Roles, each holding the one below it:
//   reader  lookups, listings, show, stats, export
//   tuner   submit jobs and cancel its own, import, tune-on-miss
//   admin   register kernels, invalidate, gc, cancel any job
// grpc.health.v1 and server reflection are not autotune.v1 methods and stay
// open.
//
// A caller is, in this order:
// 1. the bearer token it presents ("authorization: Bearer <token>"): the
//    token file (`--token-file`) holds one line per token,
//      <role> <id> sha256:<hex of the token's sha256> [expires=<RFC 3339>]
//    ('#' starts a comment). Only hashes are stored; a presented token is
//    hashed and compared with every stored hash in constant time. A token
//    that matches none, or is past its expiry, is UNAUTHENTICATED even on
//    a socket whose peer would have a role. The file is read at start and
//    again on Reload() (SIGHUP); a file that does not parse keeps the
//    tokens already loaded.
// 2. over a Unix socket, the peer's uid and gid (SO_PEERCRED, recorded per
//    connection by service/rpc/unix_listener.h): `--peer-role uid:N=ROLE` and
//    `gid:N=ROLE` (N a number or a user or group name, looked up at start),
//    uid rules first. The daemon's own uid is admin unless a
//    rule names it.
// 3. over TLS with client certificates, the certificate's common name:
//    `--cert-role NAME=ROLE`.
// 4. anyone else: `--anonymous-role` (default none).
// On the HTTP port only, a caller without a bearer token may present the
// admin page's session (CallInfo::session, a cookie), which stands in for
// steps 2-4; gRPC calls never carry one, and nothing on gRPC looks at login
// links or sessions.
//
// Login links (`autotune admin-url`): AddLoginToken makes a token that is no
// bearer token anywhere. It is good once, on the HTTP port, where
// ExchangeLoginToken swaps it for a session; the token is gone from then on.
// Reload() (SIGHUP) drops every login token and session; EndSessions (the
// page's sign-out) drops those of one holder. Both live in memory only.
// A caller with no role is UNAUTHENTICATED; one whose role is below the
// method's is PERMISSION_DENIED, naming the method, the role it needs, the
// caller and its role.
#ifndef AUTOTUNE_SERVICE_RPC_AUTH_H_
#define AUTOTUNE_SERVICE_RPC_AUTH_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/token.h"

namespace grpc {
class ServerContextBase;
}

namespace autotune::service {

enum class Role { kNone = 0, kReader = 1, kTuner = 2, kAdmin = 3 };
const char* RoleName(Role role);  // "none", "reader", "tuner", "admin"
absl::StatusOr<Role> ParseRole(absl::string_view text);

// The role each autotune.v1.Autotune method needs, by method name
// ("Lookup"); nullopt for a name the table lacks (such a call is refused).
std::optional<Role> RequiredRole(absl::string_view method);
// The whole table, for tests and the operations guide.
const std::map<std::string, Role>& MethodRoles();

struct TokenRecord {
  Role role = Role::kNone;
  std::string id;    // names the holder in the audit log
  std::string hash;  // "sha256:<hex>"
  std::optional<absl::Time> expires;
};
// Every line of a token file: the good ones in `tokens`, and for each bad
// one (an unknown role, a hash that is not sha256:<64 hex>, a bad expiry,
// an id used twice) INVALID_ARGUMENT "<path>:<line>: ..." in `skipped`; a
// skipped line grants nothing.
struct TokenFile {
  std::vector<TokenRecord> tokens;
  std::vector<absl::Status> skipped;
};
TokenFile ParseTokenLines(absl::string_view text, absl::string_view path);
// The same, strict: the first bad line's error.
absl::StatusOr<std::vector<TokenRecord>> ParseTokenFile(absl::string_view text,
                                                        absl::string_view path);

struct AuthOptions {
  std::string token_file;               // empty = no tokens
  std::vector<std::string> peer_roles;  // "uid:1000=reader", "gid:27=tuner"
  std::vector<std::string> cert_roles;  // "alice=admin"
  std::string anonymous_role = "none";
  uid_t daemon_uid = 0;  // admin unless a uid rule names it
};

// Where a call came in: sessions are looked at on the HTTP port only.
enum class Transport { kGrpc, kHttp };

// What is known of a call, taken from its context (FromContext) or built
// by the HTTP API or a test.
struct CallInfo {
  std::string authorization;  // the "authorization" metadata, if any
  std::string peer;           // grpc's peer string: "fd:12" over our Unix listener
  std::vector<std::string> cert_common_names;
  Transport transport = Transport::kGrpc;
  std::string session;  // kHttp: the admin page's session cookie, if any
};
CallInfo FromContext(const grpc::ServerContextBase& context);

struct Caller {
  Role role = Role::kNone;
  std::string id;  // "token:ci", "uid:1000", "cert:alice", "anonymous"
};

// What ExchangeLoginToken hands the page: `secret` goes into its cookie.
struct LoginSession {
  std::string secret;
  Caller caller;  // as Identify will name it
  absl::Time expires;
};

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class Authenticator {
 public:
  // INVALID_ARGUMENT naming the flag for a bad rule or role; the token
  // file's errors as ParseTokenFile's (NOT_FOUND when it is missing).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(const AuthOptions& options);

  // Drops every login token and session (whether or not the file reads),
  // then reads the token file again; the number of tokens loaded. Every good
  // line applies even when others are bad (so a revocation happens whatever
  // else the file holds): then INVALID_ARGUMENT "N tokens loaded; M lines
  // skipped, ...; first: <path>:<line>: ...". When the file cannot be read
  // the tokens loaded before stay. At start-up (Create) any bad line fails.
  absl::StatusOr<int> Reload();

  // A new login token of `role` for the holder `id` (a Caller id), good
  // once within `lifetime`, held in memory only. For the admin page's login
  // link. Expired ones are dropped here, so many links keep few.
  absl::StatusOr<std::string> AddLoginToken(Role role, absl::string_view id,
                                            absl::Duration lifetime);
  // Swaps a login token for a session of `lifetime`: the token is used up,
  // whatever comes after. UNAUTHENTICATED when it is not a login token now
  // (never one, used already, expired, or dropped by Reload/EndSessions).
  // The session's caller is "login:<holder id>" with the token's role.
  absl::StatusOr<LoginSession> ExchangeLoginToken(absl::string_view token, absl::Duration lifetime);
  // Drops the login tokens and sessions of `caller` when it is a session's
  // caller (the admin page's sign-out); the number dropped.
  int EndSessions(const Caller& caller);

  // A Unix connection accepted as file descriptor `fd` (peer "fd:<fd>").
  void AddPeer(int fd, const PeerCredentials& peer);

  // Who the call is (the rules above). UNAUTHENTICATED for a token that is
  // unknown or expired, and on HTTP for a session that is (signed out,
  // dropped by SIGHUP, expired, or from an earlier start).
  absl::StatusOr<Caller> Identify(const CallInfo& call) const;
  // Identify, then checks the role `method` needs.
  absl::StatusOr<Caller> Authorize(const CallInfo& call, absl::string_view method) const;

 private:
  explicit Authenticator(AuthOptions options) : options_(std::move(options)) {}

  struct Rule {
    bool uid = true;
    uint32_t id = 0;
    Role role = Role::kNone;
  };
  const AuthOptions options_;
  std::vector<Rule> peer_rules_;
  std::map<std::string, Role> cert_roles_;
  Role anonymous_ = Role::kNone;
  mutable absl::Mutex mu_;
  std::vector<TokenRecord> tokens_ ABSL_GUARDED_BY(mu_);
  // AddLoginToken's and ExchangeLoginToken's; `id` is "login:<holder>".
  std::vector<TokenRecord> login_tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<TokenRecord> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<int, PeerCredentials> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_AUTH_H_
