#include "service/lookup/lookup_resolver.h"

#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kernels/search_space.h"
#include "proto/problem.h"
#include "service/lookup/predictions.h"
#include "tests/support/sample_bundle.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::Problem MakeProblem(int64_t batch, int64_t n, v1::DType dtype = v1::BFLOAT16) {
  v1::Problem problem;
  (*problem.mutable_dims())["batch"] = batch;
  (*problem.mutable_dims())["n"] = n;
  problem.set_dtype(dtype);
  return problem;
}

v1::Entry MakeEntry(int64_t batch, int64_t n, v1::DType dtype = v1::BFLOAT16) {
  v1::Entry entry;
  *entry.mutable_problem() = MakeProblem(batch, n, dtype);
  return entry;
}

TEST(ChooseNearestTest, PicksSmallestLogDistance) {
  std::vector<v1::Entry> candidates = {MakeEntry(1, 4096), MakeEntry(8, 4096), MakeEntry(64, 4096)};
  auto choice = ChooseNearest(MakeProblem(10, 4096), {"batch"}, candidates);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->index, 1u);
  ASSERT_EQ(choice->distance.size(), 1u);
  EXPECT_EQ(choice->distance[0].name(), "batch");
  EXPECT_EQ(choice->distance[0].requested(), 10);
  EXPECT_EQ(choice->distance[0].tuned(), 8);
  EXPECT_NEAR(choice->log2_distance, std::log2(10.0 / 8.0), 1e-9);
}

TEST(ChooseNearestTest, TieGoesToTheLargerValue) {
  // 8 and 32 are both 1.0 away from 16 in log2.
  std::vector<v1::Entry> candidates = {MakeEntry(8, 4096), MakeEntry(32, 4096)};
  auto choice = ChooseNearest(MakeProblem(16, 4096), {"batch"}, candidates);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->index, 1u);
}

TEST(ChooseNearestTest, NonBucketedDimsMustMatch) {
  std::vector<v1::Entry> candidates = {MakeEntry(8, 2048), MakeEntry(64, 4096)};
  auto choice = ChooseNearest(MakeProblem(8, 4096), {"batch"}, candidates);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->index, 1u);  // far in batch, but n matches
  EXPECT_FALSE(ChooseNearest(MakeProblem(8, 1024), {"batch"}, candidates).has_value());
}

TEST(ChooseNearestTest, DtypeMustMatch) {
  std::vector<v1::Entry> candidates = {MakeEntry(8, 4096, v1::FLOAT32)};
  EXPECT_FALSE(ChooseNearest(MakeProblem(8, 4096), {"batch"}, candidates).has_value());
}

TEST(ChooseNearestTest, NothingBucketedMeansNoNearest) {
  std::vector<v1::Entry> candidates = {MakeEntry(8, 4096)};
  EXPECT_FALSE(ChooseNearest(MakeProblem(9, 4096), {}, candidates).has_value());
}

TEST(DriverTooOldTest, ComparesMajorThenMinor) {
  EXPECT_THAT(DriverTooOld("12.8", "13.0"),
              ::testing::Optional(HasSubstr("built by NVRTC 13.0, newer than the CUDA 12.8")));
  EXPECT_TRUE(DriverTooOld("13.0", "13.1").has_value());
  EXPECT_FALSE(DriverTooOld("13.0", "13.0").has_value());
  EXPECT_FALSE(DriverTooOld("13.1", "13.0").has_value());
  EXPECT_FALSE(DriverTooOld("12.10", "12.9").has_value());
  EXPECT_FALSE(DriverTooOld("", "13.0").has_value());
  EXPECT_FALSE(DriverTooOld("12.8", "").has_value());
  EXPECT_FALSE(DriverTooOld("twelve", "13.0").has_value());
}

// The resolver over a real store holding the quick start's sample:
// vector_scale bf16 n=4096 at batch 1, 8 and 64 on an H200.
class LookupResolverStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    cache::StoreOptions options;
    options.path = dir_.File("cache.db");
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open(options));
    ASSERT_OK(Import(testing::SampleDevice()));
    resolver_ = std::make_unique<LookupResolver>(store_.get());
  }
  void TearDown() override {
    resolver_.reset();
    store_.reset();
  }

  absl::Status Import(const v1::Device& device) {
    testing::SampleBundleOptions options;
    options.entries = testing::QuickstartEntries();
    for (testing::SampleEntry& entry : options.entries) entry.device = device;
    options.cubin_kind = testing::CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 1024;
    absl::StatusOr<v1::CacheBundle> bundle = testing::MakeSampleBundle(options);
    if (!bundle.ok()) return bundle.status();
    return store_->Import(*bundle, false).status();
  }

  static v1::LookupRequest Request(int64_t batch, int64_t n = 4096,
                                   const std::string& device = "NVIDIA H200") {
    v1::LookupRequest request;
    request.set_family("vector_scale");
    *request.mutable_problem() = MakeProblem(batch, n);
    request.mutable_device()->set_name(device);
    return request;
  }

  // Imports the sample as a new version of its family, one more constraint
  // in its descriptor, its entries and binaries compiled for `arch` (empty:
  // as the sample says); returns that version's hash.
  absl::StatusOr<std::string> ImportVersionWithConstraint(const std::string& constraint,
                                                          const std::string& arch = "") {
    testing::SampleBundleOptions options;
    options.entries = testing::QuickstartEntries();
    options.cubin_kind = testing::CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 1024;
    ASSIGN_OR_RETURN(v1::CacheBundle bundle, testing::MakeSampleBundle(options));
    v1::KernelFamily* family = bundle.mutable_families(0)->mutable_family();
    family->add_constraints(constraint);
    const std::string hash = FamilyContentHash(*family);
    bundle.mutable_families(0)->set_content_hash(hash);
    for (v1::Entry& entry : *bundle.mutable_entries()) {
      entry.set_family_hash(hash);
      if (!arch.empty()) entry.set_arch(arch);
    }
    for (v1::Binary& binary : *bundle.mutable_binaries()) {
      binary.set_family_hash(hash);
      if (!arch.empty()) binary.set_arch(arch);
    }
    for (v1::Measurement& m : *bundle.mutable_measurements()) m.set_family_hash(hash);
    RETURN_IF_ERROR(store_->Import(bundle, /*replace=*/true).status());
    return hash;
  }

  // Every stored cubin's bytes replaced behind the store's back.
  void CorruptEveryBinary() { ASSERT_OK(testing::CorruptEveryStoredBinary(dir_.File("cache.db"))); }

  testing::TempDir dir_;
  std::unique_ptr<cache::Store> store_;
  std::unique_ptr<LookupResolver> resolver_;
};

