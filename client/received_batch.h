// A BatchLookupResponse read from the bytes gRPC received, its cubins into
// one block of memory (base/shared_bytes.h, LargeBuffer) rather than a
// string each: Client::BatchLookupReceivingCubins, for the start-up's tens
// of MB of cubins.
#ifndef AUTOTUNE_CLIENT_RECEIVED_BATCH_H_
#define AUTOTUNE_CLIENT_RECEIVED_BATCH_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "base/shared_bytes.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

struct ReceivedBatch {
  v1::BatchLookupResponse response;             // all but its binaries
  std::map<std::string, SharedBytes> binaries;  // sha256 -> cubin, not checked
};

// `received`, the serialized BatchLookupResponse: its binaries (field 2,
// map<string, bytes>) copied into one LargeBuffer, each at a multiple of
// 256 bytes (as in the local cache's packs), where each is a view that
// keeps it alive; every other field parsed by protobuf. As protobuf's
// maps, a repeated key keeps its last value and a missing value is empty.
// DATA_LOSS saying what is wrong when the bytes are not such a message
// (cut short, or fields that do not parse).
absl::StatusOr<ReceivedBatch> ParseBatchLookupResponse(grpc::ByteBuffer& received);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_RECEIVED_BATCH_H_
