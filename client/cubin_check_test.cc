// The checks of what a client is served, over cubins the real NVRTC
// compiles here and damaged copies of them; no GPU is needed.
#include "client/cubin_check.h"

#include <cstring>
#include <string>

#include "base/sha256.h"
#include "base/status_matchers.h"
#include "client/kernel_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kSource[] = R"(
extern "C" __global__ void scale(float* y, const float* x, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2 * x[i];
}
)";

// A cubin of kSource for `arch`, or empty when NVRTC is not here.
std::string Cubin(const std::string& arch) {
  v1::CompileRecipe recipe;
  recipe.set_source_sha256(Sha256Hex(kSource));
  recipe.set_program_name("scale.cu");
  recipe.set_name_expression("scale");
  absl::StatusOr<LocalBinary> binary = CompileRecipe(recipe, kSource, arch);
  return binary.ok() ? binary->cubin : std::string();
}

void Put16(std::string& bytes, size_t offset, uint16_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

TEST(CubinCheckTest, NvrtcsCubinsNameTheirArchAndRunOnTheirMajor) {
  const std::string sm90 = Cubin("sm_90");
  if (sm90.empty()) GTEST_SKIP() << "NVRTC is not here";
  for (const auto& [arch, sm] : {std::pair{"sm_75", 75},
                                 {"sm_80", 80},
                                 {"sm_86", 86},
                                 {"sm_90", 90},
                                 {"sm_90a", 90},
                                 {"sm_100", 100},
                                 {"sm_120", 120}}) {
    SCOPED_TRACE(arch);
    absl::StatusOr<int> named = CubinArch(Cubin(arch));
    ASSERT_OK(named.status());
    EXPECT_EQ(*named, sm);
  }
  EXPECT_OK(CheckCubinHeader(sm90, 90));
  EXPECT_OK(CheckCubinHeader(Cubin("sm_80"), 86));  // same major, older
  EXPECT_THAT(CheckCubinHeader(Cubin("sm_86"), 80),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("built for sm_86, which a device of compute capability 8.0 "
                                 "does not run")));
  EXPECT_THAT(CheckCubinHeader(Cubin("sm_80"), 90),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("built for sm_80")));
  EXPECT_THAT(CheckCubinHeader(Cubin("sm_100"), 90),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("built for sm_100")));
}

// A served cubin whose kernel takes other parameters than the family
// declares would make the driver copy the wrong bytes from the caller's
// arguments: refused, naming the parameter.
TEST(CubinCheckTest, ParametersOtherThanTheFamilysAreRefused) {
  const std::string cubin = Cubin("sm_90");
  if (cubin.empty()) GTEST_SKIP() << "NVRTC is not here";
  const auto sizes = [](std::initializer_list<int64_t> values) {
    return google::protobuf::RepeatedField<int64_t>(values.begin(), values.end());
  };
  EXPECT_OK(CheckParameters(cubin, "scale", sizes({8, 8, 8})));
  EXPECT_OK(CheckParameters(cubin, "scale", sizes({})));  // an answer without the list
  EXPECT_THAT(CheckParameters(cubin, "scale", sizes({8, 8, 4})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameter 2 of kernel 'scale' is 8 bytes; the answer's family "
                                 "passes 4 there")));
  EXPECT_THAT(CheckParameters(cubin, "scale", sizes({8, 128, 8, 8})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the kernel 'scale' takes 3 parameters (8, 8, 8 bytes); the "
                                 "answer's family passes 4 (8, 128, 8, 8 bytes)")));
  EXPECT_THAT(CheckParameters(cubin, "attacker_symbol", sizes({8, 8, 8})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the cubin has no kernel 'attacker_symbol'")));
  EXPECT_THAT(
      CheckParameters("not a cubin", "scale", sizes({8, 8, 8})),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("its parameters cannot be read")));
}

