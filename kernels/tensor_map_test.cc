#include "kernels/tensor_map.h"

#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

// A [rows, cols] bf16 buffer copied in [box_rows, box_cols] boxes.
v1::TensorMapLayout Layout(int64_t rows, int64_t cols, int box_rows, int box_cols,
                           v1::TensorMapSwizzle swizzle = v1::SWIZZLE_128B) {
  v1::TensorMapLayout layout;
  layout.set_dtype(v1::BFLOAT16);
  layout.add_shape(rows);
  layout.add_shape(cols);
  layout.add_box(box_rows);
  layout.add_box(box_cols);
  layout.set_swizzle(swizzle);
  return layout;
}

TEST(TensorMapTest, AGemmOperandTileKeepsEveryRule) {
  EXPECT_OK(CheckTensorMapLayout(Layout(4096, 4096, 128, 64)));
  // Fewer rows than the box: the rows past the end read as zero.
  EXPECT_OK(CheckTensorMapLayout(Layout(1, 4096, 128, 64)));
}

TEST(TensorMapTest, EachBrokenRuleIsNamed) {
  struct Case {
    v1::TensorMapLayout layout;
    std::string says;
  };
  v1::TensorMapLayout fp8 = Layout(64, 64, 64, 64);
  fp8.set_dtype(v1::DTYPE_UNSPECIFIED);
  v1::TensorMapLayout ragged = Layout(64, 64, 64, 64);
  ragged.add_box(1);
  v1::TensorMapLayout six_dims;
  six_dims.set_dtype(v1::FLOAT32);
  for (int i = 0; i < 6; ++i) {
    six_dims.add_shape(2);
    six_dims.add_box(2);
  }
  const Case cases[] = {
      {Layout(4096, 4096, 512, 64), "box[0] = 512 is outside the TMA's [1, 256]"},
      {Layout(4096, 4096, 0, 64), "box[0] = 0 is outside"},
      {Layout(4096, 4096, 128, 128), "256 bytes, more than the 128-byte swizzle's span"},
      {Layout(4096, 4096, 128, 4, v1::SWIZZLE_NONE), "8 bytes, not a multiple of 16"},
      {Layout(4096, 4100, 128, 64), "the stride of dim 0 is 8200 bytes, not a multiple of 16"},
      {Layout(0, 4096, 128, 64), "shape[0] = 0 is outside [1, 2^32]"},
      {fp8, "has no tensor map element type"},
      {ragged, "the box has 3 extents for a shape of 2 dims"},
      {six_dims, "a tensor map has 1 to 5 dims, not 6"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(CheckTensorMapLayout(c.layout),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.says)))
        << c.says;
  }
}

TEST(TensorMapTest, TheEncodersArgumentsAreInnermostFirstWithByteStrides) {
  ASSERT_OK_AND_ASSIGN(TensorMapArguments args,
                       TensorMapArgumentsOf(Layout(300, 1024, 128, 64), 0x7f0000001000));
  EXPECT_EQ(args.rank, 2u);
  EXPECT_EQ(args.data_type, 9);  // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
  EXPECT_EQ(args.swizzle, 3);    // CU_TENSOR_MAP_SWIZZLE_128B
  EXPECT_EQ(args.address, 0x7f0000001000u);
  EXPECT_EQ(args.dims[0], 1024u);
  EXPECT_EQ(args.dims[1], 300u);
  EXPECT_EQ(args.strides[0], 2048u);  // one row of 1024 bf16
  EXPECT_EQ(args.box[0], 64u);
  EXPECT_EQ(args.box[1], 128u);
  EXPECT_EQ(args.element_strides[0], 1u);
  EXPECT_EQ(args.element_strides[1], 1u);

  EXPECT_THAT(TensorMapArgumentsOf(Layout(300, 1024, 128, 64), 0x1008),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("address 0x1008 is not 16-byte aligned")));
}

TEST(TensorMapTest, ElementTypesFollowTheDriversNumbers) {
  EXPECT_EQ(TensorMapDataType(v1::FLOAT32), 7);
  EXPECT_EQ(TensorMapDataType(v1::FLOAT16), 6);
  EXPECT_EQ(TensorMapDataType(v1::INT32), 3);
  EXPECT_EQ(TensorMapDataType(v1::FLOAT8_E4M3), 0);  // bytes
  EXPECT_EQ(TensorMapDataType(v1::DTYPE_UNSPECIFIED), -1);
}

}  // namespace
}  // namespace autotune::kernels
