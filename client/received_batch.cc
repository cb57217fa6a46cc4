#include "client/received_batch.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace autotune::client {

namespace {

using google::protobuf::internal::WireFormatLite;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("the service's BatchLookup answer is malformed: ", what));
}

bool Delimited(uint32_t tag, int field) {
  return WireFormatLite::GetTagFieldNumber(tag) == field &&
         WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

// One pass over the serialized response. Without `block` it only measures:
// *used ends as the bytes the cubins take in a block. With it, it copies
// each cubin into the block, records where in `binaries`, and copies every
// other field into `rest`.
absl::Status Walk(grpc::ByteBuffer& received, LargeBuffer* block, size_t* used,
                  std::map<std::string, std::pair<size_t, size_t>>* binaries, std::string* rest) {
  constexpr int kBinaries = v1::BatchLookupResponse::kBinariesFieldNumber;
  grpc::ProtoBufferReader reader(&received);
  google::protobuf::io::CodedInputStream in(&reader);
  std::optional<google::protobuf::io::StringOutputStream> rest_stream;
  std::optional<google::protobuf::io::CodedOutputStream> out;
  if (block != nullptr) {
    rest_stream.emplace(rest);
    out.emplace(&*rest_stream);
  }
  *used = 0;
  while (const uint32_t tag = in.ReadTag()) {
    if (!Delimited(tag, kBinaries)) {
      const bool skipped =
          out ? WireFormatLite::SkipField(&in, tag, &*out) : WireFormatLite::SkipField(&in, tag);
      if (!skipped) return Malformed("a field is cut short");
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return Malformed("a binaries entry is cut short");
    const google::protobuf::io::CodedInputStream::Limit limit =
        in.PushLimit(static_cast<int>(length));
    std::string sha;
    std::pair<size_t, size_t> where{0, 0};  // a missing value is empty
    while (const uint32_t entry_tag = in.ReadTag()) {
      if (Delimited(entry_tag, 1)) {
        if (!WireFormatLite::ReadString(&in, &sha)) return Malformed("a sha256 is cut short");
      } else if (Delimited(entry_tag, 2)) {
        uint32_t size = 0;
        if (!in.ReadVarint32(&size)) return Malformed("a cubin is cut short");
        const size_t at = AlignCubinOffset(*used);
        if (block == nullptr) {
          if (!in.Skip(static_cast<int>(size))) return Malformed("a cubin is cut short");
        } else if (at > block->size() || size > block->size() - at ||
                   !in.ReadRaw(block->data() + at, static_cast<int>(size))) {
          return Malformed("a cubin is cut short");
        }
        where = {at, size};
        *used = at + size;
      } else if (!WireFormatLite::SkipField(&in, entry_tag)) {
        return Malformed("a binaries entry is cut short");
      }
    }
    // Ended where its length says, not where the bytes do.
    if (!in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) {
      return Malformed("a binaries entry is cut short");
    }
    in.PopLimit(limit);
    // A repeated key keeps its last value, as protobuf's maps do.
    if (binaries != nullptr) (*binaries)[sha] = where;
  }
  if (!in.ConsumedEntireMessage()) return Malformed("it is cut short");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReceivedBatch> ParseBatchLookupResponse(grpc::ByteBuffer& received) {
  // Measured first, so that the block is as large as the cubins need; the
  // pages it does not use are never backed.
  size_t needed = 0;
  RETURN_IF_ERROR(Walk(received, nullptr, &needed, nullptr, nullptr));
  ASSIGN_OR_RETURN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(needed));
  std::map<std::string, std::pair<size_t, size_t>> binaries;  // offset, size in the block
  size_t used = 0;
  std::string rest;  // every other field, as received
  RETURN_IF_ERROR(Walk(received, block.get(), &used, &binaries, &rest));
  ReceivedBatch batch;
  if (!batch.response.ParseFromString(rest)) return Malformed("its answers do not parse");
  for (const auto& [sha, where] : binaries) {
    batch.binaries.emplace(sha, block->Share(where.first, where.second));
  }
  return batch;
}

}  // namespace autotune::client