TEST_F(LookupResolverStoreTest, ExactNearestMissAndCounters) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(Request(8)));
  EXPECT_EQ(exact.match(), v1::EXACT);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse nearest, resolver_->Lookup(Request(40)));
  EXPECT_EQ(nearest.match(), v1::NEAREST);
  EXPECT_EQ(nearest.entry().problem().dims().at("batch"), 64);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(Request(8, 1000)));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_THAT(miss.miss_reason(), HasSubstr("n=1000"));
  EXPECT_THAT(miss.miss_reason(), HasSubstr("3 entries exist for this family for other problems"));
  EXPECT_EQ(miss.miss_kind(), v1::MISS_NO_ENTRY);
  EXPECT_EQ(exact.miss_kind(), v1::MISS_KIND_UNSPECIFIED);
  EXPECT_EQ(resolver_->counters().exact.load(), 1);
  EXPECT_EQ(resolver_->counters().nearest.load(), 1);
  EXPECT_EQ(resolver_->counters().miss.load(), 1);
}

TEST_F(LookupResolverStoreTest, AnEntryBuiltForANewerDriverIsNotServed) {
  v1::LookupRequest old_driver = Request(8);
  old_driver.set_driver_version("12.8");  // the sample's binaries are NVRTC 13.0
  old_driver.set_include_cubin(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse refused, resolver_->Lookup(old_driver));
  EXPECT_EQ(refused.match(), v1::MISS);
  EXPECT_EQ(refused.miss_kind(), v1::MISS_DRIVER_TOO_OLD);
  EXPECT_THAT(refused.miss_reason(), HasSubstr("newer than the CUDA 12.8"));
  EXPECT_EQ(refused.entry().problem().dims().at("batch"), 8);  // its config still applies
  EXPECT_TRUE(refused.cubin().empty());
  // NEAREST is refused alike; a driver as new serves both.
  old_driver.mutable_problem()->mutable_dims()->at("batch") = 40;
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse nearest, resolver_->Lookup(old_driver));
  EXPECT_EQ(nearest.miss_kind(), v1::MISS_DRIVER_TOO_OLD);
  // What to launch, compiled here, is still for batch 40.
  const auto& params = nearest.entry().config().params();
  ASSERT_EQ(nearest.launch().grid_size(), 1);
  EXPECT_EQ(nearest.launch().grid(0),
            (40 * 4096) / (params.at("BLOCK") * params.at("ELEMS_PER_THREAD")));
  v1::LookupRequest new_driver = Request(8);
  new_driver.set_driver_version("13.0");
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse served, resolver_->Lookup(new_driver));
  EXPECT_EQ(served.match(), v1::EXACT);
  EXPECT_EQ(resolver_->counters().miss.load(), 2);
  EXPECT_EQ(resolver_->counters().exact.load(), 1);
  EXPECT_EQ(resolver_->counters().nearest.load(), 0);

  v1::BatchLookupRequest batch;
  *batch.add_lookups() = Request(8);
  batch.mutable_lookups(0)->set_driver_version("12.8");
  batch.set_include_cubin(true);
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse answers, resolver_->BatchLookup(batch));
  EXPECT_EQ(answers.results(0).response().miss_kind(), v1::MISS_DRIVER_TOO_OLD);
  EXPECT_TRUE(answers.binaries().empty());
}

TEST_F(LookupResolverStoreTest, AMissCarriesTheFamilysDefaultConfigForTheProblem) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(Request(8, 1000)));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_EQ(miss.default_config().params().at("BLOCK"), 256);
  EXPECT_EQ(miss.default_config().params().at("ELEMS_PER_THREAD"), 1);
  ASSERT_EQ(miss.default_launch().block_size(), 1);
  EXPECT_EQ(miss.default_launch().block(0), 256);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(Request(8)));
  EXPECT_FALSE(exact.has_default_config());
}

// What a loader compares with the cubin's own record of its parameters:
// vector_scale(x, y, float alpha, long long count).
TEST_F(LookupResolverStoreTest, AnswersNameTheKernelsParameterSizes) {
  for (const v1::LookupRequest& request : {Request(8), Request(40), Request(8, 1000)}) {
    ASSERT_OK_AND_ASSIGN(v1::LookupResponse answer, resolver_->Lookup(request));
    SCOPED_TRACE(v1::MatchKind_Name(answer.match()));
    EXPECT_THAT(answer.parameter_bytes(), ElementsAre(8, 8, 4, 8));
  }
}

