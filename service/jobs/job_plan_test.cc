#include "service/jobs/job_plan.h"

#include <functional>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/manifest.h"
#include "kernels/profile_task.h"
#include "kernels/search_space.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/jobs/job_options.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

class JobPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(v1::KernelFamily axpy,
                         kernels::LoadFamilyFile(KERNELS_TESTDATA "/good/axpy.textproto"));
    auto record = std::make_shared<cache::FamilyRecord>();
    record->content_hash = FamilyContentHash(axpy);
    record->family = std::move(axpy);
    families_["axpy"] = std::move(record);
  }

  static v1::JobSpec Spec(std::vector<int64_t> sizes) {
    v1::JobSpec spec;
    v1::ManifestItem* item = spec.mutable_manifest()->add_items();
    item->set_family("axpy");
    v1::ManifestItem::DimValues* n = item->add_dims();
    n->set_name("n");
    for (int64_t size : sizes) n->add_values(size);
    item->add_dtypes(v1::FLOAT32);
    return spec;
  }

  std::map<std::string, std::shared_ptr<const cache::FamilyRecord>> families_;
  PlanTarget target_{.arch = "sm_90", .nvrtc_version = "13.0", .limits = {}};
};

// Found on e01f360: the variant limit was checked after the whole plan was
// built; a job of 12.6M variants grew the daemon to 8.5 GB. Found on
// 2bc4d71: it was still checked as the plan grew, after the whole manifest
// was expanded; 2^20 problems cost 6.5 min of CPU and 3.7 GB.
TEST_F(JobPlanTest, TheVariantLimitIsKeptByArithmeticBeforeAnyProblemIsBuilt) {
  // axpy: 24 configs, 21 of them pass its constraint (BLOCK * ELEMS <=
  // 4096), 19 fit a device.
  PlanTarget target = target_;
  target.max_job_variants = 72;  // 3 x 24: planned without evaluating a constraint
  ASSERT_OK_AND_ASSIGN(JobPlan whole, PlanJob(Spec({1024, 2048, 4096}), families_, target));
  EXPECT_EQ(whole.variants, 57);
  target.max_job_variants = 63;  // 3 x 21: the constraint evaluated once
  ASSERT_OK(PlanJob(Spec({1024, 2048, 4096}), families_, target).status());
  target.max_job_variants = 62;
  target.max_job_variants_setting = "max_job_variants (62)";
  EXPECT_THAT(PlanJob(Spec({1024, 2048, 4096}), families_, target),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "the job may have 63 variants (its 3 problems times the configs their "
                       "families' params and constraints allow), more than the 62 the daemon's "
                       "limit max_job_variants (62) allows; split it into shards (the job's "
                       "shard_index and shard_count) or narrow the manifest"));

  // A constraint on the dims is not evaluated for the bound: it needs a
  // problem. Nor is a search space built: n = 8 cannot be expanded
  // (a buffer of n - 8 elements), yet the limit is what refuses the job.
  auto narrow = std::make_shared<cache::FamilyRecord>(*families_["axpy"]);
  narrow->family.add_constraints("n >= 4096");
  narrow->family.mutable_buffers(0)->set_shape(0, "n - 8");
  families_["axpy"] = narrow;
  EXPECT_THAT(PlanJob(Spec({8, 2048, 4096}), families_, target),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("may have 63 variants")));
  target.max_job_variants = 0;
  EXPECT_THAT(PlanJob(Spec({8, 2048, 4096}), families_, target),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n=8")));
}

TEST_F(JobPlanTest, AShardIsBoundedByItsOwnProblems) {
  v1::JobSpec spec = Spec({1024, 2048, 4096, 8192, 16384, 32768});
  PlanTarget target = target_;
  target.max_job_variants = 5 * 21;  // the whole manifest may have 6 x 21
  EXPECT_THAT(PlanJob(spec, families_, target),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("may have 126 variants")));
  spec.mutable_options()->set_shard_count(2);
  for (int index = 0; index < 2; ++index) {
    spec.mutable_options()->set_shard_index(index);
    ASSERT_OK_AND_ASSIGN(JobPlan shard, PlanJob(spec, families_, target));
    EXPECT_LT(shard.problems.size(), 6u);
  }
}

