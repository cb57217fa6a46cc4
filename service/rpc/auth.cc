#include "service/rpc/auth.h"

#include <grp.h>
#include <pwd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "base/token.h"
#include "grpcpp/server_context.h"

namespace autotune::service {
namespace {

constexpr absl::string_view kHashPrefix = "sha256:";
constexpr absl::string_view kBearer = "Bearer ";

bool IsLowerHex(absl::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Equal, in time that depends on the lengths only.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::string TimeText(absl::Time time) { return Timestamp(time); }

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kReader:
      return "reader";
    case Role::kTuner:
      return "tuner";
    case Role::kAdmin:
      return "admin";
    case Role::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<Role> ParseRole(absl::string_view text) {
  for (Role role : {Role::kNone, Role::kReader, Role::kTuner, Role::kAdmin}) {
    if (text == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a role (none, reader, tuner, admin)"));
}

const std::map<std::string, Role>& MethodRoles() {
  static const auto* const roles = new std::map<std::string, Role>{
      {"Lookup", Role::kReader},          {"BatchLookup", Role::kReader},
      {"ListKernels", Role::kReader},     {"GetJob", Role::kReader},
      {"ListJobs", Role::kReader},        {"ListEntries", Role::kReader},
      {"GetEntry", Role::kReader},        {"Stats", Role::kReader},
      {"Export", Role::kReader},          {"SubmitJob", Role::kTuner},
      {"CancelJob", Role::kTuner},        {"Import", Role::kTuner},
      {"RequestTuning", Role::kTuner},    {"RegisterKernel", Role::kAdmin},
      {"Invalidate", Role::kAdmin},       {"GarbageCollect", Role::kAdmin},
      {"Backup", Role::kAdmin},           {"GetBinaries", Role::kReader},
      {"UnregisterKernel", Role::kAdmin}, {"CreateLoginLink", Role::kReader},
  };
  return *roles;
}

std::optional<Role> RequiredRole(absl::string_view method) {
  const auto& roles = MethodRoles();
  auto it = roles.find(std::string(method));
  if (it == roles.end()) return std::nullopt;
  return it->second;
}

namespace {

// One line's fields: "<role> <id> sha256:<hex> [expires=<RFC 3339>]".
absl::StatusOr<TokenRecord> ParseTokenLine(const std::vector<absl::string_view>& fields) {
  if (fields.size() < 3 || fields.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected '<role> <id> sha256:<hex> [expires=<RFC 3339>]', got ",
                     fields.size(), " fields"));
  }
  TokenRecord record;
  ASSIGN_OR_RETURN(record.role, ParseRole(fields[0]));
  if (record.role == Role::kNone) {
    return absl::InvalidArgumentError("a token with role none grants nothing; remove it");
  }
  record.id = std::string(fields[1]);
  absl::string_view hash = fields[2];
  if (!absl::ConsumePrefix(&hash, kHashPrefix) || hash.size() != 64 || !IsLowerHex(hash)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", fields[2],
                     "' is not sha256:<64 lower-case hex digits> (`autotune token new` prints "
                     "the line to add)"));
  }
  record.hash = std::string(fields[2]);
  if (fields.size() == 4) {
    absl::string_view expiry = fields[3];
    absl::StatusOr<absl::Time> expires = absl::ConsumePrefix(&expiry, "expires=")
                                             ? ParseTokenExpiry(expiry)
                                             : absl::InvalidArgumentError("");
    if (!expires.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", fields[3], "' is not expires=<RFC 3339 time> (e.g. expires=2027-01-31T00:00:00Z)"));
    }
    record.expires = *expires;
  }
  return record;
}

}  // namespace

TokenFile ParseTokenLines(absl::string_view text, absl::string_view path) {
  TokenFile file;
  std::map<std::string, int> seen;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(line), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.empty()) continue;
    absl::StatusOr<TokenRecord> record = ParseTokenLine(fields);
    if (record.ok()) {
      if (auto [it, inserted] = seen.emplace(record->id, line_number); !inserted) {
        record = absl::InvalidArgumentError(
            absl::StrCat("id '", record->id, "' is already used on line ", it->second));
      }
    }
    if (!record.ok()) {
      // A bad line grants nothing; the lines around it still apply.
      file.skipped.push_back(absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", record.status().message())));
      continue;
    }
    file.tokens.push_back(*std::move(record));
  }
  return file;
}

absl::StatusOr<std::vector<TokenRecord>> ParseTokenFile(absl::string_view text,
                                                        absl::string_view path) {
  TokenFile file = ParseTokenLines(text, path);
  if (!file.skipped.empty()) return file.skipped.front();
  return std::move(file.tokens);
}