// Found on 2bc4d71 (issue 44): a tuner's import stored bytes that are not
// a cubin, and the loader handed them to the driver.
TEST(CubinCheckTest, DamagedCopiesAreRefusedNamingTheCheck) {
  const std::string good = Cubin("sm_90");
  if (good.empty()) GTEST_SKIP() << "NVRTC is not here";
  struct Damage {
    const char* name;
    std::string bytes;
    const char* message;
  };
  std::string elf32 = good;
  elf32[4] = 1;
  std::string big_endian = good;
  big_endian[5] = 2;
  std::string x86 = good;
  Put16(x86, 18, 62);
  std::string sections_past_the_end = good;
  Put16(sections_past_the_end, 60, 0xffff);
  std::string other_sm = good;
  other_sm[49] = 100;  // e_flags' SM byte (ELF ABI 8)
  for (const Damage& damage : {
           Damage{"empty", "", "0 bytes, shorter than an ELF64 header"},
           Damage{"truncated", good.substr(0, 40), "40 bytes, shorter than an ELF64 header"},
           Damage{"text", std::string(100, 'x'), "no ELF magic"},
           Damage{"elf32", elf32, "EI_CLASS is 1, not ELF64"},
           Damage{"big endian", big_endian, "EI_DATA is 2, not little-endian"},
           Damage{"x86-64", x86, "e_machine is 62, not EM_CUDA (190)"},
           Damage{"sections", sections_past_the_end, "65535 section headers"},
           Damage{"sm_100", other_sm, "built for sm_100"},
       }) {
    SCOPED_TRACE(damage.name);
    EXPECT_THAT(CheckCubinHeader(damage.bytes, 90),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(damage.message)));
  }
}

// An H100's limits.
DeviceLimits H100() {
  DeviceLimits limits;
  limits.compute_capability = 90;
  limits.max_grid[0] = 2147483647;
  limits.max_grid[1] = 65535;
  limits.max_grid[2] = 65535;
  limits.max_block[0] = 1024;
  limits.max_block[1] = 1024;
  limits.max_block[2] = 64;
  limits.max_threads_per_block = 1024;
  limits.max_dynamic_shared_bytes = 232448;
  return limits;
}

v1::LaunchDims Launch(std::vector<int64_t> grid, std::vector<int64_t> block, int64_t shared) {
  v1::LaunchDims launch;
  for (int64_t g : grid) launch.add_grid(g);
  for (int64_t b : block) launch.add_block(b);
  launch.set_dynamic_shared_bytes(shared);
  return launch;
}

TEST(CubinCheckTest, ALaunchTheDeviceRunsPasses) {
  EXPECT_OK(CheckLaunch(Launch({2147483647, 65535, 65535}, {32, 32, 1}, 232448), H100()));
  v1::LaunchDims with_map = Launch({8}, {128}, 0);
  v1::TensorMapLayout* map = with_map.add_tensor_maps();
  map->set_buffer(0);
  map->set_argument(3);
  map->set_dtype(v1::FLOAT32);
  map->add_shape(64);
  map->add_shape(64);
  map->add_box(8);
  map->add_box(8);
  EXPECT_OK(CheckLaunch(with_map, H100()));
}

// Found on 2bc4d71 (issue 44): an imported entry's launch was served and
// launched as it came.
TEST(CubinCheckTest, ALaunchOutsideTheDevicesLimitsIsRefused) {
  struct Case {
    v1::LaunchDims launch;
    const char* message;
  };
  v1::LaunchDims map_late = Launch({1}, {32}, 0);
  map_late.add_tensor_maps()->set_buffer(7);
  map_late.mutable_tensor_maps(0)->set_argument(3);
  v1::LaunchDims huge_map = Launch({1}, {32}, 0);
  v1::TensorMapLayout* map = huge_map.add_tensor_maps();
  map->set_buffer(0);
  map->set_argument(2);
  map->set_dtype(v1::FLOAT32);
  map->add_shape(int64_t{1} << 40);
  map->add_box(8);
  for (const Case& c : {
           Case{Launch({}, {32}, 0), "0 grid and 1 block values"},
           Case{Launch({0}, {32}, 0), "grid[0] = 0, outside the device's 1 to 2147483647"},
           Case{Launch({1, 65536}, {32}, 0), "grid[1] = 65536"},
           Case{Launch({1}, {1025}, 0), "block[0] = 1025"},
           // The issue's planted launch.
           Case{Launch({2147483647, 65535, 65535}, {1024, 1024, 64}, int64_t{1} << 40),
                "the block's 67108864 threads are more than the device's 1024"},
           Case{Launch({1}, {64, 32}, 0),
                "the block's 2048 threads are more than the device's 1024"},
           Case{Launch({1}, {32}, int64_t{1} << 40), "dynamic_shared_bytes = 1099511627776"},
           Case{Launch({1}, {32}, -1), "dynamic_shared_bytes = -1"},
           Case{map_late, "tensor map 0 is parameter 3 over buffer 7"},
           Case{huge_map, "tensor map 0: "},
       }) {
    SCOPED_TRACE(c.message);
    EXPECT_THAT(CheckLaunch(c.launch, H100()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

}  // namespace
}  // namespace autotune::client
