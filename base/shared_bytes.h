// Bytes that several owners read without copies: cubins a start-up hands to
// each of its answers and to the local cache's writer.
//
//   SharedBytes cubin = ShareBytes(std::move(received));  // one string
//
//   ASSIGN_OR_RETURN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(total));
//   memcpy(block->data() + offset, bytes, size);  // filled once, then only read
//   SharedBytes cubin = block->Share(offset, size);
//
// A SharedBytes keeps whatever holds its bytes alive: the string moved in,
// a LargeBuffer, or a mapped file (client/local_cache.h's packs).
#ifndef AUTOTUNE_BASE_SHARED_BYTES_H_
#define AUTOTUNE_BASE_SHARED_BYTES_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune {

using SharedBytes = std::shared_ptr<const absl::string_view>;

// `bytes`, moved into the result.
SharedBytes ShareBytes(std::string bytes);

// Where each cubin starts in a block that holds several (a received batch,
// a local cache's pack): at a multiple of kCubinAlignment, so that an image
// the driver loads is aligned as a file read into memory would be.
inline constexpr size_t kCubinAlignment = 256;
inline size_t AlignCubinOffset(size_t offset) {
  return (offset + kCubinAlignment - 1) / kCubinAlignment * kCubinAlignment;
}

// A block of anonymous memory for tens of MB received at once, advised to
// the kernel for transparent huge pages (MADV_HUGEPAGE) and aligned to
// them. Where the kernel grants them, touching 16 MB takes 8 page faults
// instead of 4,096; on a virtual machine, where each fault of a 4 KB page
// costs several microseconds, that is most of the cost of receiving the
// bytes. Where it does not, the block behaves as any anonymous mapping.
// Pages not written are never backed, so sizing a block by an upper bound
// costs address space only.
//
// Filled by one thread, then only read (Share), from any thread.
class LargeBuffer : public std::enable_shared_from_this<LargeBuffer> {
 public:
  // `size` bytes, zero until written (size 0 maps nothing).
  // RESOURCE_EXHAUSTED when the memory cannot be mapped.
  static absl::StatusOr<std::shared_ptr<LargeBuffer>> Create(size_t size);
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  ~LargeBuffer();

  char* data() { return data_; }
  size_t size() const { return size_; }

  // The `size` bytes at `offset`, keeping the block alive; null when they
  // do not lie within it.
  SharedBytes Share(size_t offset, size_t size) const;

 private:
  LargeBuffer(char* data, size_t size, void* mapping, size_t mapped)
      : data_(data), size_(size), mapping_(mapping), mapped_(mapped) {}
  char* data_;
  size_t size_;
  void* mapping_;
  size_t mapped_;
};

}  // namespace autotune

#endif  // AUTOTUNE_BASE_SHARED_BYTES_H_