CallInfo FromContext(const grpc::ServerContextBase& context) {
  CallInfo call;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    call.authorization = std::string(it->second.data(), it->second.size());
  }
  call.peer = context.peer();
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& name : auth->FindPropertyValues("x509_common_name")) {
      call.cert_common_names.emplace_back(name.data(), name.size());
    }
  }
  return call;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(const AuthOptions& options) {
  auto auth = std::unique_ptr<Authenticator>(new Authenticator(options));
  for (const std::string& text : options.peer_roles) {
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("--peer-role '", text, "': ", why));
    };
    std::pair<absl::string_view, absl::string_view> sides = absl::StrSplit(text, '=');
    absl::string_view who = sides.first;
    Rule rule;
    if (absl::ConsumePrefix(&who, "uid:")) {
      rule.uid = true;
    } else if (absl::ConsumePrefix(&who, "gid:")) {
      rule.uid = false;
    } else {
      return bad("expected uid:<number>=<role> or gid:<number>=<role>");
    }
    if (!absl::SimpleAtoi(who, &rule.id)) {
      // A user or group name, looked up now.
      const std::string name(who);
      if (rule.uid) {
        const passwd* user = getpwnam(name.c_str());
        if (user == nullptr) return bad(absl::StrCat("no user named '", name, "'"));
        rule.id = user->pw_uid;
      } else {
        const group* found = getgrnam(name.c_str());
        if (found == nullptr) return bad(absl::StrCat("no group named '", name, "'"));
        rule.id = found->gr_gid;
      }
    }
    absl::StatusOr<Role> role = ParseRole(sides.second);
    if (!role.ok()) return bad(role.status().message());
    rule.role = *role;
    auth->peer_rules_.push_back(rule);
  }
  // uid rules before gid rules, each in the order given.
  std::stable_sort(auth->peer_rules_.begin(), auth->peer_rules_.end(),
                   [](const Rule& a, const Rule& b) { return a.uid && !b.uid; });
  for (const std::string& text : options.cert_roles) {
    const size_t equals = text.rfind('=');
    if (equals == std::string::npos || equals == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cert-role '", text, "': expected <common name>=<role>"));
    }
    absl::StatusOr<Role> role = ParseRole(absl::string_view(text).substr(equals + 1));
    if (!role.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cert-role '", text, "': ", role.status().message()));
    }
    auth->cert_roles_[text.substr(0, equals)] = *role;
  }
  absl::StatusOr<Role> anonymous = ParseRole(options.anonymous_role);
  if (!anonymous.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--anonymous-role: ", anonymous.status().message()));
  }
  auth->anonymous_ = *anonymous;
  if (!options.token_file.empty()) RETURN_IF_ERROR(auth->Reload().status());
  return auth;
}

absl::StatusOr<int> Authenticator::Reload() {
  {
    // A reload is how an operator revokes: whatever the file says, no link
    // or page session made before it still lets anyone in.
    absl::MutexLock lock(&mu_);
    login_tokens_.clear();
    sessions_.clear();
  }
  if (options_.token_file.empty()) return 0;
  ASSIGN_OR_RETURN(std::string text, ReadFile(options_.token_file, "--token-file"));
  // Every good line applies, even when others are bad: a reload meant to
  // revoke a token must not keep the old file because of a typo elsewhere.
  TokenFile file = ParseTokenLines(text, options_.token_file);
  const int count = static_cast<int>(file.tokens.size());
  {
    absl::MutexLock lock(&mu_);
    tokens_ = std::move(file.tokens);
  }
  if (!file.skipped.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        count, " tokens loaded; ", file.skipped.size(),
        " lines skipped, their tokens granting nothing; first: ", file.skipped.front().message()));
  }
  return count;
}

void Authenticator::AddPeer(int fd, const PeerCredentials& peer) {
  absl::MutexLock lock(&mu_);
  peers_[fd] = peer;
}

absl::StatusOr<std::string> Authenticator::AddLoginToken(Role role, absl::string_view id,
                                                         absl::Duration lifetime) {
  ASSIGN_OR_RETURN(std::string token, NewToken());
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  std::erase_if(login_tokens_, [now](const TokenRecord& record) { return *record.expires <= now; });
  login_tokens_.push_back({.role = role,
                           .id = absl::StrCat("login:", id),
                           .hash = TokenHash(token),
                           .expires = now + lifetime});
  return token;
}

absl::StatusOr<LoginSession> Authenticator::ExchangeLoginToken(absl::string_view token,
                                                               absl::Duration lifetime) {
  ASSIGN_OR_RETURN(std::string secret, NewToken());
  const std::string hash = TokenHash(token);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  std::erase_if(login_tokens_, [now](const TokenRecord& record) { return *record.expires <= now; });
  std::erase_if(sessions_, [now](const TokenRecord& record) { return *record.expires <= now; });
  auto match = login_tokens_.end();
  for (auto it = login_tokens_.begin(); it != login_tokens_.end(); ++it) {
    if (ConstantTimeEqual(it->hash, hash) && match == login_tokens_.end()) match = it;
  }
  if (match == login_tokens_.end()) {
    return absl::UnauthenticatedError(
        "the login link is not good (used already, expired, or dropped when the daemon reloaded "
        "on SIGHUP or restarted); make a new one with `autotune admin-url`");
  }
  TokenRecord session = {
      .role = match->role, .id = match->id, .hash = TokenHash(secret), .expires = now + lifetime};
  // Used up before anything else can fail: a link is good once.
  login_tokens_.erase(match);
  LoginSession answer = {.secret = std::move(secret),
                         .caller = {.role = session.role, .id = session.id},
                         .expires = *session.expires};
  sessions_.push_back(std::move(session));
  return answer;
}

