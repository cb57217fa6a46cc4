#include "kernels/search_space.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/testdata.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

v1::KernelFamily Load(const std::string& relative) {
  absl::StatusOr<v1::KernelFamily> family = LoadFamilyFile(Testdata(relative));
  EXPECT_TRUE(family.ok()) << family.status();
  return family.ok() ? *family : v1::KernelFamily();
}

v1::Problem Problem(std::map<std::string, int64_t> dims, v1::DType dtype) {
  v1::Problem problem;
  for (const auto& [name, value] : dims) (*problem.mutable_dims())[name] = value;
  problem.set_dtype(dtype);
  return problem;
}

// (BLOCK, ELEMS) of each variant, in order.
std::vector<std::pair<int64_t, int64_t>> AxpyConfigs(const SearchSpace& space) {
  std::vector<std::pair<int64_t, int64_t>> configs;
  for (const Variant& v : space.variants) {
    configs.emplace_back(v.config.params().at("BLOCK"), v.config.params().at("ELEMS"));
  }
  return configs;
}

int64_t SumDropped(const SearchSpace& space) {
  int64_t sum = 0;
  for (const auto& [reason, count] : space.dropped) sum += count;
  return sum;
}

TEST(SearchSpaceTest, AxpyCountsMatchTheHandCount) {
  // BLOCK in {64..2048} (6) x ELEMS in {1, 2, 4, 8} (4) = 24 configs.
  // BLOCK * ELEMS <= 4096 rejects (1024, 8), (2048, 4), (2048, 8): 21 left.
  // (2048, 1) and (2048, 2) exceed CUDA's 1024 threads in x: 19 variants.
  ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(Load("good/axpy.textproto"),
                                                            Problem({{"n", 10000}}, v1::FLOAT32)));
  EXPECT_EQ(space.total_configs, 24);
  EXPECT_EQ(space.after_constraints, 21);
  EXPECT_THAT(space.rejected_by_constraint, ElementsAre(3));
  EXPECT_THAT(space.dropped, ElementsAre(Pair("launch.block[0]: above the CUDA limit (1024)", 2)));
  EXPECT_EQ(space.variants.size(), 19);
  EXPECT_EQ(space.after_constraints,
            static_cast<int64_t>(space.variants.size()) + SumDropped(space));
}

TEST(SearchSpaceTest, OrderIsNestedLoopsOverParamsInDeclarationOrder) {
  const v1::KernelFamily family = Load("good/axpy.textproto");
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT32)));
  std::vector<std::pair<int64_t, int64_t>> expected;
  std::vector<int64_t> expected_index;
  for (int64_t b : {64, 128, 256, 512, 1024}) {
    for (int64_t e : {1, 2, 4, 8}) {
      if (b * e > 4096) continue;
      expected.emplace_back(b, e);
    }
  }
  EXPECT_EQ(AxpyConfigs(space), expected);
  for (const Variant& v : space.variants) {
    const int64_t b = v.param_values[0];
    const int64_t e = v.param_values[1];
    const int b_index = b == 64 ? 0 : b == 128 ? 1 : b == 256 ? 2 : b == 512 ? 3 : 4;
    const int e_index = e == 1 ? 0 : e == 2 ? 1 : e == 4 ? 2 : 3;
    EXPECT_EQ(v.index, b_index * 4 + e_index);
  }

  // The same inputs give the same variants, field for field.
  ASSERT_OK_AND_ASSIGN(SearchSpace again,
                       ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT32)));
  ASSERT_EQ(again.variants.size(), space.variants.size());
  for (size_t i = 0; i < space.variants.size(); ++i) {
    EXPECT_EQ(again.variants[i].index, space.variants[i].index);
    EXPECT_EQ(again.variants[i].compile_options, space.variants[i].compile_options);
    EXPECT_EQ(again.variants[i].launch.SerializeAsString(),
              space.variants[i].launch.SerializeAsString());
  }
}

