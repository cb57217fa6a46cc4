// The fault-injection families load and validate like any family, agree
// with the table in fault_cases.h, keep every config of that table through
// constraints and the search space's device limits, and compile for sm_90
// with the real NVRTC. Needs no GPU: what the profiler makes of them is
// tested by the GPU suite (tests/gpu).
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "tests/faults/fault_cases.h"

namespace autotune::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::UnorderedElementsAreArray;

constexpr char kFaultsDir[] = AUTOTUNE_FAULTS_DIR;

std::string DescriptorPath(const FaultFamily& fault) {
  return absl::StrCat(kFaultsDir, "/", fault.name, ".textproto");
}

TEST(FaultFamiliesTest, DirectoryHoldsExactlyTheTabledFamilies) {
  ASSERT_OK_AND_ASSIGN(std::vector<v1::KernelFamily> families,
                       kernels::LoadFamilyDirectory(kFaultsDir));
  std::vector<std::string> loaded, tabled;
  for (const v1::KernelFamily& family : families) loaded.push_back(family.name());
  for (const FaultFamily& fault : FaultFamilies()) tabled.push_back(fault.name);
  EXPECT_THAT(loaded, UnorderedElementsAreArray(tabled));
}

class FaultFamilyTest : public ::testing::TestWithParam<FaultFamily> {};

TEST_P(FaultFamilyTest, DescriptorAgreesWithTheTable) {
  const FaultFamily& fault = GetParam();
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, kernels::LoadFamilyFile(DescriptorPath(fault)));
  EXPECT_EQ(family.name(), fault.name);
  EXPECT_EQ(family.source_file(), fault.name + ".cu");
  std::vector<v1::DType> dtypes;
  for (int dtype : family.dtypes()) dtypes.push_back(static_cast<v1::DType>(dtype));
  EXPECT_THAT(dtypes, ElementsAreArray(fault.dtypes));
  std::vector<int64_t> tabled;
  for (const auto& [value, status] : fault.expected) tabled.push_back(value);
  const v1::TunableParameter* param = nullptr;
  for (const v1::TunableParameter& candidate : family.params()) {
    if (candidate.name() == fault.fault_param) param = &candidate;
  }
  ASSERT_NE(param, nullptr) << fault.name << " has no param " << fault.fault_param;
  EXPECT_THAT(std::vector<int64_t>(param->values().begin(), param->values().end()),
              UnorderedElementsAreArray(tabled));
  // A fault family is useful only beside a correct config of its own.
  std::set<v1::VariantStatus> statuses;
  for (const auto& [value, status] : fault.expected) statuses.insert(status);
  EXPECT_TRUE(statuses.count(v1::OK)) << fault.name;
  EXPECT_GE(statuses.size(), 2u) << fault.name;
}

TEST_P(FaultFamilyTest, EveryConfigSurvivesTheSearchSpace) {
  const FaultFamily& fault = GetParam();
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, kernels::LoadFamilyFile(DescriptorPath(fault)));
  for (v1::DType dtype : fault.dtypes) {
    SCOPED_TRACE(v1::DType_Name(dtype));
    ASSERT_OK_AND_ASSIGN(kernels::SearchSpace space,
                         kernels::ExpandSearchSpace(family, FaultProblem(dtype)));
    EXPECT_EQ(space.after_constraints, space.total_configs);
    std::vector<std::string> dropped;
    for (const auto& [reason, count] : space.dropped) {
      dropped.push_back(absl::StrCat(count, " x ", reason));
    }
    EXPECT_TRUE(dropped.empty()) << absl::StrJoin(dropped, "; ");
    ASSERT_EQ(static_cast<int64_t>(space.variants.size()), space.total_configs);
    std::map<int64_t, int> per_value;
    for (const kernels::Variant& variant : space.variants) {
      EXPECT_NE(ExpectedStatus(fault, variant.config), v1::VARIANT_STATUS_UNSPECIFIED)
          << variant.config.ShortDebugString();
      ++per_value[variant.config.params().at(fault.fault_param)];
    }
    EXPECT_EQ(per_value.size(), fault.expected.size());
  }
}

// The GPU suite's memory test runs fault_unwritten with a buffer larger than
// any device (up to 2^38 elements); BLOCK=256 must still fit the grid limit.
TEST(FaultFamiliesTest, UnwrittenExpandsForAProblemLargerThanAnyDevice) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, kernels::LoadFamilyFile(absl::StrCat(
                                                    kFaultsDir, "/fault_unwritten.textproto")));
  ASSERT_OK_AND_ASSIGN(
      kernels::SearchSpace space,
      kernels::ExpandSearchSpace(family, FaultProblem(v1::FLOAT32, int64_t{1} << 38)));
  bool found = false;
  for (const kernels::Variant& variant : space.variants) {
    if (variant.config.params().at("BLOCK") == 256 && variant.config.params().at("SKIP") == 0) {
      found = true;
      EXPECT_EQ(variant.buffers[0].bytes, int64_t{4} << 38);
    }
  }
  EXPECT_TRUE(found);
}

TEST_P(FaultFamilyTest, EveryVariantAndTheReferenceCompileForSm90) {
  const FaultFamily& fault = GetParam();
  ASSERT_OK_AND_ASSIGN(const kernels::Nvrtc* nvrtc, kernels::Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, kernels::LoadFamilyFile(DescriptorPath(fault)));
  std::set<std::string> keys;
  for (v1::DType dtype : fault.dtypes) {
    ASSERT_OK_AND_ASSIGN(kernels::SearchSpace space,
                         kernels::ExpandSearchSpace(family, FaultProblem(dtype)));
    std::vector<kernels::CompileRequest> requests;
    requests.push_back({.source = family.source(),
                        .program_name = family.source_file(),
                        .name_expression = space.reference_name,
                        .options = space.reference_compile_options,
                        .arch = "sm_90"});
    for (const kernels::Variant& variant : space.variants) {
      requests.push_back({.source = family.source(),
                          .program_name = family.source_file(),
                          .name_expression = variant.name_expression,
                          .options = variant.compile_options,
                          .arch = "sm_90"});
    }
    for (const kernels::CompileRequest& request : requests) {
      if (!keys.insert(kernels::CompileKey(request, nvrtc->version())).second) continue;
      const std::string what =
          absl::StrCat(request.name_expression, " ", absl::StrJoin(request.options, " "));
      kernels::CompileResult result = kernels::Compile(*nvrtc, request);
      EXPECT_EQ(result.status, kernels::CompileStatus::kOk) << what << "\n" << result.log;
      EXPECT_FALSE(result.lowered_name.empty()) << what;
      EXPECT_FALSE(absl::StrContains(result.log, "warning")) << what << "\n" << result.log;
    }
  }
  std::printf("%s: %zu distinct kernels compiled\n", fault.name.c_str(), keys.size());
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultFamilyTest, ::testing::ValuesIn(FaultFamilies()),
                         [](const ::testing::TestParamInfo<FaultFamily>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace autotune::testing
