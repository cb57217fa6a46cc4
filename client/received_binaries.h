// GetBinaries answers read from the bytes gRPC received, their cubins
// copied into blocks of memory (base/shared_bytes.h, LargeBuffer) rather
// than a string each: Client::GetBinariesReceivingCubins fetches a
// start-up's tens of MB of cubins in calls of about a MB each, and each
// answer's cubins go into the same blocks, one answer after the other.
#ifndef AUTOTUNE_CLIENT_RECEIVED_BINARIES_H_
#define AUTOTUNE_CLIENT_RECEIVED_BINARIES_H_

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/shared_bytes.h"
#include "grpcpp/support/byte_buffer.h"

namespace autotune::client {

struct ReceivedBinaries {
  std::map<std::string, SharedBytes> binaries;  // sha256 -> cubin, not checked
  std::vector<std::string> missing;             // asked for and not stored
  // sha256 -> why the call that asked for it failed (or was not made).
  std::map<std::string, absl::Status> failed;
};

// Where received cubins go: LargeBuffers of at least `block_bytes` each
// (address space: pages never written are never backed), filled one after
// the other. Each answer's cubins lie together in one block, at multiples
// of 256 bytes (kCubinAlignment, as in the local cache's packs); an answer
// that does not fit in what is left of the current block starts a new one.
class CubinBlocks {
 public:
  explicit CubinBlocks(size_t block_bytes) : block_bytes_(block_bytes) {}

  // Room for `size` bytes: the block and the offset, a multiple of
  // kCubinAlignment, where they start. RESOURCE_EXHAUSTED when no block
  // can be mapped.
  absl::StatusOr<std::pair<std::shared_ptr<LargeBuffer>, size_t>> Reserve(size_t size);

 private:
  const size_t block_bytes_;
  std::shared_ptr<LargeBuffer> block_;
  size_t used_ = 0;
};

// `received`, a serialized GetBinariesResponse: each of its binaries
// (field 1, map<string, bytes>) copied into `blocks` and added to
// `into->binaries` as a view that keeps its block alive, and its `missing`
// appended to `into->missing`. As protobuf's maps, a repeated key keeps its
// last value and a missing value is empty. DATA_LOSS saying what is wrong,
// adding nothing, when the bytes are not such a message (cut short, or
// fields that do not parse).
absl::Status ParseGetBinariesResponse(grpc::ByteBuffer& received, CubinBlocks& blocks,
                                      ReceivedBinaries* into);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_RECEIVED_BINARIES_H_