int Authenticator::EndSessions(const Caller& caller) {
  if (!absl::StartsWith(caller.id, "login:")) return 0;
  absl::MutexLock lock(&mu_);
  const auto of_holder = [&caller](const TokenRecord& record) { return record.id == caller.id; };
  return static_cast<int>(std::erase_if(login_tokens_, of_holder) +
                          std::erase_if(sessions_, of_holder));
}

absl::StatusOr<Caller> Authenticator::Identify(const CallInfo& call) const {
  Caller caller;
  if (!call.authorization.empty()) {
    absl::string_view presented = call.authorization;
    if (!absl::ConsumePrefix(&presented, kBearer) || presented.empty()) {
      return absl::UnauthenticatedError("the authorization metadata is not 'Bearer <token>'");
    }
    const std::string hash = TokenHash(presented);
    absl::MutexLock lock(&mu_);
    // The token file's tokens only: a login link is no bearer token.
    const TokenRecord* match = nullptr;
    for (const TokenRecord& record : tokens_) {
      // Every stored hash is compared, so the time says nothing of which.
      if (ConstantTimeEqual(record.hash, hash) && match == nullptr) match = &record;
    }
    if (match == nullptr) {
      return absl::UnauthenticatedError(
          "the bearer token is not in the daemon's token file (mistyped, or removed)");
    }
    if (match->expires.has_value() && *match->expires <= absl::Now()) {
      return absl::UnauthenticatedError(
          absl::StrCat("token '", match->id, "' expired at ", TimeText(*match->expires)));
    }
    caller.role = match->role;
    caller.id = absl::StrCat("token:", match->id);
    return caller;
  }
  if (call.transport == Transport::kHttp && !call.session.empty()) {
    const std::string hash = TokenHash(call.session);
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    const TokenRecord* match = nullptr;
    for (const TokenRecord& record : sessions_) {
      if (ConstantTimeEqual(record.hash, hash) && match == nullptr) match = &record;
    }
    if (match == nullptr || *match->expires <= now) {
      return absl::UnauthenticatedError(
          "the admin page's session has ended (signed out, expired, or dropped when the daemon "
          "reloaded on SIGHUP or restarted); open a new link from `autotune admin-url`, or use "
          "a bearer token");
    }
    caller.role = match->role;
    caller.id = match->id;
    return caller;
  }
  absl::string_view peer = call.peer;
  int fd = -1;
  if (absl::ConsumePrefix(&peer, "fd:") && absl::SimpleAtoi(peer, &fd)) {
    std::optional<PeerCredentials> credentials;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = peers_.find(fd); it != peers_.end()) credentials = it->second;
    }
    if (credentials.has_value()) {
      caller.id = absl::StrCat("uid:", credentials->uid);
      for (const Rule& rule : peer_rules_) {
        if ((rule.uid && rule.id == credentials->uid) ||
            (!rule.uid && rule.id == credentials->gid)) {
          caller.role = rule.role;
          return caller;
        }
      }
      caller.role = credentials->uid == options_.daemon_uid ? Role::kAdmin : anonymous_;
      return caller;
    }
  }
  for (const std::string& name : call.cert_common_names) {
    if (auto it = cert_roles_.find(name); it != cert_roles_.end()) {
      caller.role = it->second;
      caller.id = absl::StrCat("cert:", name);
      return caller;
    }
  }
  caller.role = anonymous_;
  caller.id = call.cert_common_names.empty()
                  ? std::string("anonymous")
                  : absl::StrCat("cert:", call.cert_common_names.front());
  return caller;
}

absl::StatusOr<Caller> Authenticator::Authorize(const CallInfo& call,
                                                absl::string_view method) const {
  ASSIGN_OR_RETURN(Caller caller, Identify(call));
  const std::optional<Role> needed = RequiredRole(method);
  if (!needed.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " has no role in the daemon's table; refused"));
  }
  if (caller.role == Role::kNone) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, " needs the ", RoleName(*needed), " role; ", caller.id,
                     " has none (present a token with --token-file, or ask for a --peer-role)"));
  }
  if (caller.role < *needed) {
    return absl::PermissionDeniedError(absl::StrCat(method, " needs the ", RoleName(*needed),
                                                    " role; ", caller.id, " has ",
                                                    RoleName(caller.role)));
  }
  return caller;
}

}  // namespace autotune::service
