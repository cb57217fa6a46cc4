#include "base/shared_bytes.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "base/status_matchers.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

TEST(ShareBytesTest, HoldsTheStringMovedIn) {
  std::string bytes(100000, 'x');
  const char* data = bytes.data();
  SharedBytes shared = ShareBytes(std::move(bytes));
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->data(), data);  // moved, not copied
  EXPECT_EQ(*shared, std::string(100000, 'x'));
}

TEST(LargeBufferTest, IsAlignedToHugePagesWritableAndZeroUntilWritten) {
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(5 << 20));
  EXPECT_EQ(block->size(), size_t{5} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block->data()) % (2 << 20), 0u);
  EXPECT_EQ(block->data()[0], 0);
  EXPECT_EQ(block->data()[block->size() - 1], 0);
  std::memset(block->data(), 'a', block->size());
  EXPECT_EQ(block->data()[block->size() - 1], 'a');
}

TEST(LargeBufferTest, ViewsKeepTheBlockAliveAfterItsLastOtherOwnerIsGone) {
  SharedBytes first;
  SharedBytes last;
  {
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(1 << 20));
    std::memcpy(block->data(), "hello", 5);
    std::memcpy(block->data() + (1 << 20) - 5, "world", 5);
    first = block->Share(0, 5);
    last = block->Share((1 << 20) - 5, 5);
  }
  ASSERT_NE(first, nullptr);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(*first, "hello");
  first.reset();
  EXPECT_EQ(*last, "world");  // still mapped: the view holds the block
}

TEST(LargeBufferTest, AViewOutsideTheBlockIsNull) {
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(4096));
  EXPECT_NE(block->Share(0, 4096), nullptr);
  EXPECT_NE(block->Share(4096, 0), nullptr);
  EXPECT_EQ(block->Share(4096, 1), nullptr);
  EXPECT_EQ(block->Share(1, 4096), nullptr);
  EXPECT_EQ(block->Share(SIZE_MAX, 2), nullptr);
}

TEST(LargeBufferTest, AnEmptyBlockMapsNothing) {
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LargeBuffer> block, LargeBuffer::Create(0));
  EXPECT_EQ(block->size(), 0u);
  EXPECT_NE(block->Share(0, 0), nullptr);
}

TEST(LargeBufferTest, ABlockLargerThanTheAddressSpaceIsRefused) {
  absl::StatusOr<std::shared_ptr<LargeBuffer>> block = LargeBuffer::Create(SIZE_MAX / 2);
  EXPECT_EQ(block.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace autotune
