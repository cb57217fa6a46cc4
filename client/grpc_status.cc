#include "client/grpc_status.h"

#include "absl/strings/str_cat.h"

namespace autotune::client {

absl::Status StatusFromGrpc(const grpc::Status& status, absl::string_view server_address) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical numbering.
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable) {
    const std::string details =
        status.error_message().empty() ? "connection failed" : status.error_message();
    return absl::UnavailableError(absl::StrCat("cannot reach autotuned at ", server_address, ": ",
                                               details, "; is the daemon running?"));
  }
  return absl::Status(code, status.error_message());
}

}  // namespace autotune::client