TEST(SearchSpaceTest, ResolvesLaunchBuffersScalarsAndDefines) {
  ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(Load("good/axpy.textproto"),
                                                            Problem({{"n", 10000}}, v1::FLOAT32)));
  ASSERT_FALSE(space.variants.empty());
  const Variant& first = space.variants.front();  // BLOCK=64, ELEMS=1
  EXPECT_EQ(first.index, 0);
  EXPECT_THAT(first.config.params(), UnorderedElementsAre(Pair("BLOCK", 64), Pair("ELEMS", 1)));
  EXPECT_THAT(first.param_values, ElementsAre(64, 1));
  EXPECT_THAT(first.launch.grid(), ElementsAre(157));  // ceil(10000 / 64)
  EXPECT_THAT(first.launch.block(), ElementsAre(64));
  EXPECT_EQ(first.launch.dynamic_shared_bytes(), 0);
  EXPECT_EQ(first.name_expression, "axpy");
  EXPECT_THAT(first.compile_options,
              ElementsAre("-DBLOCK=64", "-DELEMS=1", "-DAUTOTUNE_DTYPE=float",
                          "-DAUTOTUNE_DTYPE_FP32=1", "-DAUTOTUNE_DTYPE_BYTES=4"));
  ASSERT_EQ(first.buffers.size(), 2);
  EXPECT_EQ(first.buffers[1].name, "y");
  EXPECT_EQ(first.buffers[1].dtype, v1::FLOAT32);
  EXPECT_THAT(first.buffers[1].shape, ElementsAre(10000));
  EXPECT_EQ(first.buffers[1].elements, 10000);
  EXPECT_EQ(first.buffers[1].bytes, 40000);
  ASSERT_EQ(first.scalars.size(), 2);
  EXPECT_EQ(first.scalars[0].name, "alpha");
  EXPECT_EQ(first.scalars[0].dtype, v1::FLOAT32);
  EXPECT_DOUBLE_EQ(first.scalars[0].value, 1.5);
  EXPECT_EQ(first.scalars[1].dtype, v1::INT64);
  EXPECT_DOUBLE_EQ(first.scalars[1].value, 10000);
  EXPECT_DOUBLE_EQ(first.bytes_per_call, 120000);
  EXPECT_DOUBLE_EQ(first.flops_per_call, 20000);

  const Variant& last = space.variants.back();      // BLOCK=1024, ELEMS=4
  EXPECT_THAT(last.launch.grid(), ElementsAre(3));  // ceil(10000 / 4096)
  EXPECT_THAT(last.launch.block(), ElementsAre(1024));

  EXPECT_EQ(space.reference_name, "axpy_reference");
  EXPECT_THAT(space.reference_launch.grid(), ElementsAre(40));  // ceil(10000 / 256)
  EXPECT_THAT(space.reference_launch.block(), ElementsAre(256));
  EXPECT_THAT(space.reference_compile_options,
              ElementsAre("-DAUTOTUNE_DTYPE=float", "-DAUTOTUNE_DTYPE_FP32=1",
                          "-DAUTOTUNE_DTYPE_BYTES=4", "-DAUTOTUNE_REFERENCE=1"));
}

TEST(SearchSpaceTest, ProblemDTypeSizesBuffersAndPicksTheMacros) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  family.add_compile_options("-std=c++17");
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT16)));
  ASSERT_FALSE(space.variants.empty());
  const Variant& first = space.variants.front();
  EXPECT_EQ(first.buffers[0].dtype, v1::FLOAT16);
  EXPECT_EQ(first.buffers[0].bytes, 20000);
  EXPECT_EQ(first.scalars[0].dtype, v1::FLOAT32);  // declared, not the problem's
  EXPECT_DOUBLE_EQ(first.bytes_per_call, 60000);
  EXPECT_THAT(first.compile_options,
              ElementsAre("-std=c++17", "-DBLOCK=64", "-DELEMS=1", "-DAUTOTUNE_DTYPE=__half",
                          "-DAUTOTUNE_DTYPE_FP16=1", "-DAUTOTUNE_DTYPE_BYTES=2"));
  EXPECT_THAT(space.reference_compile_options,
              ElementsAre("-std=c++17", "-DAUTOTUNE_DTYPE=__half", "-DAUTOTUNE_DTYPE_FP16=1",
                          "-DAUTOTUNE_DTYPE_BYTES=2", "-DAUTOTUNE_REFERENCE=1"));
}