// What a launcher checks the caller's tensors against and the scalars it
// passes: vector_scale's x and y of batch*n elements, alpha = 0.5 and
// count = batch*n, resolved for the requested problem whatever the match.
TEST_F(LookupResolverStoreTest, AnswersCarryTheArgumentsForTheRequestedProblem) {
  struct Case {
    v1::LookupRequest request;
    v1::MatchKind match;
    int64_t elements;
  };
  for (const Case& c :
       {Case{Request(8), v1::EXACT, 8 * 4096}, Case{Request(40), v1::NEAREST, 40 * 4096},
        Case{Request(8, 1000), v1::MISS, 8 * 1000}}) {
    ASSERT_OK_AND_ASSIGN(v1::LookupResponse answer, resolver_->Lookup(c.request));
    SCOPED_TRACE(v1::MatchKind_Name(answer.match()));
    EXPECT_EQ(answer.match(), c.match);
    const v1::LaunchArguments& arguments = answer.arguments();
    ASSERT_EQ(arguments.buffers_size(), 2);
    EXPECT_EQ(arguments.buffers(0).name(), "x");
    EXPECT_EQ(arguments.buffers(0).role(), v1::IN);
    EXPECT_EQ(arguments.buffers(0).dtype(), c.request.problem().dtype());
    EXPECT_THAT(arguments.buffers(0).shape(), ElementsAre(c.elements));
    EXPECT_EQ(arguments.buffers(1).name(), "y");
    EXPECT_EQ(arguments.buffers(1).role(), v1::OUT);
    ASSERT_EQ(arguments.scalars_size(), 2);
    EXPECT_EQ(arguments.scalars(0).name(), "alpha");
    EXPECT_EQ(arguments.scalars(0).dtype(), v1::FLOAT32);
    EXPECT_EQ(arguments.scalars(0).value(), 0.5);
    EXPECT_EQ(arguments.scalars(1).name(), "count");
    EXPECT_EQ(arguments.scalars(1).dtype(), v1::INT64);
    EXPECT_EQ(arguments.scalars(1).value(), static_cast<double>(c.elements));
  }
}

// Found on 2bc4d71: one BatchLookup of 100,000 misses held a core of the
// daemon for 48 s. The items past its CPU budget are answered, each, with
// RESOURCE_EXHAUSTED naming where the batch stopped.
TEST_F(LookupResolverStoreTest, ABatchStopsAnsweringAtItsCpuBudget) {
  v1::BatchLookupRequest batch;
  *batch.add_lookups() = Request(8);                                           // EXACT
  for (int64_t n = 1; n < 40; ++n) *batch.add_lookups() = Request(8, n * 32);  // misses
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse whole,
                       resolver_->BatchLookup(batch, absl::Hours(1)));
  ASSERT_EQ(whole.results_size(), 40);
  for (const v1::BatchLookupResult& result : whole.results()) {
    EXPECT_TRUE(result.has_response()) << result.error_message();
  }
  // No budget at all: the clock is read every 16 items, so 16 are answered.
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse part,
                       resolver_->BatchLookup(batch, absl::ZeroDuration()));
  ASSERT_EQ(part.results_size(), 40);
  EXPECT_EQ(part.results(0).response().match(), v1::EXACT);
  for (int i = 1; i < 16; ++i) EXPECT_EQ(part.results(i).response().match(), v1::MISS);
  for (int i = 16; i < 40; ++i) {
    EXPECT_FALSE(part.results(i).has_response());
    EXPECT_EQ(part.results(i).error_code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
    EXPECT_EQ(part.results(i).error_message(),
              absl::StrCat("lookups[", i,
                           "]: not answered: this BatchLookup used its 0 of the daemon's CPU on "
                           "its first 16 items; send the rest in another call"));
  }
}

TEST_F(LookupResolverStoreTest, TheLaunchIsForTheRequestedProblem) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(Request(8)));
  EXPECT_TRUE(MessageDifferencer::Equals(exact.launch(), exact.entry().launch()));
  // Tuned at batch 64, asked for 40: the grid covers 40 * 4096 elements.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse nearest, resolver_->Lookup(Request(40)));
  ASSERT_EQ(nearest.match(), v1::NEAREST);
  const auto& params = nearest.entry().config().params();
  const int64_t per_block = params.at("BLOCK") * params.at("ELEMS_PER_THREAD");
  ASSERT_EQ(nearest.launch().grid_size(), 1);
  EXPECT_EQ(nearest.launch().grid(0), (40 * 4096 + per_block - 1) / per_block);
  EXPECT_NE(nearest.launch().grid(0), nearest.entry().launch().grid(0));
  EXPECT_EQ(nearest.launch().block(0), params.at("BLOCK"));
}

TEST_F(LookupResolverStoreTest, ANearestEntryWhoseConfigDoesNotFitIsAMiss) {
  // A version of the family whose configs only run at batch 1 or >= 8.
  ASSERT_OK_AND_ASSIGN(const std::string hash,
                       ImportVersionWithConstraint("batch == 1 || batch >= 8"));

  v1::LookupRequest request = Request(4);  // nearest: batch 8
  request.set_family_hash(hash);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(request));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_EQ(miss.miss_kind(), v1::MISS_NEAREST_UNFIT);
  EXPECT_THAT(miss.miss_reason(), HasSubstr("tuned at batch=8"));
  EXPECT_THAT(miss.miss_reason(), HasSubstr("batch == 1 || batch >= 8"));
  EXPECT_EQ(miss.entry().problem().dims().at("batch"), 8);
  EXPECT_EQ(resolver_->counters().nearest.load(), 0);
  EXPECT_EQ(resolver_->counters().miss.load(), 1);
  request.mutable_problem()->mutable_dims()->at("batch") = 12;
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse nearest, resolver_->Lookup(request));
  EXPECT_EQ(nearest.match(), v1::NEAREST);
}

