// The one place where a gRPC status from autotuned becomes an absl::Status.
#ifndef AUTOTUNE_CLIENT_GRPC_STATUS_H_
#define AUTOTUNE_CLIENT_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace autotune::client {

// Keeps the code and the server's message. UNAVAILABLE (the daemon is not
// listening, the socket is missing, the connection broke) becomes
// "cannot reach autotuned at <server_address>: <details>; is the daemon
// running?" so that a person knows what to check.
absl::Status StatusFromGrpc(const grpc::Status& status, absl::string_view server_address);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_GRPC_STATUS_H_