TEST(SearchSpaceTest, DeviceThreadLimitDropsLargeBlocks) {
  DeviceLimits limits;
  limits.max_threads_per_block = 256;
  ASSERT_OK_AND_ASSIGN(
      SearchSpace space,
      ExpandSearchSpace(Load("good/axpy.textproto"), Problem({{"n", 10000}}, v1::FLOAT32), limits));
  EXPECT_EQ(space.after_constraints, 21);
  // BLOCK=512 (4 configs) and BLOCK=1024 (3) exceed the device; 2048 CUDA.
  EXPECT_THAT(
      space.dropped,
      ElementsAre(Pair("launch.block: more threads per block than the device limit (256)", 7),
                  Pair("launch.block[0]: above the CUDA limit (1024)", 2)));
  EXPECT_EQ(space.variants.size(), 12);
  for (const Variant& v : space.variants) EXPECT_LE(v.launch.block(0), 256);
}

TEST(SearchSpaceTest, DeviceSharedMemoryLimitDropsLargeTiles) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  family.mutable_launch()->set_dynamic_shared_bytes("BLOCK * ELEMS * dtype_bytes");
  DeviceLimits limits;
  limits.max_dynamic_shared_bytes = 8192;
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT32), limits));
  // (512, 8) and (1024, 4) need 16384 bytes.
  EXPECT_THAT(
      space.dropped,
      ElementsAre(Pair("launch.block[0]: above the CUDA limit (1024)", 2),
                  Pair("launch.dynamic_shared_bytes: above the device limit (8192 bytes)", 2)));
  EXPECT_EQ(space.variants.size(), 17);
  EXPECT_EQ(space.variants.front().launch.dynamic_shared_bytes(), 256);
}

TEST(SearchSpaceTest, ConstraintsSeeTheTargetArch) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  // ELEMS = 8 stands for code that only sm_90a (or any sm_100) compiles.
  family.add_constraints("ELEMS < 8 || (arch == 90 && arch_specific == 1) || arch >= 100");
  ASSERT_OK(ValidateFamily(family, "family"));
  const v1::Problem problem = Problem({{"n", 10000}}, v1::FLOAT32);
  const auto elems_8 = [](const SearchSpace& space) {
    return std::count_if(space.variants.begin(), space.variants.end(),
                         [](const Variant& v) { return v.config.params().at("ELEMS") == 8; });
  };
  DeviceLimits limits;  // sm_90: no ELEMS = 8
  ASSERT_OK_AND_ASSIGN(SearchSpace plain, ExpandSearchSpace(family, problem, limits));
  EXPECT_EQ(elems_8(plain), 0);
  EXPECT_EQ(plain.rejected_by_constraint.back(), 4);  // (64..512, 8): 1024 and 2048 fail earlier
  limits.arch = "sm_90a";
  ASSERT_OK_AND_ASSIGN(SearchSpace specific, ExpandSearchSpace(family, problem, limits));
  EXPECT_EQ(elems_8(specific), 4);
  EXPECT_EQ(specific.variants.size(), plain.variants.size() + 4);
  limits.arch = "sm_100f";
  ASSERT_OK_AND_ASSIGN(SearchSpace blackwell, ExpandSearchSpace(family, problem, limits));
  EXPECT_EQ(elems_8(blackwell), 4);
  limits.arch = "sm_89";
  ASSERT_OK_AND_ASSIGN(SearchSpace ada, ExpandSearchSpace(family, problem, limits));
  EXPECT_EQ(elems_8(ada), 0);

  // One config, resolved for the arch it was compiled for.
  v1::Config config;
  (*config.mutable_params())["BLOCK"] = 128;
  (*config.mutable_params())["ELEMS"] = 8;
  EXPECT_THAT(ResolveConfig(family, problem, config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("config fails constraints[1]")));
  limits.arch = "sm_90a";
  EXPECT_OK(ResolveConfig(family, problem, config, limits));

  limits.arch = "gfx90a";
  EXPECT_THAT(ExpandSearchSpace(family, problem, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "target arch 'gfx90a' is not a GPU architecture like sm_90"));
}