// A family whose configs need an arch-specific target (constraints on
// `arch_specific`): a NEAREST entry compiled for sm_90a fits the requested
// problem when its config is checked for the arch it was compiled for.
TEST_F(LookupResolverStoreTest, ANearestEntryIsCheckedForTheArchItWasCompiledFor) {
  ASSERT_OK_AND_ASSIGN(const std::string hash,
                       ImportVersionWithConstraint("arch == 90 && arch_specific == 1", "sm_90a"));

  v1::LookupRequest request = Request(40);  // nearest: batch 64
  request.set_family_hash(hash);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse nearest, resolver_->Lookup(request));
  EXPECT_EQ(nearest.match(), v1::NEAREST) << nearest.miss_reason();
  EXPECT_EQ(nearest.entry().arch(), "sm_90a");
}

TEST_F(LookupResolverStoreTest, ARecipeIsTheCompileOfTheAnswersConfig) {
  ASSERT_OK_AND_ASSIGN(cache::FamilyRecord record, store_->GetFamily("vector_scale"));
  v1::LookupRequest request = Request(8);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse plain, resolver_->Lookup(request));
  EXPECT_FALSE(plain.has_recipe());

  request.set_include_recipe(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(request));
  ASSERT_TRUE(exact.has_recipe());
  const v1::CompileRecipe& recipe = exact.recipe();
  EXPECT_EQ(recipe.source(), record.family.source());
  EXPECT_EQ(recipe.source_sha256(), Sha256Hex(record.family.source()));
  EXPECT_EQ(recipe.program_name(), "vector_scale.cu");
  EXPECT_TRUE(MessageDifferencer::Equals(recipe.config(), exact.entry().config()));
  // What the job compiled for that config.
  ASSERT_OK_AND_ASSIGN(
      kernels::Variant variant,
      kernels::ResolveConfig(record.family, request.problem(), exact.entry().config()));
  EXPECT_EQ(recipe.name_expression(), variant.name_expression);
  EXPECT_THAT(recipe.options(), ::testing::ElementsAreArray(variant.compile_options));

  // A MISS: the default config; too old a driver: the entry's config.
  v1::LookupRequest miss_request = Request(8, 1000);
  miss_request.set_include_recipe(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(miss_request));
  EXPECT_TRUE(MessageDifferencer::Equals(miss.recipe().config(), miss.default_config()));
  EXPECT_THAT(miss.recipe().options(), ::testing::Contains("-DBLOCK=256"));
  request.set_driver_version("12.8");
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse old_driver, resolver_->Lookup(request));
  EXPECT_EQ(old_driver.miss_kind(), v1::MISS_DRIVER_TOO_OLD);
  EXPECT_TRUE(MessageDifferencer::Equals(old_driver.recipe().config(), exact.entry().config()));

  // A batch holds each source once.
  v1::BatchLookupRequest batch;
  *batch.add_lookups() = Request(8);
  *batch.add_lookups() = Request(40);
  *batch.add_lookups() = Request(8, 1000);
  batch.set_include_recipe(true);
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse answers, resolver_->BatchLookup(batch));
  ASSERT_EQ(answers.sources_size(), 1);
  EXPECT_EQ(answers.sources().at(recipe.source_sha256()), record.family.source());
  for (const v1::BatchLookupResult& result : answers.results()) {
    EXPECT_EQ(result.response().recipe().source_sha256(), recipe.source_sha256());
    EXPECT_TRUE(result.response().recipe().source().empty());
  }
}

TEST_F(LookupResolverStoreTest, UnknownFamilyIsNotFound) {
  v1::LookupRequest request = Request(8);
  request.set_family("nope");
  EXPECT_THAT(resolver_->Lookup(request), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

TEST_F(LookupResolverStoreTest, DeviceRulesAreApplied) {
  v1::LookupRequest other = Request(8, 4096, "NVIDIA H100");
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(other));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_EQ(miss.miss_kind(), v1::MISS_OTHER_DEVICE);
  EXPECT_THAT(miss.miss_reason(), HasSubstr("tuned only on NVIDIA H200"));

  v1::LookupRequest fewer_sms = Request(8);
  fewer_sms.mutable_device()->set_sm_count(114);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse sm_miss, resolver_->Lookup(fewer_sms));
  EXPECT_EQ(sm_miss.match(), v1::MISS);
  EXPECT_THAT(sm_miss.miss_reason(), HasSubstr("132 SMs"));
  EXPECT_EQ(sm_miss.miss_kind(), v1::MISS_OTHER_DEVICE);
  // Not even a neighbour may stand in when the device differs.
  v1::LookupRequest fewer_sms_near = Request(12);
  fewer_sms_near.mutable_device()->set_sm_count(114);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse near_miss, resolver_->Lookup(fewer_sms_near));
  EXPECT_EQ(near_miss.match(), v1::MISS);
  EXPECT_EQ(near_miss.miss_kind(), v1::MISS_OTHER_DEVICE);
  EXPECT_THAT(near_miss.miss_reason(), HasSubstr("132 SMs"));

  v1::LookupRequest any = Request(8, 4096, "");
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse found, resolver_->Lookup(any));
  EXPECT_EQ(found.match(), v1::EXACT);

  v1::Device h100;
  h100.set_name("NVIDIA H100");
  h100.set_compute_capability(90);
  ASSERT_OK(Import(h100));
  EXPECT_THAT(resolver_->Lookup(any),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("NVIDIA H100")));
}

TEST_F(LookupResolverStoreTest, NewFamilySourceDoesNotServeOldEntries) {
  ASSERT_OK_AND_ASSIGN(cache::FamilyRecord old_family, store_->GetFamily("vector_scale"));
  v1::KernelFamily changed = old_family.family;
  changed.set_source(changed.source() + "\n// changed\n");
  ASSERT_OK(store_->PutFamily(changed, false).status());

  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(Request(8)));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_THAT(miss.miss_reason(), HasSubstr("other versions"));
  EXPECT_EQ(miss.miss_kind(), v1::MISS_OLDER_VERSION);
  // The old entries stay reachable by their hash.
  v1::LookupRequest by_hash = Request(8);
  by_hash.set_family_hash(old_family.content_hash);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(by_hash));
  EXPECT_EQ(exact.match(), v1::EXACT);
}

