#include "base/shared_bytes.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace autotune {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

SharedBytes ShareBytes(std::string bytes) {
  struct Owned {
    std::string bytes;
    absl::string_view view;
  };
  auto owned = std::make_shared<Owned>();
  owned->bytes = std::move(bytes);
  owned->view = owned->bytes;
  return SharedBytes(owned, &owned->view);
}

absl::StatusOr<std::shared_ptr<LargeBuffer>> LargeBuffer::Create(size_t size) {
  if (size == 0) return std::shared_ptr<LargeBuffer>(new LargeBuffer(nullptr, 0, nullptr, 0));
  if (size > SIZE_MAX - 2 * kHugePage) {
    return absl::ResourceExhaustedError(absl::StrCat("a buffer of ", size, " bytes"));
  }
  // One huge page more than needed, so that an aligned start fits in it.
  const size_t mapped = RoundUp(size, kHugePage) + kHugePage;
  void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", mapped, " bytes for a buffer: ", std::strerror(errno)));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapping);
  char* data = reinterpret_cast<char*>(RoundUp(start, kHugePage));
  // Advice only: a kernel without transparent huge pages refuses it, and
  // the block is then backed by small pages.
  (void)madvise(data, RoundUp(size, kHugePage), MADV_HUGEPAGE);
  return std::shared_ptr<LargeBuffer>(new LargeBuffer(data, size, mapping, mapped));
}

LargeBuffer::~LargeBuffer() {
  if (mapping_ != nullptr) munmap(mapping_, mapped_);
}

SharedBytes LargeBuffer::Share(size_t offset, size_t size) const {
  if (offset > size_ || size > size_ - offset) return nullptr;
  struct View {
    std::shared_ptr<const LargeBuffer> block;
    absl::string_view view;
  };
  auto view = std::make_shared<View>();
  view->block = shared_from_this();
  view->view = absl::string_view(data_ + offset, size);
  return SharedBytes(view, &view->view);
}

}  // namespace autotune