TEST_F(JobPlanTest, TheProblemLimitIsKeptByArithmeticShardedOrNot) {
  PlanTarget target = target_;
  target.max_problems = 3;
  ASSERT_OK(PlanJob(Spec({1024, 2048, 4096}), families_, target).status());
  v1::JobSpec spec = Spec({1024, 2048, 4096, 8192});
  const std::string refusal =
      "manifest.items: 4 problems, more than the 3 one job may hold (a job's shards each read "
      "the whole manifest); split the manifest into jobs or narrow it";
  EXPECT_THAT(PlanJob(spec, families_, target),
              StatusIs(absl::StatusCode::kResourceExhausted, refusal));
  spec.mutable_options()->set_shard_count(4);
  EXPECT_THAT(PlanJob(spec, families_, target),
              StatusIs(absl::StatusCode::kResourceExhausted, refusal));
  // The default: a manifest of 2^20 one-problem items is refused on its
  // count, the first item's problem n = 8 never expanded.
  auto narrow = std::make_shared<cache::FamilyRecord>(*families_["axpy"]);
  narrow->family.mutable_buffers(0)->set_shape(0, "n - 8");
  families_["axpy"] = narrow;
  v1::JobSpec huge;
  for (int64_t n = 8; n < 8 + (int64_t{1} << 20); ++n) {
    v1::ManifestItem* item = huge.mutable_manifest()->add_items();
    item->set_family("axpy");
    v1::ManifestItem::DimValues* dim = item->add_dims();
    dim->set_name("n");
    dim->add_values(n);
    item->add_dtypes(v1::FLOAT32);
  }
  EXPECT_THAT(PlanJob(huge, families_, target_),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat("manifest.items: 1048576 problems, more than the ",
                                              kDefaultMaxJobProblems, " one job may hold"))));
}

TEST_F(JobPlanTest, SpecChecksNameTheField) {
  EXPECT_OK(CheckJobSpec(Spec({1024})));
  v1::JobSpec empty;
  EXPECT_THAT(CheckJobSpec(empty),
              StatusIs(absl::StatusCode::kInvalidArgument, "manifest.items is empty"));
  v1::JobSpec no_family = Spec({1024});
  no_family.mutable_manifest()->add_items();
  EXPECT_THAT(CheckJobSpec(no_family),
              StatusIs(absl::StatusCode::kInvalidArgument, "manifest.items[1].family is empty"));
  v1::JobSpec shard = Spec({1024});
  shard.mutable_options()->set_shard_count(2);
  shard.mutable_options()->set_shard_index(2);
  EXPECT_THAT(CheckJobSpec(shard), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("options.shard_index 2 is not in")));
  v1::JobSpec serial = Spec({1024});
  serial.mutable_options()->set_serial_candidates(8);
  EXPECT_OK(CheckJobSpec(serial));
  serial.mutable_options()->set_serial_candidates(257);
  EXPECT_THAT(CheckJobSpec(serial), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("options.serial_candidates is 257")));
  EXPECT_THAT(CheckJobSpec(serial),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("(0 = ", kDefaultSerialCandidates, ")"))));
  // Found on e01f360: a job could hold a compile worker for any time.
  v1::JobSpec slow = Spec({1024});
  slow.mutable_options()->set_compile_timeout_s(kMaxCompileTimeoutS);
  EXPECT_OK(CheckJobSpec(slow));
  slow.mutable_options()->set_compile_timeout_s(kMaxCompileTimeoutS + 1);
  EXPECT_THAT(CheckJobSpec(slow),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.compile_timeout_s is 601, not in 0..600 (0 = 120 s)"));
  v1::JobSpec wait = Spec({1024});
  wait.mutable_options()->set_quiet_wait_s(-1);
  EXPECT_THAT(CheckJobSpec(wait), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("options.quiet_wait_s is -1")));
  v1::JobSpec cap = Spec({1024});
  cap.mutable_options()->set_serial_max_s(std::numeric_limits<double>::quiet_NaN());
  EXPECT_THAT(CheckJobSpec(cap), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("options.serial_max_s is nan")));
}

