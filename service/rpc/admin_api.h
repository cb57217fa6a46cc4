// The admin page and the JSON API it reads, on the daemon's HTTP port
// (service/rpc/http_server.h). Each call is the gRPC call of the same name,
// with the same roles (service/rpc/auth.h: the bearer token of an
// `Authorization: Bearer` header, else --anonymous-role) and, for
// invalidation, the same audit line:
//
//   GET  /admin                  the page (web/web_assets.h); no data in it
//   GET  /api/whoami             {"caller", "role"} of the token presented
//   GET  /api/entries?family=&device=&hash=&dims=&dtype=&limit=&offset=
//                                ListEntries (dims and dtype go together)
//   GET  /api/entry?family=&hash=&device=&dims=&dtype=
//                                GetEntry: the entry and every measurement
//   GET  /api/jobs?limit=        ListJobs;  GET /api/jobs/ID  GetJob
//   GET  /api/devices            the GPUs: busy or not, what the last probe
//                                saw on them (reader role, as Stats)
//   POST /api/invalidate         Invalidate, the body an InvalidateRequest
//                                (Content-Type: application/json)
//   POST /api/login              {"login": "<token of `autotune admin-url`>"}:
//                                the link's token, used up, for a session
//                                cookie (below); {"caller", "role", "expires"}
//   POST /api/logout             ends the session's holder's sessions and
//                                unused links, and clears the cookie
//
// The page's session is a cookie, autotune_session_<port>: HttpOnly (no
// script reads it), SameSite=Strict (no other site's page sends it),
// Path=/, living kLoginSessionLifetime at most. It counts only when no
// Authorization header is given, and only with an X-Autotune-Request header
// (any value), as /api/login and /api/logout need too: a browser sends a
// custom header to another origin only after a CORS preflight, which this
// port never answers, so no other page can make a signed-in request, even
// one that reads nothing back.
//
// Messages travel as protobuf JSON with the field names of the .proto (as
// `autotune --json` prints them). An error is the HTTP status of its code
// (401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 400 INVALID_ARGUMENT, 404
// NOT_FOUND, 503 UNAVAILABLE...) with {"code": "PERMISSION_DENIED",
// "message": "..."}. A POST of any other content type is refused (400): a
// cross-site form cannot send one, so it cannot invalidate on a
// browser's behalf.
//
// Thread-safe; the objects given must outlive it.
#ifndef AUTOTUNE_SERVICE_RPC_ADMIN_API_H_
#define AUTOTUNE_SERVICE_RPC_ADMIN_API_H_

#include <string>

#include "absl/status/statusor.h"
#include "service/jobs/job_runner.h"
#include "service/lookup/cache_admin.h"
#include "service/rpc/admission.h"
#include "service/rpc/audit_log.h"
#include "service/rpc/auth.h"
#include "service/rpc/http_server.h"

namespace autotune::service {

class AdminApi {
 public:
  struct Sources {
    CacheAdmin* admin = nullptr;
    JobRunner* jobs = nullptr;
    const Admission* admission = nullptr;
    AuditLog* audit = nullptr;      // null = no audit log
    Authenticator* auth = nullptr;  // login links and sessions
  };
  explicit AdminApi(Sources sources) : sources_(sources) {}

  // GET /admin.
  HttpResponse Page(const HttpRequest& request) const;
  // Everything under /api/.
  HttpResponse Api(const HttpRequest& request) const;

 private:
  absl::StatusOr<std::string> Answer(const HttpRequest& request) const;
  absl::StatusOr<Caller> Admit(const HttpRequest& request, absl::string_view method) const;
  // POST /api/login and /api/logout, which set the session cookie.
  HttpResponse Login(const HttpRequest& request) const;
  HttpResponse Logout(const HttpRequest& request) const;

  const Sources sources_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_ADMIN_API_H_
