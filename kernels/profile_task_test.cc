#include "kernels/profile_task.h"

#include <string>
#include <vector>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"

namespace autotune::kernels {
namespace {

namespace wv1 = ::autotune::worker::v1;
using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

class MakeProfileTaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(family_,
                         LoadFamilyFile(AUTOTUNE_KERNELS_DIR "/builtin/rmsnorm.textproto"));
    problem_ = Problem(4, 1024);
    ASSERT_OK_AND_ASSIGN(space_, ExpandSearchSpace(family_, problem_));
    ASSERT_GE(space_.variants.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      compiled_.push_back({.variant = &space_.variants[i],
                           .kernel = {.cubin = "cubin" + std::to_string(i), .lowered_name = "f"},
                           .id = ""});
    }
  }

  static v1::Problem Problem(int64_t rows, int64_t hidden) {
    v1::Problem problem;
    (*problem.mutable_dims())["rows"] = rows;
    (*problem.mutable_dims())["hidden"] = hidden;
    problem.set_dtype(v1::BFLOAT16);
    return problem;
  }

  v1::KernelFamily family_;
  v1::Problem problem_;
  SearchSpace space_;
  std::vector<CompiledVariant> compiled_;
  CompiledKernel reference_{.cubin = "ref", .lowered_name = "rmsnorm_reference"};
};

TEST_F(MakeProfileTaskTest, DescribesTheProblemTheKernelsAndTheTolerance) {
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                       MakeProfileTask(family_, problem_, space_, reference_, compiled_, {}));
  EXPECT_EQ(task.context(), "rmsnorm hidden=1024,rows=4 bf16");
  ASSERT_EQ(task.buffers_size(), 3);
  EXPECT_EQ(task.buffers(0).name(), "x");
  EXPECT_EQ(task.buffers(0).dtype(), v1::BFLOAT16);
  EXPECT_EQ(task.buffers(0).elements(), 4 * 1024);
  EXPECT_EQ(task.buffers(0).role(), v1::IN);
  EXPECT_EQ(task.buffers(0).fill().kind(), v1::Fill::NORMAL);
  EXPECT_EQ(task.buffers(1).elements(), 1024);
  EXPECT_EQ(task.buffers(2).role(), v1::OUT);
  ASSERT_EQ(task.scalars_size(), 3);
  EXPECT_EQ(task.scalars(0).dtype(), v1::FLOAT32);
  EXPECT_DOUBLE_EQ(task.scalars(0).value(), 1e-6);
  EXPECT_EQ(task.scalars(1).dtype(), v1::INT32);
  EXPECT_DOUBLE_EQ(task.scalars(1).value(), 4);
  EXPECT_DOUBLE_EQ(task.rtol(), 1.6e-2);  // the family's bf16 tolerance
  EXPECT_DOUBLE_EQ(task.atol(), 1e-4);
  EXPECT_EQ(task.seeds(), 3);
  EXPECT_EQ(task.cache_state(), v1::COLD);
  EXPECT_EQ(task.reference().cubin(), "ref");
  EXPECT_EQ(task.reference().launch().block(0), 128);
  ASSERT_EQ(task.variants_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const Variant& variant = space_.variants[i];
    EXPECT_EQ(task.variants(i).id(), std::to_string(variant.index));
    EXPECT_EQ(task.variants(i).cubin(), "cubin" + std::to_string(i));
    EXPECT_EQ(task.variants(i).label(), ConfigLabel(family_, variant.config));
    EXPECT_EQ(task.variants(i).launch().grid(0), variant.launch.grid(0));
    EXPECT_DOUBLE_EQ(task.variants(i).bytes_per_call(), (2.0 * 4 * 1024 + 1024) * 2);
  }
  EXPECT_THAT(task.variants(0).label(), HasSubstr("VEC="));
  EXPECT_THAT(task.variants(0).label(), HasSubstr(" CACHE_ROW="));
}

TEST_F(MakeProfileTaskTest, TheSeedIsStablePerProblemAndDiffersBetweenProblems) {
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask a,
                       MakeProfileTask(family_, problem_, space_, reference_, compiled_, {}));
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask b,
                       MakeProfileTask(family_, problem_, space_, reference_, compiled_, {}));
  EXPECT_EQ(a.base_seed(), b.base_seed());
  const v1::Problem other = Problem(8, 1024);
  ASSERT_OK_AND_ASSIGN(SearchSpace other_space, ExpandSearchSpace(family_, other));
  std::vector<CompiledVariant> other_compiled = {{.variant = &other_space.variants[0],
                                                  .kernel = {.cubin = "c", .lowered_name = "f"},
                                                  .id = ""}};
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask c, MakeProfileTask(family_, other, other_space, reference_,
                                                           other_compiled, {}));
  EXPECT_NE(a.base_seed(), c.base_seed());
}

TEST_F(MakeProfileTaskTest, SettingsReachTheTask) {
  ProfileSettings settings;
  settings.validate_only = true;
  settings.seeds = 5;
  settings.launch_timeout_s = 2;
  settings.cache_state = v1::HOT;
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                       MakeProfileTask(family_, problem_, space_, reference_, compiled_, settings));
  EXPECT_TRUE(task.validate_only());
  EXPECT_EQ(task.seeds(), 5);
  EXPECT_DOUBLE_EQ(task.launch_timeout_s(), 2);
  EXPECT_EQ(task.cache_state(), v1::HOT);
}

TEST_F(MakeProfileTaskTest, RefusesWhatCannotBeValidated) {
  ProfileSettings two_seeds;
  two_seeds.seeds = 2;
  EXPECT_THAT(MakeProfileTask(family_, problem_, space_, reference_, compiled_, two_seeds),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 3 seeds")));
  EXPECT_THAT(MakeProfileTask(family_, problem_, space_, reference_, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no variants")));
  EXPECT_THAT(
      MakeProfileTask(family_, problem_, space_, CompiledKernel{}, compiled_, {}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reference kernel has no cubin")));
  v1::KernelFamily no_tolerance = family_;
  no_tolerance.clear_tolerances();
  EXPECT_THAT(MakeProfileTask(no_tolerance, problem_, space_, reference_, compiled_, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no tolerance for bf16")));
}

TEST(ConfigLabelTest, FollowsTheFamilysParamOrder) {
  v1::KernelFamily family;
  family.add_params()->set_name("B");
  family.add_params()->set_name("A");
  v1::Config config;
  (*config.mutable_params())["A"] = 1;
  (*config.mutable_params())["B"] = 2;
  EXPECT_EQ(ConfigLabel(family, config), "B=2 A=1");
  EXPECT_EQ(ConfigLabel(family, v1::Config()), "reference");
}

}  // namespace
}  // namespace autotune::kernels