TEST_F(LookupResolverStoreTest, ExactOnlySaysWhichNeighbourItRefused) {
  v1::LookupRequest request = Request(12);
  request.set_exact_only(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver_->Lookup(request));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_EQ(miss.miss_kind(), v1::MISS_EXACT_ONLY);
  EXPECT_THAT(miss.miss_reason(), HasSubstr("the nearest tuned problem is batch=8,n=4096"));
  // Nothing near at all: an exact-only request misses for want of an entry.
  v1::LookupRequest far = Request(8, 1000);
  far.set_exact_only(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse no_entry, resolver_->Lookup(far));
  EXPECT_EQ(no_entry.miss_kind(), v1::MISS_NO_ENTRY);
}

// A lookup checks a problem exactly as a job does (proto/problem.h), bounds
// included, so the two never answer the same problem differently.
TEST_F(LookupResolverStoreTest, ProblemIsCheckedLikeAJobChecksIt) {
  v1::LookupRequest unknown = Request(8);
  (*unknown.mutable_problem()->mutable_dims())["heads"] = 4;
  (*unknown.mutable_problem()->mutable_dims())["alpha"] = 4;
  EXPECT_THAT(resolver_->Lookup(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("request.problem.dims['alpha']: not a dim of family")));
  v1::BatchLookupRequest batch;
  *batch.add_lookups() = Request(8);
  *batch.add_lookups() = Request(0);
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse answers, resolver_->BatchLookup(batch));
  ASSERT_EQ(answers.results_size(), 2);
  EXPECT_EQ(answers.results(0).error_code(), 0);
  EXPECT_EQ(answers.results(1).error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(answers.results(1).error_message(),
            "lookups[1].problem.dims['batch']: 0 is not positive");
}

TEST_F(LookupResolverStoreTest, CorruptCubinIsNeverServed) {
  v1::LookupRequest request = Request(8);
  request.set_include_cubin(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse good, resolver_->Lookup(request));
  EXPECT_EQ(good.cubin().size(), 1024u);

  ASSERT_NO_FATAL_FAILURE(CorruptEveryBinary());
  // The cubin checked before is served from memory, as it was read.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse kept, resolver_->Lookup(request));
  EXPECT_EQ(kept.cubin(), good.cubin());
  // A daemon started afresh reads it again, finds it damaged and sends it
  // to no one.
  LookupResolver restarted(store_.get());
  EXPECT_THAT(restarted.Lookup(request),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt")));
  v1::BatchLookupRequest batch;
  *batch.add_lookups() = Request(8);
  *batch.add_lookups() = Request(64);
  batch.set_include_cubin(true);
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse answers, restarted.BatchLookup(batch));
  ASSERT_EQ(answers.results_size(), 2);
  for (const v1::BatchLookupResult& result : answers.results()) {
    EXPECT_EQ(result.error_code(), static_cast<int>(absl::StatusCode::kDataLoss));
    EXPECT_THAT(result.error_message(), HasSubstr("corrupt"));
  }
  EXPECT_EQ(answers.binaries_size(), 0);
  // Without the cubin the config is still answered.
  request.set_include_cubin(false);
  EXPECT_OK(restarted.Lookup(request));
}

TEST_F(LookupResolverStoreTest, BinariesAreFetchedBySha256AndCheckedOnTheWayOut) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(Request(8)));
  const std::string sha = exact.entry().binary_sha256();
  ASSERT_EQ(sha.size(), 64u);
  const std::string absent(64, 'a');
  v1::GetBinariesRequest request;
  request.add_sha256(sha);
  request.add_sha256(absent);
  request.add_sha256(sha);  // asked twice, sent once
  ASSERT_OK_AND_ASSIGN(v1::GetBinariesResponse found, resolver_->GetBinaries(request));
  ASSERT_EQ(found.binaries_size(), 1);
  EXPECT_EQ(Sha256Hex(found.binaries().at(sha)), sha);
  EXPECT_THAT(found.missing(), ::testing::ElementsAre(absent));

  v1::GetBinariesRequest bad;
  bad.add_sha256(sha);
  bad.add_sha256(absl::AsciiStrToUpper(sha));
  EXPECT_THAT(
      resolver_->GetBinaries(bad),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("sha256[1]: '" + absl::AsciiStrToUpper(sha) + "' is not a sha256")));
  v1::GetBinariesRequest many;
  for (int i = 0; i <= kMaxBatchLookups; ++i) many.add_sha256(sha);
  EXPECT_THAT(resolver_->GetBinaries(many),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 100000")));

  // Damaged on disk after it was checked: the bytes that were checked are
  // sent, from memory. A daemon started afresh reads it again, finds it
  // damaged and fails the call: it is never sent.
  ASSERT_NO_FATAL_FAILURE(CorruptEveryBinary());
  ASSERT_OK_AND_ASSIGN(v1::GetBinariesResponse kept, resolver_->GetBinaries(request));
  EXPECT_EQ(Sha256Hex(kept.binaries().at(sha)), sha);
  LookupResolver restarted(store_.get());
  EXPECT_THAT(restarted.GetBinaries(request),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt")));
}

TEST_F(LookupResolverStoreTest, CachedEntriesFollowWritesAndInvalidation) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse first, resolver_->Lookup(Request(8)));
  ASSERT_EQ(first.match(), v1::EXACT);
  // Served again (from memory), then replaced in the store: the new config
  // is what the next lookup sees.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse again, resolver_->Lookup(Request(8)));
  EXPECT_EQ(again.entry().config().params().at("BLOCK"),
            first.entry().config().params().at("BLOCK"));
  v1::Entry changed = first.entry();
  (*changed.mutable_config()->mutable_params())["BLOCK"] = 512;
  ASSERT_OK(store_->PutEntry(changed));
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse after, resolver_->Lookup(Request(8)));
  EXPECT_EQ(after.entry().config().params().at("BLOCK"), 512);

  v1::EntryFilter filter;
  filter.set_family("vector_scale");
  *filter.mutable_problem() = MakeProblem(8, 4096);
  ASSERT_OK(store_->Invalidate(filter, /*dry_run=*/false).status());
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse gone, resolver_->Lookup(Request(8)));
  EXPECT_EQ(gone.match(), v1::NEAREST);

  // A miss is remembered too (the store has no entry), until a write: the
  // entry stored after it is what the next lookup sees.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse again_gone, resolver_->Lookup(Request(8)));
  EXPECT_EQ(again_gone.match(), v1::NEAREST);
  ASSERT_OK(store_->PutEntry(changed));
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse back, resolver_->Lookup(Request(8)));
  EXPECT_EQ(back.match(), v1::EXACT);
  EXPECT_EQ(back.entry().config().params().at("BLOCK"), 512);
}