TEST(SearchSpaceTest, LaunchGridSeesTheDeviceSmCount) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  // A persistent grid: one block per SM, never more blocks than tiles.
  family.mutable_launch()->set_grid(0, "min(ceil_div(n, BLOCK * ELEMS), sm_count)");
  ASSERT_OK(ValidateFamily(family, "family"));
  const v1::Problem problem = Problem({{"n", 1 << 20}}, v1::FLOAT32);
  v1::Config config;
  (*config.mutable_params())["BLOCK"] = 256;
  (*config.mutable_params())["ELEMS"] = 4;
  DeviceLimits limits;
  limits.sm_count = 132;
  ASSERT_OK_AND_ASSIGN(Variant on_h100, ResolveConfig(family, problem, config, limits));
  EXPECT_EQ(on_h100.launch.grid(0), 132);
  // Unknown device (a compile-only job): one block per tile.
  limits.sm_count = 0;
  ASSERT_OK_AND_ASSIGN(Variant unknown, ResolveConfig(family, problem, config, limits));
  EXPECT_EQ(unknown.launch.grid(0), (1 << 20) / 1024);
  ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(family, problem, limits));
  for (const Variant& v : space.variants) {
    const int64_t tile = v.config.params().at("BLOCK") * v.config.params().at("ELEMS");
    EXPECT_EQ(v.launch.grid(0), ((1 << 20) + tile - 1) / tile);
  }

  // Only the launch sees it: a constraint or a buffer shape over sm_count is
  // refused when the family is checked.
  v1::KernelFamily in_constraint = Load("good/axpy.textproto");
  in_constraint.add_constraints("BLOCK <= sm_count");
  EXPECT_THAT(ValidateFamily(in_constraint, "family"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("sm_count")));
}

TEST(SearchSpaceTest, TensorMapsAreLaidOutPerConfigAndABrokenBoxDropsTheConfig) {
  // y as a tensor map whose box is ELEMS * 64 elements.
  v1::KernelFamily family = Load("good/axpy.textproto");
  v1::TensorMap* map = family.add_tensor_maps();
  map->set_buffer("y");
  map->add_box("ELEMS * 64");
  map->set_swizzle(v1::SWIZZLE_NONE);
  ASSERT_OK(ValidateFamily(family, "test"));
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT32)));
  // ELEMS = 8 gives a box of 512: above the TMA's 256, for every BLOCK that
  // passed the constraint and the thread limit (64 to 512).
  EXPECT_THAT(space.dropped,
              UnorderedElementsAre(Pair("launch.block[0]: above the CUDA limit (1024)", 2),
                                   Pair("tensor_maps[0].box[0]: above the TMA limit (256)", 4)));
  ASSERT_FALSE(space.variants.empty());
  const Variant& first = space.variants.front();  // BLOCK 64, ELEMS 1
  ASSERT_EQ(first.launch.tensor_maps_size(), 1);
  const v1::TensorMapLayout& layout = first.launch.tensor_maps(0);
  EXPECT_EQ(layout.buffer(), 1);    // y
  EXPECT_EQ(layout.argument(), 2);  // after x and y, before the scalars
  EXPECT_EQ(layout.dtype(), v1::FLOAT32);
  EXPECT_THAT(layout.shape(), ElementsAre(10000));
  EXPECT_THAT(layout.box(), ElementsAre(64));
  EXPECT_EQ(layout.swizzle(), v1::SWIZZLE_NONE);

  // In a 32-byte swizzle only boxes of 8 fp32 elements or fewer fit: none.
  map->set_swizzle(v1::SWIZZLE_32B);
  ASSERT_OK_AND_ASSIGN(space, ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT32)));
  EXPECT_TRUE(space.variants.empty());
  EXPECT_EQ(space.dropped["tensor_maps[0]: breaks a TMA rule"], 15);
  v1::Config config;
  (*config.mutable_params())["BLOCK"] = 64;
  (*config.mutable_params())["ELEMS"] = 1;
  EXPECT_THAT(ResolveConfig(family, Problem({{"n", 10000}}, v1::FLOAT32), config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("tensor_maps[0] over 'y': the innermost box extent is "
                                            "256 bytes, more than the 32-byte swizzle's span")));
}

