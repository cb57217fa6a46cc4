// absl::Status -> grpc::Status, in one place: same code, same message.
#ifndef AUTOTUNE_SERVICE_RPC_GRPC_STATUS_H_
#define AUTOTUNE_SERVICE_RPC_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace autotune::service {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_GRPC_STATUS_H_