// An import and an invalidation of 32 entries (on a device of their own),
// over and over, while batches
// ask for all 32: every batch sees all of them from one import, or none.
TEST_F(LookupResolverStoreTest, ABatchIsAnsweredFromOneStateOfTheCache) {
  constexpr int kEntries = 32;
  std::vector<v1::CacheBundle> waves;
  for (int wave = 1; wave <= 2; ++wave) {
    testing::SampleBundleOptions options;
    for (int batch = 1; batch <= kEntries; ++batch) {
      testing::SampleEntry entry;
      entry.batch = batch;
      entry.n = 8192;
      entry.device.set_name("NVIDIA B200");
      entry.median_us = wave;
      options.entries.push_back(entry);
    }
    options.cubin_kind = testing::CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 64;
    ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, testing::MakeSampleBundle(options));
    waves.push_back(std::move(bundle));
  }
  v1::BatchLookupRequest request;
  request.set_include_cubin(true);
  for (int batch = 1; batch <= kEntries; ++batch)
    *request.add_lookups() = Request(batch, 8192, "NVIDIA B200");

  std::atomic<bool> done{false};
  std::atomic<int> writes{0};
  std::thread writer([&] {
    v1::EntryFilter filter;
    filter.set_family("vector_scale");
    filter.set_device("NVIDIA B200");
    for (int i = 0; !done.load(); ++i) {
      ASSERT_OK(store_->Import(waves[i % 2], /*replace=*/true).status());
      if (i % 3 == 2) {
        ASSERT_OK(store_->Invalidate(filter, /*dry_run=*/false).status());
      }
      if (i % 5 == 4) {
        ASSERT_OK(store_->GarbageCollect(/*dry_run=*/false).status());
      }
      writes.fetch_add(1);
    }
  });
  // However the loop below ends, the writer stops and is joined.
  auto join = absl::MakeCleanup([&] {
    done = true;
    writer.join();
  });
  std::map<std::string, int> seen;  // "all wave 1", "all wave 2", "none"
  int mixed = 0;
  // Two seconds and at least 8 batches (a sanitized build on a loaded
  // machine takes seconds a batch), or until the cache has been seen in two
  // states after that, within a minute.
  const absl::Time start = absl::Now();
  int batches = 0;
  while (absl::Now() < start + absl::Seconds(60) &&
         (absl::Now() < start + absl::Seconds(2) || batches < 8 || seen.size() < 2)) {
    ++batches;
    ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse response, resolver_->BatchLookup(request));
    std::set<std::string> states;
    for (const v1::BatchLookupResult& result : response.results()) {
      ASSERT_EQ(result.error_code(), 0) << result.error_message();
      const v1::LookupResponse& answer = result.response();
      if (answer.match() == v1::MISS) {
        states.insert("none");
      } else {
        states.insert(absl::StrCat(answer.match() == v1::EXACT ? "all" : "nearest", " wave ",
                                   answer.entry().timing().median_us()));
        EXPECT_TRUE(response.binaries().contains(answer.entry().binary_sha256()));
      }
    }
    if (states.size() == 1 && !absl::StartsWith(*states.begin(), "nearest")) {
      ++seen[*states.begin()];
    } else {
      ++mixed;
    }
  }
  std::move(join).Invoke();
  EXPECT_EQ(mixed, 0);
  EXPECT_GE(writes.load(), 10);
  for (const auto& [state, count] : seen) std::printf("  %s: %d batches\n", state.c_str(), count);
  EXPECT_GE(seen.size(), 2u);  // the batches saw the cache change
}

// PREDICTED: vector_scale tuned at batch 1 for n = 1024, 4096, 16384 and
// 65536 on the sample H200, each problem's screen holding all 12 configs
// timed by a rule whose best BLOCK and ELEMS_PER_THREAD grow with n; the
// entries are those winners. An untuned n beyond either end is predicted
// the winner at that end.
class PredictionTest : public ::testing::Test {
 protected:
  static constexpr int64_t kTuned[] = {1024, 4096, 16384, 65536};

  // The rule's median: the nearer BLOCK and ELEMS_PER_THREAD are to what n
  // wants, the faster.
  static double MedianUs(int64_t n, int64_t block, int64_t elems) {
    const double log_n = std::log2(static_cast<double>(n));
    const double want_block = 6 + (log_n - 10) / 2;
    const double want_elems = (log_n - 10) / 3;
    return 10 * (1 + std::abs(std::log2(static_cast<double>(block)) - want_block) +
                 0.5 * std::abs(std::log2(static_cast<double>(elems)) - want_elems));
  }