TEST_F(JobPlanTest, SearchOptionsAreCheckedAndAnItemsSearchReplacesTheJobs) {
  v1::JobSpec spec = Spec({1024, 2048});
  spec.mutable_options()->mutable_search()->set_max_variants(-1);
  EXPECT_THAT(CheckJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.search.max_variants is -1, not in 0..1048576 (0 = no limit)"));
  spec.mutable_options()->mutable_search()->set_max_variants(0);
  spec.mutable_manifest()->mutable_items(0)->mutable_search()->set_max_fraction(2);
  EXPECT_THAT(CheckJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "manifest.items[0].search.max_fraction is 2, not in 0..1 (0 = no limit)"));
  spec.mutable_manifest()->mutable_items(0)->mutable_search()->set_max_fraction(0);
  spec.mutable_options()->mutable_search()->set_max_seconds(-3);
  EXPECT_THAT(CheckJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.search.max_seconds is -3, not in 0..86400 (0 = no limit)"));
  spec.mutable_options()->mutable_search()->set_max_seconds(
      std::numeric_limits<double>::infinity());
  EXPECT_THAT(CheckJobSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("options.search.max_seconds is inf")));
  spec.mutable_options()->mutable_search()->set_max_seconds(0);
  v1::JobSpec compile_only = Spec({1024});
  compile_only.mutable_options()->set_compile_only(true);
  compile_only.mutable_options()->mutable_search()->set_strategy(v1::RANDOM);
  EXPECT_THAT(CheckJobSpec(compile_only),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("options.search: a compile_only job measures nothing")));
  compile_only.mutable_options()->clear_search();
  EXPECT_OK(CheckJobSpec(compile_only));
  compile_only.mutable_options()->set_force(true);
  EXPECT_THAT(CheckJobSpec(compile_only),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.force: a compile_only job measures nothing; leave it out"));
  compile_only.mutable_options()->set_serial_candidates(4);
  compile_only.mutable_options()->set_serial_max_s(2);
  EXPECT_THAT(CheckJobSpec(compile_only),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.serial_candidates, options.force, options.serial_max_s: a "
                       "compile_only job measures nothing; leave them out"));

  // The job says random with 5 variants; the second item (n = 4096) says
  // exhaustive with 25% of the space: axpy has 19 valid configs.
  v1::JobSpec mixed = Spec({1024, 2048});
  mixed.mutable_options()->mutable_search()->set_strategy(v1::RANDOM);
  mixed.mutable_options()->mutable_search()->set_max_variants(5);
  mixed.mutable_options()->mutable_search()->set_seed(9);
  v1::ManifestItem* second = mixed.mutable_manifest()->add_items();
  *second = mixed.manifest().items(0);
  second->mutable_dims(0)->clear_values();
  second->mutable_dims(0)->add_values(4096);
  second->clear_search();
  second->mutable_search()->set_strategy(v1::EXHAUSTIVE);
  second->mutable_search()->set_max_fraction(0.25);
  ASSERT_OK(CheckJobSpec(mixed));
  ASSERT_OK_AND_ASSIGN(JobPlan plan, PlanJob(mixed, families_, target_));
  ASSERT_EQ(plan.problems.size(), 3u);
  EXPECT_EQ(plan.problems[0].search.kind, SearchKind::kRandom);
  EXPECT_EQ(plan.problems[0].search.seed, 9u);
  EXPECT_EQ(plan.problems[0].budget, 5);
  EXPECT_EQ(plan.problems[2].search.kind, SearchKind::kExhaustive);
  EXPECT_EQ(plan.problems[2].budget, 5);  // ceil(0.25 x 19)
  EXPECT_EQ(plan.variants, 57);
  EXPECT_EQ(plan.to_measure, 15);
}

