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
#ifndef AUTOTUNE_SERVICE_ADMIN_API_H_
#define AUTOTUNE_SERVICE_ADMIN_API_H_

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
    AuditLog* audit = nullptr;  // null = no audit log
  };
  explicit AdminApi(Sources sources) : sources_(sources) {}

  // GET /admin.
  HttpResponse Page(const HttpRequest& request) const;
  // Everything under /api/.
  HttpResponse Api(const HttpRequest& request) const;

 private:
  absl::StatusOr<std::string> Answer(const HttpRequest& request) const;
  absl::StatusOr<Caller> Admit(const HttpRequest& request, absl::string_view method) const;

  const Sources sources_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_ADMIN_API_H_
