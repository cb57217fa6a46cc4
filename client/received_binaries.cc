#include "client/received_binaries.h"

#include <algorithm>
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
#include "proto/autotune.pb.h"

namespace autotune::client {

namespace {

using google::protobuf::internal::WireFormatLite;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("the service's GetBinaries answer is malformed: ", what));
}

bool Delimited(uint32_t tag, int field) {
  return WireFormatLite::GetTagFieldNumber(tag) == field &&
         WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

// One pass over the serialized response. Without `rest` it only measures:
// *used ends as the bytes its cubins take from offset 0 of a block. With
// it, it copies each cubin into `block` from offset `start` on (a multiple
// of kCubinAlignment; no block when they take no bytes), records where in
// `binaries`, and copies every other field into `rest`.
absl::Status Walk(grpc::ByteBuffer& received, LargeBuffer* block, size_t start, size_t* used,
                  std::map<std::string, std::pair<size_t, size_t>>* binaries, std::string* rest) {
  constexpr int kBinaries = v1::GetBinariesResponse::kBinariesFieldNumber;
  grpc::ProtoBufferReader reader(&received);
  google::protobuf::io::CodedInputStream in(&reader);
  std::optional<google::protobuf::io::StringOutputStream> rest_stream;
  std::optional<google::protobuf::io::CodedOutputStream> out;
  if (rest != nullptr) {
    rest_stream.emplace(rest);
    out.emplace(&*rest_stream);
  }
  *used = start;
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

absl::StatusOr<std::pair<std::shared_ptr<LargeBuffer>, size_t>> CubinBlocks::Reserve(size_t size) {
  const size_t at = AlignCubinOffset(used_);
  if (block_ == nullptr || at > block_->size() || size > block_->size() - at) {
    ASSIGN_OR_RETURN(block_, LargeBuffer::Create(std::max(size, block_bytes_)));
    used_ = size;
    return std::make_pair(block_, size_t{0});
  }
  used_ = at + size;
  return std::make_pair(block_, at);
}

absl::Status ParseGetBinariesResponse(grpc::ByteBuffer& received, CubinBlocks& blocks,
                                      ReceivedBinaries* into) {
  // Measured first, so that the block has room for all of this answer's
  // cubins.
  size_t needed = 0;
  RETURN_IF_ERROR(Walk(received, nullptr, 0, &needed, nullptr, nullptr));
  std::pair<std::shared_ptr<LargeBuffer>, size_t> room{nullptr, 0};
  if (needed > 0) {
    ASSIGN_OR_RETURN(room, blocks.Reserve(needed));
  }
  const std::shared_ptr<LargeBuffer>& block = room.first;
  std::map<std::string, std::pair<size_t, size_t>> binaries;  // offset, size in the block
  size_t used = 0;
  std::string rest;  // every other field, as received
  RETURN_IF_ERROR(Walk(received, block.get(), room.second, &used, &binaries, &rest));
  v1::GetBinariesResponse others;
  if (!others.ParseFromString(rest)) return Malformed("its other fields do not parse");
  for (const auto& [sha, where] : binaries) {
    into->binaries[sha] =
        block != nullptr ? block->Share(where.first, where.second) : ShareBytes(std::string());
  }
  for (std::string& sha : *others.mutable_missing()) into->missing.push_back(std::move(sha));
  return absl::OkStatus();
}

}  // namespace autotune::client