// A search's report: `hints` configs it started from, `measured` of `space`.
v1::SearchReport Ran(int32_t hints, int64_t measured, int64_t space) {
  v1::SearchReport report;
  report.set_hints(hints);
  report.set_measured(measured);
  report.set_space(space);
  return report;
}

TEST(ResolveSearchTest, UnspecifiedIsExhaustiveForSmallSpacesAndTheModelAbove) {
  EXPECT_EQ(ResolveSearch({}, kExhaustiveSearchUpTo).kind, SearchKind::kExhaustive);
  EXPECT_EQ(ResolveSearch({}, kExhaustiveSearchUpTo + 1).kind, SearchKind::kModel);
  v1::SearchOptions random;
  random.set_strategy(v1::RANDOM);
  EXPECT_EQ(ResolveSearch(random, 10).kind, SearchKind::kRandom);
  EXPECT_EQ(DescribeSearch(ResolveSearch(random, 10), Ran(0, 3, 10)),
            "random, seed 0: 3 of 10 variants measured (30.0%)");
  EXPECT_EQ(DescribeSearch({}, Ran(0, 10, 10)), "exhaustive: 10 of 10 variants measured");
  v1::SearchOptions model;
  model.set_strategy(v1::MODEL);
  model.set_seed(7);
  EXPECT_EQ(DescribeSearch(ResolveSearch(model, 6904), Ran(1, 448, 6904)),
            "model, seed 7, seeded with 1 winning config of tuned problems: 448 of 6904 variants "
            "measured "
            "(6.5%)");
  EXPECT_EQ(DescribeSearch(ResolveSearch(model, 6904), Ran(3, 448, 6904)),
            "model, seed 7, seeded with 3 winning configs of tuned problems: 448 of 6904 variants "
            "measured "
            "(6.5%)");
  model.set_max_seconds(90);
  v1::SearchReport timed = Ran(0, 448, 6904);
  timed.set_out_of_time(true);
  EXPECT_EQ(DescribeSearch(ResolveSearch(model, 6904), timed),
            "model, seed 7: 448 of 6904 variants measured (6.5%); stopped at its time budget of "
            "90 s");
}

