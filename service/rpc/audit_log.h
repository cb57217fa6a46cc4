// The audit log: one JSON line per mutating call (register, submit, cancel,
// import, tune-on-miss, invalidate, gc), written when the call ends:
//
//   {"time":"2026-12-01T10:00:00.123Z","caller":"token:ci","role":"tuner",
//    "method":"SubmitJob","target":"3 manifest items","code":"OK",
//    "message":"job 5f3c..."}
//
// `target` says what the call acted on, never a secret or a kernel's
// source; `code` is the gRPC status name. Lines are appended with one
// write(2) each to a file kept owner-only (0600), so concurrent calls
// never interleave within a line. Thread-safe.
#ifndef AUTOTUNE_SERVICE_RPC_AUDIT_LOG_H_
#define AUTOTUNE_SERVICE_RPC_AUDIT_LOG_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "service/rpc/auth.h"

namespace autotune::service {

class AuditLog {
 public:
  // Opens `path` for appending (creating it and its directory) as
  // base/private_file.h says: a symbolic link or a file another user owns
  // is refused (FAILED_PRECONDITION); one of ours open to group or others
  // is tightened to 0600, with a warning in the daemon's log. Errors name
  // the path.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends one line; a failed write is logged (spdlog), never fails the call.
  void Record(const Caller& caller, const std::string& method, const std::string& target,
              const absl::Status& result, const std::string& detail = "");

  const std::string& path() const { return path_; }

 private:
  AuditLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_AUDIT_LOG_H_