  void SetUp() override {
    cache::StoreOptions options;
    options.path = dir_.File("cache.db");
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open(options));
    ASSERT_OK(Import(std::size(kTuned)));
    predictions_ = std::make_unique<Predictions>(store_.get());
    resolver_ = std::make_unique<LookupResolver>(store_.get(), predictions_.get());
  }
  void TearDown() override {
    resolver_.reset();
    predictions_.reset();
    store_.reset();
  }

  // The first `problems` of kTuned, each with its screen and its winner.
  absl::Status Import(size_t problems) {
    testing::SampleBundleOptions options;
    options.cubin_kind = testing::CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 1024;
    std::vector<v1::Measurement> screens;
    for (size_t i = 0; i < problems; ++i) {
      const int64_t n = kTuned[i];
      testing::SampleEntry best;
      best.n = n;
      best.variant.dtype = v1::FLOAT32;
      double fastest = 0;
      for (int64_t block : {64, 128, 256, 512}) {
        for (int64_t elems : {1, 2, 4}) {
          const double us = MedianUs(n, block, elems);
          v1::Measurement& m = screens.emplace_back();
          *m.mutable_problem() = MakeProblem(1, n, v1::FLOAT32);
          *m.mutable_device() = testing::SampleDevice();
          (*m.mutable_config()->mutable_params())["BLOCK"] = block;
          (*m.mutable_config()->mutable_params())["ELEMS_PER_THREAD"] = elems;
          m.set_status(v1::OK);
          m.set_phase(v1::SCREEN);
          m.mutable_timing()->set_median_us(us);
          if (fastest == 0 || us < fastest) {
            fastest = us;
            best.variant.block = block;
            best.variant.elems_per_thread = elems;
          }
        }
      }
      best.median_us = fastest;
      options.entries.push_back(best);
    }
    ASSIGN_OR_RETURN(v1::CacheBundle bundle, testing::MakeSampleBundle(options));
    for (v1::Measurement& m : screens) {
      m.set_family(bundle.families(0).family().name());
      m.set_family_hash(bundle.families(0).content_hash());
      *bundle.add_measurements() = std::move(m);
    }
    return store_->Import(bundle, /*replace=*/true).status();
  }

  static v1::LookupRequest Request(int64_t n, const std::string& device = "NVIDIA H200") {
    v1::LookupRequest request;
    request.set_family("vector_scale");
    *request.mutable_problem() = MakeProblem(1, n, v1::FLOAT32);
    request.mutable_device()->set_name(device);
    return request;
  }

  // The lookup once the model its first answer asked for is learned.
  absl::StatusOr<v1::LookupResponse> LookupLearned(const v1::LookupRequest& request) {
    ASSIGN_OR_RETURN(v1::LookupResponse first, resolver_->Lookup(request));
    predictions_->WaitUntilIdle();
    return resolver_->Lookup(request);
  }

  static std::pair<int64_t, int64_t> ConfigOf(const v1::LookupResponse& response) {
    return {response.entry().config().params().at("BLOCK"),
            response.entry().config().params().at("ELEMS_PER_THREAD")};
  }

  testing::TempDir dir_;
  std::unique_ptr<cache::Store> store_;
  std::unique_ptr<Predictions> predictions_;
  std::unique_ptr<LookupResolver> resolver_;
};

TEST_F(PredictionTest, AnUntunedProblemIsPredictedOnceTheModelIsLearned) {
  v1::LookupRequest request = Request(262144);
  request.set_include_cubin(true);
  request.set_include_recipe(true);
  // The first lookup asks for the model and misses, saying so.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse first, resolver_->Lookup(request));
  EXPECT_EQ(first.match(), v1::MISS);
  EXPECT_EQ(first.miss_kind(), v1::MISS_NO_ENTRY);
  EXPECT_THAT(first.miss_reason(), HasSubstr("is being learned"));
  predictions_->WaitUntilIdle();

  ASSERT_OK_AND_ASSIGN(v1::LookupResponse large, resolver_->Lookup(request));
  ASSERT_EQ(large.match(), v1::PREDICTED) << large.miss_reason();
  EXPECT_EQ(ConfigOf(large), std::make_pair(int64_t{512}, int64_t{4}));
  EXPECT_EQ(large.entry().problem().dims().at("n"), 65536);  // the winner it is
  EXPECT_EQ(large.miss_kind(), v1::MISS_KIND_UNSPECIFIED);
  EXPECT_TRUE(large.miss_reason().empty());
  // Launched for the requested n: 262144 / (512 * 4) blocks.
  ASSERT_EQ(large.launch().grid_size(), 1);
  EXPECT_EQ(large.launch().grid(0), 128);
  EXPECT_EQ(large.arguments().scalars(1).value(), 262144);  // count = batch*n
  EXPECT_FALSE(large.cubin().empty());                      // the winner's binary
  EXPECT_EQ(large.recipe().config().params().at("BLOCK"), 512);
  EXPECT_TRUE(large.has_default_config());  // for a client that does not know PREDICTED
  EXPECT_EQ(large.prediction().problems(), 4);
  EXPECT_EQ(large.prediction().measurements(), 48);
  EXPECT_EQ(large.prediction().ranked(), 4);
  EXPECT_EQ(large.prediction().device(), "NVIDIA H200");
  EXPECT_GT(large.prediction().predicted_us(), 0);

  ASSERT_OK_AND_ASSIGN(v1::LookupResponse small, resolver_->Lookup(Request(256)));
  ASSERT_EQ(small.match(), v1::PREDICTED) << small.miss_reason();
  EXPECT_EQ(ConfigOf(small), std::make_pair(int64_t{64}, int64_t{1}));
  EXPECT_EQ(resolver_->counters().predicted.load(), 2);
  EXPECT_EQ(resolver_->counters().miss.load(), 1);

  // A tuned problem is still EXACT.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse exact, resolver_->Lookup(Request(4096)));
  EXPECT_EQ(exact.match(), v1::EXACT);
}