TEST_F(JobPlanTest, ArchComesFromTheManifestTheGpuOrTheDefault) {
  worker::v1::DeviceInfo h200;
  h200.set_name("NVIDIA H200");
  h200.set_compute_capability(90);
  v1::Manifest manifest;
  ASSERT_OK_AND_ASSIGN(std::string from_gpu, ResolveArch(manifest, &h200, "sm_80"));
  EXPECT_EQ(from_gpu, "sm_90");
  ASSERT_OK_AND_ASSIGN(std::string from_default, ResolveArch(manifest, nullptr, "sm_80"));
  EXPECT_EQ(from_default, "sm_80");
  // The architecture-specific features of the GPU present (wgmma on sm_90a).
  manifest.set_arch("sm_90a");
  ASSERT_OK_AND_ASSIGN(std::string specific, ResolveArch(manifest, &h200, "sm_80"));
  EXPECT_EQ(specific, "sm_90a");
  manifest.set_arch("sm_100a");
  EXPECT_THAT(ResolveArch(manifest, &h200, "sm_80"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'sm_100a' cannot run on NVIDIA H200 (sm_90)")));
  manifest.set_arch("compute_90");
  EXPECT_THAT(ResolveArch(manifest, nullptr, "sm_80"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a GPU architecture")));
}

TEST_F(JobPlanTest, VariantsCompiledTheSameWayInSeveralProblemsAreCompiledOnce) {
  ASSERT_OK_AND_ASSIGN(JobPlan plan, PlanJob(Spec({1024, 4096}), families_, target_));
  ASSERT_EQ(plan.problems.size(), 2u);
  // 21 configs pass the constraint; 2 need more threads than a block has.
  EXPECT_EQ(plan.problems[0].space.variants.size(), 19u);
  EXPECT_EQ(plan.variants, 38);
  // The size is not a compile option: both problems share every compile,
  // the reference included.
  EXPECT_EQ(plan.units.size(), 20u);
  EXPECT_EQ(plan.problems[0].variant_keys, plan.problems[1].variant_keys);
  EXPECT_EQ(plan.problems[0].reference_key, plan.problems[1].reference_key);
  for (const CompileUnit& unit : plan.units) EXPECT_EQ(unit.arch, "sm_90");
}

// Found: reference.source was checked and then ignored; the reference was
// compiled from the family's source.
TEST_F(JobPlanTest, AReferenceWithASourceOfItsOwnIsCompiledAndKeyedFromIt) {
  ASSERT_OK_AND_ASSIGN(JobPlan shared, PlanJob(Spec({1024}), families_, target_));
  auto record = std::make_shared<cache::FamilyRecord>(*families_["axpy"]);
  const std::string reference_source =
      "extern \"C\" __global__ void axpy_reference(const float* x, float* y, float a, long "
      "long n) {}\n";
  record->family.mutable_reference()->set_source(reference_source);
  families_["axpy"] = record;
  ASSERT_OK_AND_ASSIGN(JobPlan own, PlanJob(Spec({1024}), families_, target_));
  ASSERT_EQ(own.problems.size(), 1u);
  const std::string& key = own.problems[0].reference_key;
  EXPECT_NE(key, shared.problems[0].reference_key);
  int references = 0;
  for (const CompileUnit& unit : own.units) {
    const worker::v1::CompileTask task = CompileTaskOf(unit);
    if (unit.key == key) {
      ++references;
      EXPECT_TRUE(unit.reference);
      EXPECT_EQ(task.source(), reference_source);
    } else {
      EXPECT_EQ(task.source(), record->family.source());
    }
  }
  EXPECT_EQ(references, 1);
}

TEST_F(JobPlanTest, TheGpusReportedLimitsShapeTheSearchSpace) {
  worker::v1::DeviceInfo small;
  small.set_max_threads_per_block(256);
  small.set_max_shared_bytes_per_block(48 * 1024);
  const kernels::DeviceLimits limits = LimitsOf(&small);
  EXPECT_EQ(limits.max_threads_per_block, 256);
  EXPECT_EQ(limits.max_dynamic_shared_bytes, 48 * 1024);
  EXPECT_EQ(LimitsOf(nullptr).max_threads_per_block, kernels::DeviceLimits{}.max_threads_per_block);

  PlanTarget target = target_;
  target.limits = limits;
  ASSERT_OK_AND_ASSIGN(JobPlan plan, PlanJob(Spec({4096}), families_, target));
  // BLOCK 64, 128 and 256 with 4 ELEMS each fit 256 threads.
  EXPECT_EQ(plan.problems[0].space.variants.size(), 12u);
}

// A config whose code only sm_90a runs is a variant of a plan compiled for
// sm_90a and of no other.
TEST_F(JobPlanTest, TheConstraintsSeeTheArchThePlanCompilesFor) {
  auto record = std::make_shared<cache::FamilyRecord>(*families_.at("axpy"));
  record->family.add_constraints("ELEMS < 8 || (arch == 90 && arch_specific == 1)");
  record->content_hash = FamilyContentHash(record->family);
  families_["axpy"] = std::move(record);
  PlanTarget target = target_;
  ASSERT_OK_AND_ASSIGN(JobPlan plain, PlanJob(Spec({4096}), families_, target));
  target.arch = "sm_90a";
  ASSERT_OK_AND_ASSIGN(JobPlan specific, PlanJob(Spec({4096}), families_, target));
  // ELEMS = 8 with BLOCK 64 to 512.
  EXPECT_EQ(specific.variants, plain.variants + 4);
  for (const kernels::Variant& variant : plain.problems[0].space.variants) {
    EXPECT_LT(variant.config.params().at("ELEMS"), 8);
  }
}

TEST_F(JobPlanTest, KeepProblemsDropsTheCompilesNoKeptProblemNeeds) {
  ASSERT_OK_AND_ASSIGN(JobPlan plan, PlanJob(Spec({1024, 4096}), families_, target_));
  KeepProblems({1}, &plan);
  ASSERT_EQ(plan.problems.size(), 1u);
  EXPECT_EQ(plan.problems[0].problem.dims().at("n"), 4096);
  EXPECT_EQ(plan.units.size(), 20u);
  // Reports name a problem the job still has, not the dropped n=1024.
  for (const CompileUnit& unit : plan.units) EXPECT_EQ(unit.problem.dims().at("n"), 4096);
  KeepProblems({}, &plan);
  EXPECT_TRUE(plan.problems.empty());
  EXPECT_TRUE(plan.units.empty());
}

TEST_F(JobPlanTest, KeepProblemsDropsTheUnitsOfTheProblemsItDrops) {
  v1::JobSpec spec = Spec({4096});
  spec.mutable_manifest()->mutable_items(0)->add_dtypes(v1::FLOAT16);
  ASSERT_OK_AND_ASSIGN(JobPlan plan, PlanJob(spec, families_, target_));
  ASSERT_EQ(plan.problems.size(), 2u);
  // The dtype is a compile option: each problem has its own 20 compiles.
  EXPECT_EQ(plan.units.size(), 40u);
  const std::string fp16_reference = plan.problems[1].reference_key;
  ASSERT_EQ(plan.problems[1].problem.dtype(), v1::FLOAT16);
  KeepProblems({1}, &plan);
  ASSERT_EQ(plan.units.size(), 20u);
  bool has_reference = false;
  for (const CompileUnit& unit : plan.units) {
    EXPECT_EQ(unit.problem.dtype(), v1::FLOAT16);
    has_reference = has_reference || unit.key == fp16_reference;
  }
  EXPECT_TRUE(has_reference);
}

TEST_F(JobPlanTest, AProblemTheFamilyRejectsIsNamed) {
  EXPECT_THAT(PlanJob(Spec({0}), families_, target_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "items[0].dims[0].values[0]: 0 is not positive"));
}

TEST_F(JobPlanTest, SameButSpaceAllowsOnlyWhatChoosesAmongVariantsToDiffer) {
  const v1::KernelFamily& family = families_["axpy"]->family;
  v1::KernelFamily wider = family;
  wider.mutable_params(0)->add_values(4096);
  wider.add_constraints("1");
  wider.set_description("a new value");
  EXPECT_TRUE(SameButSpace(family, wider));

  v1::KernelFamily new_source = family;
  new_source.set_source(family.source() + "\n// changed\n");
  EXPECT_FALSE(SameButSpace(family, new_source));
  v1::KernelFamily new_tolerance = family;
  new_tolerance.add_tolerances()->set_rtol(0.5);
  EXPECT_FALSE(SameButSpace(family, new_tolerance));
  v1::KernelFamily new_options = family;
  new_options.add_compile_options("-DEXTRA=1");
  EXPECT_FALSE(SameButSpace(family, new_options));
  v1::KernelFamily warm = family;
  warm.set_cache_state(v1::HOT);
  EXPECT_FALSE(SameButSpace(family, warm));
}

// ResolveJobOptions (job_options.h): a job's options resolved once, onto the
// daemon's.

// Found on 2bc4d71: variant_timeout_s had no upper bound (a job could hold
// a GPU for a year a launch), nor had search.max_seconds.
TEST(CheckJobOptionsTest, EveryNumberHasARangeAndItsErrorNamesIt) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::function<void(v1::JobOptions&, double)> set;
    double max;
    std::string refused;  // the error for max + 1
  };
  const std::vector<Case> cases = {
      {[](v1::JobOptions& o, double v) { o.set_variant_timeout_s(v); }, kMaxVariantTimeoutS,
       "options.variant_timeout_s is 61, not in 0..60 (0 = the daemon's variant timeout)"},
      {[](v1::JobOptions& o, double v) { o.set_compile_timeout_s(v); }, kMaxCompileTimeoutS,
       "options.compile_timeout_s is 601, not in 0..600 (0 = 120 s)"},
      {[](v1::JobOptions& o, double v) { o.set_serial_candidates(static_cast<int>(v)); },
       kMaxSerialCandidates,
       absl::StrCat(
           "options.serial_candidates is 257, not in 0..256 (0 = ", kDefaultSerialCandidates, ")")},
      {[](v1::JobOptions& o, double v) { o.set_quiet_wait_s(v); }, kMaxQuietWaitS,
       "options.quiet_wait_s is 604801, not in 0..604800 (0 = the daemon's quiet wait)"},
      {[](v1::JobOptions& o, double v) { o.set_serial_max_s(v); }, kMaxSerialMaxS,
       "options.serial_max_s is 3601, not in 0..3600 (0 = the worker's default)"},
      {[](v1::JobOptions& o, double v) { o.set_candidate_band(v); }, kMaxCandidateBand,
       "options.candidate_band is 11, not in 0..10 (0 = 0.1)"},
      {[](v1::JobOptions& o, double v) { o.set_serial_noise(v); }, kMaxSerialNoise,
       "options.serial_noise is 1.5, not in 0..0.5 (0 = the worker's default)"},
      {[](v1::JobOptions& o, double v) { o.mutable_search()->set_max_seconds(v); },
       kMaxSearchSeconds, "options.search.max_seconds is 86401, not in 0..86400 (0 = no limit)"},
      {[](v1::JobOptions& o, double v) { o.mutable_search()->set_max_fraction(v); }, 1,
       "options.search.max_fraction is 2, not in 0..1 (0 = no limit)"},
      {[](v1::JobOptions& o, double v) {
         o.mutable_search()->set_max_variants(static_cast<int64_t>(v));
       },
       static_cast<double>(kernels::kMaxConfigsPerFamily),
       "options.search.max_variants is 1048577, not in 0..1048576 (0 = no limit)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.refused);
    v1::JobOptions options;
    c.set(options, c.max);
    EXPECT_OK(CheckJobOptions(options));
    c.set(options, c.max + 1);
    EXPECT_THAT(CheckJobOptions(options), StatusIs(absl::StatusCode::kInvalidArgument, c.refused));
    c.set(options, -1);
    EXPECT_THAT(CheckJobOptions(options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(" is -1, not in 0..")));
    if (c.max == kMaxSerialCandidates || c.max >= kernels::kMaxConfigsPerFamily) continue;
    for (double value : {nan, inf}) {
      c.set(options, value);
      EXPECT_THAT(CheckJobOptions(options),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(", not in 0..")));
    }
  }
  v1::JobOptions shards;
  shards.set_shard_count(kernels::kMaxManifestProblems + 1);
  EXPECT_THAT(CheckJobOptions(shards),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "options.shard_index 0 is not in 0..shard_count-1 (shard_count 1048577, "
                       "at most 1048576)"));
}

TEST(ResolveJobOptionsTest, ZerosAreTheDefaults) {
  const ResolvedJobOptions resolved = ResolveJobOptions(v1::JobOptions(), JobRunnerOptions());
  EXPECT_EQ(resolved.screen.launch_timeout_s, kernels::kDefaultLaunchTimeoutS);
  EXPECT_EQ(resolved.compile_timeout, absl::Seconds(kDefaultCompileTimeoutS));
  EXPECT_EQ(resolved.quiet_wait, absl::Seconds(kDefaultQuietWaitS));
  EXPECT_EQ(resolved.candidates.max_count, kDefaultSerialCandidates);
  EXPECT_EQ(resolved.candidates.min_count, kDefaultMinSerialCandidates);
  EXPECT_EQ(resolved.candidates.band, kDefaultCandidateBand);
  EXPECT_FALSE(resolved.force);
  // The rounds' limits stay zero: the worker resolves them.
  EXPECT_EQ(resolved.rounds.max_seconds(), 0);
  EXPECT_EQ(resolved.rounds.target_noise(), 0);
  const kernels::SerialRule rule = kernels::ResolveSerialRule(resolved.rounds);
  EXPECT_EQ(rule.max_seconds, kernels::kDefaultSerialMaxS);
  EXPECT_EQ(rule.target_noise, kernels::kDefaultSerialNoise);
  EXPECT_EQ(rule.min_rounds, kernels::kDefaultSerialMinRounds);
  // The screen's timing is short and fixed, whatever the job gives.
  EXPECT_GT(resolved.screen.timing_budget_s, 0);
  EXPECT_LT(resolved.screen.timing_budget_s, kernels::kDefaultTimingBudgetS);
  EXPECT_GT(resolved.screen.min_samples, 0);
  EXPECT_GT(resolved.screen.warmup_s, 0);
}

TEST(ResolveJobOptionsTest, ZerosFallBackToTheDaemonsOptions) {
  JobRunnerOptions daemon;
  daemon.variant_timeout_s = 3;
  daemon.compile_timeout = absl::Seconds(30);
  daemon.quiet_wait = absl::Seconds(45);
  const ResolvedJobOptions resolved = ResolveJobOptions(v1::JobOptions(), daemon);
  EXPECT_EQ(resolved.screen.launch_timeout_s, 3);
  EXPECT_EQ(resolved.compile_timeout, absl::Seconds(30));
  EXPECT_EQ(resolved.quiet_wait, absl::Seconds(45));
}

TEST(ResolveJobOptionsTest, ValuesTheJobGivesWin) {
  JobRunnerOptions daemon;
  daemon.variant_timeout_s = 3;
  daemon.compile_timeout = absl::Seconds(30);
  daemon.quiet_wait = absl::Seconds(45);
  v1::JobOptions job;
  job.set_variant_timeout_s(2.5);
  job.set_compile_timeout_s(7);
  job.set_quiet_wait_s(1.5);
  job.set_serial_candidates(4);
  job.set_candidate_band(0.25);
  job.set_serial_max_s(9);
  job.set_serial_noise(0.01);
  job.set_force(true);
  const ResolvedJobOptions resolved = ResolveJobOptions(job, daemon);
  EXPECT_EQ(resolved.screen.launch_timeout_s, 2.5);
  EXPECT_EQ(resolved.compile_timeout, absl::Seconds(7));
  EXPECT_EQ(resolved.quiet_wait, absl::Milliseconds(1500));
  EXPECT_EQ(resolved.candidates.max_count, 4);
  EXPECT_EQ(resolved.candidates.min_count, kDefaultMinSerialCandidates);  // not a job option
  EXPECT_EQ(resolved.candidates.band, 0.25);
  EXPECT_EQ(resolved.rounds.max_seconds(), 9);
  EXPECT_EQ(resolved.rounds.target_noise(), 0.01);
  EXPECT_TRUE(resolved.force);
  // The screen's timing is not the job's to set.
  EXPECT_EQ(resolved.screen.timing_budget_s,
            ResolveJobOptions(v1::JobOptions(), daemon).screen.timing_budget_s);
}

TEST(NameSettingTest, TheCoreNamesASettingAndTheDaemonMayAddHowItIsSet) {
  EXPECT_EQ(NameSetting("max_job_variants", "20000", nullptr), "max_job_variants (20000)");
  EXPECT_EQ(
      NameSetting("max_job_variants", "1",
                  [](absl::string_view setting) { return absl::StrCat("autotuned --", setting); }),
      "max_job_variants (1; autotuned --max_job_variants)");
  EXPECT_EQ(NameSetting("max_job_variants", "1", [](absl::string_view) { return ""; }),
            "max_job_variants (1)");
}

}  // namespace
}  // namespace autotune::service