TEST(SearchSpaceTest, ConstraintsAreAppliedInOrderAndNonFiniteFails) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  family.add_constraints("is_pow2(ELEMS) && ELEMS <= 4");
  // 0 / 0 for BLOCK = 64: not finite, so the config does not pass.
  family.add_constraints("(BLOCK - 64) / (BLOCK - 64)");
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(family, Problem({{"n", 10000}}, v1::FLOAT32)));
  // constraints[0] rejects 3 configs; constraints[1] ELEMS=8 of BLOCK < 1024
  // (4 more: 64, 128, 256, 512); constraints[2] the 3 left of BLOCK=64.
  EXPECT_THAT(space.rejected_by_constraint, ElementsAre(3, 4, 3));
  EXPECT_EQ(space.after_constraints, 14);
  for (const Variant& v : space.variants) {
    EXPECT_NE(v.config.params().at("BLOCK"), 64);
    EXPECT_LE(v.config.params().at("ELEMS"), 4);
  }
}

TEST(SearchSpaceTest, ParamDependentShapeDropsConfigsNotTheProblem) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  family.mutable_buffers(0)->set_shape(0, "n - BLOCK");
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(family, Problem({{"n", 100}}, v1::FLOAT32)));
  EXPECT_THAT(space.dropped, ElementsAre(Pair("buffers[0].shape[0]: not positive", 15),
                                         Pair("launch.block[0]: above the CUDA limit (1024)", 2)));
  EXPECT_THAT(AxpyConfigs(space), ElementsAre(Pair(64, 1), Pair(64, 2), Pair(64, 4), Pair(64, 8)));
  EXPECT_THAT(space.variants.front().buffers[0].shape, ElementsAre(36));
}

TEST(SearchSpaceTest, ShapeThatIsZeroForTheProblemIsAnError) {
  const v1::KernelFamily family = Load("bad/zero_shape.textproto");
  EXPECT_THAT(ExpandSearchSpace(family, Problem({{"n", 8}}, v1::FLOAT32)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "buffers[0].shape[0]: 'n - 8' = 0 is not positive (problem n=8 fp32)"));
  EXPECT_OK(ExpandSearchSpace(family, Problem({{"n", 9}}, v1::FLOAT32)));
}

TEST(SearchSpaceTest, ReferenceLaunchMustFitTheProblem) {
  v1::KernelFamily family = Load("good/axpy.textproto");
  family.mutable_reference()->mutable_launch()->set_grid(0, "n / 256");
  EXPECT_THAT(ExpandSearchSpace(family, Problem({{"n", 1000}}, v1::FLOAT32)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "reference.launch.grid[0]: 'n / 256' = 3.90625 is not an integer "
                       "(problem n=1000 fp32)"));
}

