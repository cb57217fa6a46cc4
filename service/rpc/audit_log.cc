#include "service/rpc/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/posix_error.h"
#include "base/private_file.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"

namespace autotune::service {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  RETURN_IF_ERROR(MakeDirectories(Dirname(path), 0700));
  ASSIGN_OR_RETURN(const PrivateFile file,
                   OpenPrivateFile(path, O_WRONLY | O_APPEND, "the audit log"));
  if (file.tightened_from != 0) {
    spdlog::warn("the audit log {} was mode {:04o}, open to other users; tightened to 0600", path,
                 file.tightened_from);
  }
  return std::unique_ptr<AuditLog>(new AuditLog(path, file.fd));
}

AuditLog::~AuditLog() { close(fd_); }

void AuditLog::Record(const Caller& caller, const std::string& method, const std::string& target,
                      const absl::Status& result, const std::string& detail) {
  google::protobuf::Struct line;
  auto& fields = *line.mutable_fields();
  fields["time"].set_string_value(TimestampMillis());
  fields["caller"].set_string_value(caller.id);
  fields["role"].set_string_value(RoleName(caller.role));
  fields["method"].set_string_value(method);
  fields["target"].set_string_value(target);
  fields["code"].set_string_value(absl::StatusCodeToString(result.code()));
  fields["message"].set_string_value(result.ok() ? detail : std::string(result.message()));
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(line, &text).ok()) {
    spdlog::error("audit log: cannot format the line for {}", method);
    return;
  }
  text.push_back('\n');
  const ssize_t written = write(fd_, text.data(), text.size());
  if (written != static_cast<ssize_t>(text.size())) {
    spdlog::error("audit log {}: {} not recorded: {}", path_, method,
                  written < 0 ? std::strerror(errno) : "short write");
  }
}

}  // namespace autotune::service
