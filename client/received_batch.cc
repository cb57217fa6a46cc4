#include "client/received_batch.h"

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace autotune::client {

absl::StatusOr<ReceivedBatch> ParseBatchLookupResponse(grpc::ByteBuffer& received) {
  using google::protobuf::internal::WireFormatLite;
  constexpr int kBinaries = v1::BatchLookupResponse::kBinariesFieldNumber;
  const auto malformed = [](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("the service's BatchLookup answer is malformed: ", what));
  };
  const auto delimited = [](uint32_t tag, int field) {
    return WireFormatLite::GetTagFieldNumber(tag) == field &&
           WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
  };
  // The message's size bounds its binaries'; the pages not written are
  // never backed.
  ASSIGN_OR_RETURN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(received.Length()));
  std::map<std::string, std::pair<size_t, size_t>> binaries;  // offset, size in the block
  size_t used = 0;
  std::string rest;  // every other field, as received
  {
    grpc::ProtoBufferReader reader(&received);
    google::protobuf::io::CodedInputStream in(&reader);
    google::protobuf::io::StringOutputStream rest_stream(&rest);
    google::protobuf::io::CodedOutputStream out(&rest_stream);
    while (const uint32_t tag = in.ReadTag()) {
      if (!delimited(tag, kBinaries)) {
        if (!WireFormatLite::SkipField(&in, tag, &out)) return malformed("a field is cut short");
        continue;
      }
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return malformed("a binaries entry is cut short");
      const google::protobuf::io::CodedInputStream::Limit limit =
          in.PushLimit(static_cast<int>(length));
      std::string sha;
      std::pair<size_t, size_t> where{used, 0};  // a missing value is empty
      while (const uint32_t entry_tag = in.ReadTag()) {
        if (delimited(entry_tag, 1)) {
          if (!WireFormatLite::ReadString(&in, &sha)) return malformed("a sha256 is cut short");
        } else if (delimited(entry_tag, 2)) {
          uint32_t size = 0;
          if (!in.ReadVarint32(&size) || size > block->size() - used ||
              !in.ReadRaw(block->data() + used, static_cast<int>(size))) {
            return malformed("a cubin is cut short");
          }
          where = {used, size};
          used += size;
        } else if (!WireFormatLite::SkipField(&in, entry_tag)) {
          return malformed("a binaries entry is cut short");
        }
      }
      // Ended where its length says, not where the bytes do.
      if (!in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) {
        return malformed("a binaries entry is cut short");
      }
      in.PopLimit(limit);
      binaries[sha] = where;  // a repeated key: the last one, as protobuf's maps
    }
    if (!in.ConsumedEntireMessage()) return malformed("it is cut short");
  }
  ReceivedBatch batch;
  if (!batch.response.ParseFromString(rest)) return malformed("its answers do not parse");
  for (const auto& [sha, where] : binaries) {
    batch.binaries.emplace(sha, block->Share(where.first, where.second));
  }
  return batch;
}

}  // namespace autotune::client