TEST(SearchSpaceTest, TemplateArgumentsBinding) {
  ASSERT_OK_AND_ASSIGN(SearchSpace space,
                       ExpandSearchSpace(Load("good/row_scale.textproto"),
                                         Problem({{"rows", 100}, {"cols", 300}}, v1::FLOAT32)));
  // TILE_X {16, 32, 64} x TILE_Y {1, 2, 4, 8}; only (64, 8) has > 256 threads.
  EXPECT_EQ(space.total_configs, 12);
  EXPECT_EQ(space.after_constraints, 11);
  ASSERT_EQ(space.variants.size(), 11);
  const Variant& first = space.variants.front();
  EXPECT_EQ(first.name_expression, "row_scale<16, 1>");
  EXPECT_THAT(
      first.compile_options,
      ElementsAre("-DAUTOTUNE_DTYPE=float", "-DAUTOTUNE_DTYPE_FP32=1", "-DAUTOTUNE_DTYPE_BYTES=4"));
  EXPECT_THAT(first.launch.grid(), ElementsAre(19, 100));
  EXPECT_THAT(first.launch.block(), ElementsAre(16, 1));
  EXPECT_THAT(first.buffers[0].shape, ElementsAre(100, 300));
  EXPECT_EQ(first.buffers[0].bytes, 120000);
  EXPECT_EQ(first.buffers[1].bytes, 400);
  EXPECT_EQ(space.variants.back().name_expression, "row_scale<64, 4>");
  EXPECT_THAT(space.reference_launch.grid(), ElementsAre(19, 7));

  v1::KernelFamily axpy = Load("good/axpy.textproto");
  axpy.set_binding(v1::TEMPLATE_ARGUMENTS);
  axpy.add_dtypes(v1::FLOAT64);
  ASSERT_OK_AND_ASSIGN(SearchSpace templated,
                       ExpandSearchSpace(axpy, Problem({{"n", 10}}, v1::FLOAT64)));
  EXPECT_EQ(templated.variants[5].name_expression, "axpy<128, 2>");
  EXPECT_THAT(templated.variants[5].compile_options,
              ElementsAre("-DAUTOTUNE_DTYPE=double", "-DAUTOTUNE_DTYPE_FP64=1",
                          "-DAUTOTUNE_DTYPE_BYTES=8"));
}

struct ProblemCase {
  std::string name;
  v1::Problem problem;
  std::string message;
};

void PrintTo(const ProblemCase& c, std::ostream* os) { *os << c.name; }

class ValidateProblemTest : public ::testing::TestWithParam<ProblemCase> {};

