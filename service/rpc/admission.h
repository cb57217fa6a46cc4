// How a call enters the daemon, one path for gRPC (autotune_service.h) and
// HTTP (admin_api.h): refused with UNAVAILABLE once the daemon drains (it is
// stopping: Server::Shutdown), else the caller's role must allow the method
// (Authenticator::Authorize). And the mutating calls that both adapters
// offer, run the same way: the change, then one audit line, whatever came
// of it.
//
//   Admission admission(auth);
//   ASSIGN_OR_RETURN(const Caller caller, admission.Admit(FromContext(ctx), "Invalidate"));
//   ... admission.Drain();   // from now on every Admit is refused
//
// Thread-safe.
#ifndef AUTOTUNE_SERVICE_RPC_ADMISSION_H_
#define AUTOTUNE_SERVICE_RPC_ADMISSION_H_

#include <atomic>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"
#include "service/lookup/cache_admin.h"
#include "service/rpc/audit_log.h"
#include "service/rpc/auth.h"

namespace autotune::service {

class Admission {
 public:
  // `auth` outlives this.
  explicit Admission(const Authenticator* auth) : auth_(auth) {}

  // UNAVAILABLE while draining ("autotuned is stopping; METHOD was not
  // run"), else Authenticator::Authorize.
  absl::StatusOr<Caller> Admit(const CallInfo& call, absl::string_view method) const;
  // Who the call is, with no role required (the HTTP API's /api/whoami).
  absl::StatusOr<Caller> Identify(const CallInfo& call) const { return auth_->Identify(call); }

  // From now on every Admit is refused, so that the calls in flight can
  // finish; calls already admitted go on.
  void Drain() { draining_.store(true); }

 private:
  const Authenticator* auth_;
  std::atomic<bool> draining_{false};
};

// CacheAdmin::Invalidate by an admitted `caller`, recorded in `audit` (null:
// none) with what it covered and how many entries went; `via` is added to
// the audit line's target (" (HTTP)" for the HTTP API, "" for gRPC).
absl::StatusOr<v1::InvalidateResponse> InvalidateAudited(CacheAdmin& admin, AuditLog* audit,
                                                         const Caller& caller,
                                                         const v1::InvalidateRequest& request,
                                                         absl::string_view via);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_ADMISSION_H_