TEST_F(PredictionTest, NoPredictionForAnExactOnlyRequestAnUnnamedOrUntunedDevice) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse learned, LookupLearned(Request(262144)));
  ASSERT_EQ(learned.match(), v1::PREDICTED) << learned.miss_reason();

  v1::LookupRequest exact_only = Request(262144);
  exact_only.set_exact_only(true);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse refused, resolver_->Lookup(exact_only));
  EXPECT_EQ(refused.match(), v1::MISS);

  ASSERT_OK_AND_ASSIGN(v1::LookupResponse any_device, resolver_->Lookup(Request(262144, "")));
  EXPECT_EQ(any_device.match(), v1::MISS);

  // Nothing tuned on the H100: its model has nothing to learn from.
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse other,
                       LookupLearned(Request(262144, "NVIDIA H100 80GB HBM3")));
  EXPECT_EQ(other.match(), v1::MISS);
  EXPECT_THAT(other.miss_reason(), HasSubstr("0 problems of vector_scale tuned on NVIDIA H100"));

  // A client whose driver is older than the winner's compiler.
  v1::LookupRequest old_driver = Request(262144);
  old_driver.set_driver_version("12.8");
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse too_old, resolver_->Lookup(old_driver));
  EXPECT_EQ(too_old.match(), v1::MISS);
  EXPECT_THAT(too_old.miss_reason(), HasSubstr("newer than the CUDA 12.8"));
}

// Nothing tuned on an H100: the H200's problems (the same compute
// capability) predict for it, and the answer says where they were measured.
TEST_F(PredictionTest, ADeviceOfTheSameArchPredictsWhereNothingIsTuned) {
  v1::LookupRequest request = Request(262144, "NVIDIA H100 80GB HBM3");
  request.mutable_device()->set_compute_capability(90);
  request.mutable_device()->set_sm_count(132);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse learned, LookupLearned(request));
  ASSERT_EQ(learned.match(), v1::PREDICTED) << learned.miss_reason();
  EXPECT_EQ(learned.prediction().device(), "NVIDIA H200");
  EXPECT_EQ(learned.entry().device().name(), "NVIDIA H200");
  EXPECT_EQ(ConfigOf(learned), std::make_pair(int64_t{512}, int64_t{4}));
  EXPECT_EQ(learned.prediction().problems(), 4);

  // Another architecture, or a device that does not say its own: no prediction.
  request.mutable_device()->set_compute_capability(80);
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse other_arch, LookupLearned(request));
  EXPECT_EQ(other_arch.match(), v1::MISS);
  request.mutable_device()->clear_compute_capability();
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse unknown_arch, LookupLearned(request));
  EXPECT_EQ(unknown_arch.match(), v1::MISS);
}

TEST_F(PredictionTest, ANewEntryRetiresTheModelUntilItIsLearnedAgain) {
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse learned, LookupLearned(Request(262144)));
  ASSERT_EQ(learned.match(), v1::PREDICTED) << learned.miss_reason();
  ASSERT_EQ(learned.prediction().problems(), 4);
  // The store's entries change: the model learned before is not served.
  testing::SampleBundleOptions options;
  options.cubin_kind = testing::CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = 1024;
  testing::SampleEntry entry;
  entry.n = 100;
  entry.variant = {
      .dtype = v1::FLOAT32, .block = 128, .elems_per_thread = 1};  // a config of its own
  options.entries.push_back(entry);
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, testing::MakeSampleBundle(options));
  ASSERT_OK(store_->Import(bundle, false).status());
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse stale, resolver_->Lookup(Request(262144)));
  EXPECT_EQ(stale.match(), v1::MISS);
  EXPECT_THAT(stale.miss_reason(), HasSubstr("is being learned"));
  predictions_->WaitUntilIdle();
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse again, resolver_->Lookup(Request(262144)));
  ASSERT_EQ(again.match(), v1::PREDICTED) << again.miss_reason();
  // The new entry has no screen: still four problems learned from; its
  // config is ranked too (a config two entries share is ranked once).
  EXPECT_EQ(again.prediction().problems(), 4);
  EXPECT_EQ(again.prediction().ranked(), 5);
}

TEST(PredictionsTest, TooFewTunedProblemsAreNotPredictedFrom) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<cache::Store> store,
                       cache::Store::Open({.path = dir.File("cache.db")}));
  testing::SampleBundleOptions options;
  options.cubin_kind = testing::CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = 1024;
  for (int64_t n : {1024, 4096}) {
    testing::SampleEntry entry;
    entry.n = n;
    options.entries.push_back(entry);
  }
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, testing::MakeSampleBundle(options));
  ASSERT_OK(store->Import(bundle, false).status());
  Predictions predictions(store.get());
  LookupResolver resolver(store.get(), &predictions);
  v1::LookupRequest request;
  request.set_family("vector_scale");
  *request.mutable_problem() = MakeProblem(1, 99);
  request.mutable_device()->set_name("NVIDIA H200");
  ASSERT_OK(resolver.Lookup(request).status());
  predictions.WaitUntilIdle();
  ASSERT_OK_AND_ASSIGN(v1::LookupResponse miss, resolver.Lookup(request));
  EXPECT_EQ(miss.match(), v1::MISS);
  EXPECT_THAT(miss.miss_reason(), HasSubstr("2 problems of vector_scale tuned on NVIDIA H200, 3 "
                                            "needed to predict from"));
}

}  // namespace
}  // namespace autotune::service