TEST_P(ValidateProblemTest, NamesTheField) {
  EXPECT_THAT(ExpandSearchSpace(Load("good/row_scale.textproto"), GetParam().problem),
              StatusIs(absl::StatusCode::kInvalidArgument, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Problems, ValidateProblemTest,
    ::testing::Values(
        ProblemCase{"MissingDim", Problem({{"rows", 4}}, v1::FLOAT32),
                    "problem.dims: missing 'cols' (family 'row_scale' has dims: rows, cols)"},
        ProblemCase{"ExtraDim", Problem({{"rows", 4}, {"cols", 4}, {"depth", 2}}, v1::FLOAT32),
                    "problem.dims['depth']: not a dim of family 'row_scale' (dims: rows, cols)"},
        ProblemCase{"Zero", Problem({{"rows", 0}, {"cols", 4}}, v1::FLOAT32),
                    "problem.dims['rows']: 0 is not positive"},
        ProblemCase{"AboveMax", Problem({{"rows", 4}, {"cols", 70000}}, v1::FLOAT32),
                    "problem.dims['cols']: 70000 is above the max 65536"},
        ProblemCase{"DType", Problem({{"rows", 4}, {"cols", 4}}, v1::FLOAT16),
                    "problem.dtype: fp16 is not supported by family 'row_scale' (fp32)"},
        ProblemCase{"NoDType", Problem({{"rows", 4}, {"cols", 4}}, v1::DTYPE_UNSPECIFIED),
                    "problem.dtype: unspecified is not supported by family 'row_scale' "
                    "(fp32)"}),
    [](const ::testing::TestParamInfo<ProblemCase>& info) { return info.param.name; });

TEST(ResolveConfigTest, ResolvesOneConfigLikeTheExpansion) {
  const v1::KernelFamily family = Load("good/axpy.textproto");
  const v1::Problem problem = Problem({{"n", 10000}}, v1::FLOAT32);
  v1::Config config;
  (*config.mutable_params())["BLOCK"] = 256;
  (*config.mutable_params())["ELEMS"] = 4;
  ASSERT_OK_AND_ASSIGN(Variant variant, ResolveConfig(family, problem, config));
  EXPECT_EQ(variant.index, 2 * 4 + 2);
  EXPECT_THAT(variant.launch.grid(), ElementsAre(10));  // ceil(10000 / 1024)

  ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(family, problem));
  const auto it = std::find_if(space.variants.begin(), space.variants.end(),
                               [](const Variant& v) { return v.index == 10; });
  ASSERT_NE(it, space.variants.end());
  EXPECT_EQ(it->compile_options, variant.compile_options);
}

TEST(ResolveConfigTest, RejectsConfigsTheSpaceWouldNotHold) {
  const v1::KernelFamily family = Load("good/axpy.textproto");
  const v1::Problem problem = Problem({{"n", 10000}}, v1::FLOAT32);
  const auto config = [](std::map<std::string, int64_t> params) {
    v1::Config c;
    for (const auto& [name, value] : params) (*c.mutable_params())[name] = value;
    return c;
  };
  EXPECT_THAT(ResolveConfig(family, problem, config({{"BLOCK", 64}})),
              StatusIs(absl::StatusCode::kInvalidArgument, "config: missing 'ELEMS'"));
  EXPECT_THAT(ResolveConfig(family, problem, config({{"BLOCK", 96}, {"ELEMS", 1}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "config: BLOCK=96 is not a value of the param (64, 128, 256, 512, 1024, "
                       "2048)"));
  EXPECT_THAT(
      ResolveConfig(family, problem, config({{"BLOCK", 64}, {"ELEMS", 1}, {"X", 1}})),
      StatusIs(absl::StatusCode::kInvalidArgument, "config: 'X' is not a param of family 'axpy'"));
  EXPECT_THAT(ResolveConfig(family, problem, config({{"BLOCK", 1024}, {"ELEMS", 8}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "config fails constraints[0] 'BLOCK * ELEMS <= 4096'"));
  EXPECT_THAT(ResolveConfig(family, problem, config({{"BLOCK", 2048}, {"ELEMS", 1}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "config cannot run: launch.block[0]: 'BLOCK' = 2048 is above the CUDA "
                       "limit (1024)"));
}

// A recipe a client compiles must be what the job compiled: the same name
// expression and options as each variant of the expansion, for both
// bindings and every dtype.
TEST(CompileInputsTest, AreTheExpansionsForEveryVariant) {
  for (const auto& [file, problem] : std::vector<std::pair<std::string, v1::Problem>>{
           {"good/axpy.textproto", Problem({{"n", 10000}}, v1::FLOAT32)},
           {"good/axpy.textproto", Problem({{"n", 10000}}, v1::FLOAT16)},
           {"good/row_scale.textproto", Problem({{"rows", 100}, {"cols", 300}}, v1::FLOAT32)}}) {
    const v1::KernelFamily family = Load(file);
    ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(family, problem));
    ASSERT_FALSE(space.variants.empty());
    for (const Variant& variant : space.variants) {
      ASSERT_OK_AND_ASSIGN(CompileInputs inputs,
                           CompileInputsFor(family, variant.config, problem.dtype()));
      EXPECT_EQ(inputs.name_expression, variant.name_expression) << file;
      EXPECT_EQ(inputs.options, variant.compile_options) << file;
    }
  }
}

TEST(CompileInputsTest, RejectsWhatResolveConfigRejectsAboutTheConfig) {
  const v1::KernelFamily family = Load("good/axpy.textproto");
  v1::Config config;
  (*config.mutable_params())["BLOCK"] = 96;
  (*config.mutable_params())["ELEMS"] = 1;
  EXPECT_THAT(CompileInputsFor(family, config, v1::FLOAT32),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "config: BLOCK=96 is not a value of the param (64, 128, 256, 512, 1024, "
                       "2048)"));
  (*config.mutable_params())["BLOCK"] = 64;
  EXPECT_THAT(CompileInputsFor(family, config, v1::DTYPE_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("dtype")));
}

TEST(ConfigCountTest, IsTheProductOfValueCounts) {
  EXPECT_EQ(ConfigCount(Load("good/axpy.textproto")), 24);
  v1::KernelFamily huge;
  for (int p = 0; p < 8; ++p) {
    v1::TunableParameter* param = huge.add_params();
    for (int v = 0; v < 1000; ++v) param->add_values(v);
  }
  EXPECT_EQ(ConfigCount(huge), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace autotune::kernels
