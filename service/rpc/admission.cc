#include "service/rpc/admission.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace autotune::service {

absl::StatusOr<Caller> Admission::Admit(const CallInfo& call, absl::string_view method) const {
  if (draining_.load()) {
    return absl::UnavailableError(absl::StrCat("autotuned is stopping; ", method,
                                               " was not run (call again once it is back)"));
  }
  return auth_->Authorize(call, method);
}

absl::StatusOr<v1::InvalidateResponse> InvalidateAudited(CacheAdmin& admin, AuditLog* audit,
                                                         const Caller& caller,
                                                         const v1::InvalidateRequest& request,
                                                         absl::string_view via) {
  absl::StatusOr<v1::InvalidateResponse> result = admin.Invalidate(request);
  if (audit != nullptr) {
    audit->Record(caller, "Invalidate",
                  absl::StrCat(request.all() ? "all entries" : DescribeFilter(request.filter()),
                               request.dry_run() ? " (dry run)" : "", via),
                  result.status(),
                  result.ok() ? absl::StrCat(result->entries_removed(), " entries removed") : "");
  }
  return result;
}

}  // namespace autotune::service
