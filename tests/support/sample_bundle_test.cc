#include "tests/support/sample_bundle.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/problem.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

// The smallest thing that passes for a cubin: an ELF header and some bytes.
std::string FakeElf(const std::string& tag) {
  return absl::StrCat(
      "\x7f"
      "ELF",
      tag);
}

SampleEntry EntryFor(int64_t batch, Variant variant = kQuickstartVariant) {
  SampleEntry entry;
  entry.batch = batch;
  entry.variant = variant;
  return entry;
}

Variant MakeVariant(v1::DType dtype, int64_t block, int64_t elems_per_thread) {
  Variant variant;
  variant.dtype = dtype;
  variant.block = block;
  variant.elems_per_thread = elems_per_thread;
  return variant;
}

SampleBundleOptions Compiled(std::vector<SampleEntry> entries,
                             std::map<Variant, std::string> cubins) {
  SampleBundleOptions options;
  options.entries = std::move(entries);
  options.cubin_kind = CubinKind::kCompiled;
  options.cubins = std::move(cubins);
  return options;
}

SampleBundleOptions Synthetic(std::vector<SampleEntry> entries, int64_t bytes) {
  SampleBundleOptions options;
  options.entries = std::move(entries);
  options.cubin_kind = CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = bytes;
  return options;
}

// Every property an importer checks, so a broken generator fails here
// rather than as an import error in someone else's test.
void ExpectSelfConsistent(const v1::CacheBundle& bundle) {
  EXPECT_EQ(bundle.format_version(), 1);
  ASSERT_THAT(bundle.families(), SizeIs(1));
  const v1::FamilyRecord& record = bundle.families(0);
  EXPECT_EQ(record.content_hash(), FamilyContentHash(record.family()));

  std::set<std::string> binaries;
  for (const v1::Binary& binary : bundle.binaries()) {
    EXPECT_EQ(binary.sha256(), Sha256Hex(binary.cubin()));
    EXPECT_EQ(binary.family_hash(), record.content_hash());
    EXPECT_TRUE(binaries.insert(binary.sha256()).second) << "binary listed twice";
  }

  std::set<std::string> keys;
  std::set<std::string> used;
  for (const v1::Entry& entry : bundle.entries()) {
    SCOPED_TRACE(entry.ShortDebugString());
    EXPECT_EQ(entry.family(), record.family().name());
    EXPECT_EQ(entry.family_hash(), record.content_hash());
    EXPECT_TRUE(binaries.contains(entry.binary_sha256()));
    used.insert(entry.binary_sha256());
    EXPECT_TRUE(keys.insert(absl::StrCat(FormatDims(entry.problem().dims()), " ",
                                         std::string(DTypeName(entry.problem().dtype())), " ",
                                         entry.device().name()))
                    .second);
    EXPECT_EQ(entry.phase(), v1::IMPORTED);
    EXPECT_EQ(entry.timing().samples(), 0) << "sample timings are not measurements";
    EXPECT_FALSE(entry.tuned_at().empty());

    // The launch covers every element, and not one block more.
    const int64_t count = entry.problem().dims().at("batch") * entry.problem().dims().at("n");
    const int64_t per_block =
        entry.config().params().at("BLOCK") * entry.config().params().at("ELEMS_PER_THREAD");
    ASSERT_THAT(entry.launch().grid(), SizeIs(1));
    ASSERT_THAT(entry.launch().block(), SizeIs(1));
    EXPECT_EQ(entry.launch().block(0), entry.config().params().at("BLOCK"));
    EXPECT_GE(entry.launch().grid(0) * per_block, count);
    EXPECT_LT((entry.launch().grid(0) - 1) * per_block, count);
  }
  EXPECT_EQ(used, binaries) << "every binary is used by an entry";
}

TEST(VectorScaleSourceTest, IsTheFileInTheTree) {
  std::ifstream in(AUTOTUNE_VECTOR_SCALE_CU, std::ios::binary);
  ASSERT_TRUE(in) << AUTOTUNE_VECTOR_SCALE_CU;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(VectorScaleSource(), text) << "re-run cmake to re-embed the source";
  EXPECT_THAT(text, HasSubstr("extern \"C\" __global__"));
}

TEST(VectorScaleFamilyTest, DescribesTheKernel) {
  const v1::KernelFamily family = VectorScaleFamily();
  EXPECT_EQ(family.name(), "vector_scale");
  EXPECT_EQ(family.source(), VectorScaleSource());
  EXPECT_THAT(family.source(), HasSubstr(absl::StrCat(family.kernel_name(), "(")));
  EXPECT_THAT(family.source(), HasSubstr(family.reference().kernel_name()));
  EXPECT_THAT(family.description(), HasSubstr("illustrative"));

  std::map<std::string, bool> dims;
  for (const auto& dim : family.dims()) dims[dim.name()] = dim.bucketed();
  EXPECT_EQ(dims, (std::map<std::string, bool>{{"batch", true}, {"n", false}}));

  std::map<std::string, std::vector<int64_t>> params;
  for (const auto& p : family.params()) params[p.name()] = {p.values().begin(), p.values().end()};
  EXPECT_EQ(params, (std::map<std::string, std::vector<int64_t>>{{"BLOCK", {64, 128, 256, 512}},
                                                                 {"ELEMS_PER_THREAD", {1, 2, 4}}}));

  std::set<int> tolerated;
  for (const auto& t : family.tolerances()) tolerated.insert(t.dtype());
  EXPECT_EQ(tolerated, (std::set<int>{v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}));
  EXPECT_EQ(std::set<int>(family.dtypes().begin(), family.dtypes().end()), tolerated);
}

TEST(VectorScaleFamilyTest, HashChangesWithTheSource) {
  v1::KernelFamily family = VectorScaleFamily();
  const std::string hash = FamilyContentHash(family);
  EXPECT_EQ(hash, FamilyContentHash(VectorScaleFamily()));
  family.set_source(family.source() + "\n");
  EXPECT_NE(FamilyContentHash(family), hash);
}

TEST(MakeSampleBundleTest, QuickstartBundle) {
  const std::string cubin = FakeElf("quickstart");
  ASSERT_OK_AND_ASSIGN(
      v1::CacheBundle bundle,
      MakeSampleBundle(Compiled(QuickstartEntries(), {{kQuickstartVariant, cubin}})));
  ExpectSelfConsistent(bundle);
  ASSERT_THAT(bundle.binaries(), SizeIs(1));
  EXPECT_EQ(bundle.binaries(0).cubin(), cubin);
  EXPECT_EQ(bundle.binaries(0).arch(), "sm_90");

  std::vector<int64_t> batches;
  for (const v1::Entry& entry : bundle.entries()) {
    batches.push_back(entry.problem().dims().at("batch"));
    EXPECT_EQ(entry.problem().dims().at("n"), 4096);
    EXPECT_EQ(entry.problem().dtype(), v1::BFLOAT16);
    EXPECT_EQ(entry.device().name(), "NVIDIA H200");
    EXPECT_EQ(entry.device().compute_capability(), 90);
    EXPECT_EQ(entry.device().sm_count(), 132);
    EXPECT_EQ(entry.arch(), "sm_90");
    EXPECT_GT(entry.timing().median_us(), 0);
    EXPECT_GT(entry.timing().achieved_gbps(), 0);
  }
  EXPECT_EQ(batches, (std::vector<int64_t>{1, 8, 64}));
  // batch 8: 8*4096 elements in blocks of 256*2.
  EXPECT_EQ(bundle.entries(1).launch().grid(0), 64);
  EXPECT_EQ(bundle.entries(1).launch().block(0), 256);
}

TEST(MakeSampleBundleTest, LaunchCoversAPartialLastBlock) {
  SampleEntry entry = EntryFor(3, MakeVariant(v1::FLOAT32, 128, 4));
  entry.n = 1000;  // 3000 elements, 512 per block: 5 full blocks and a partial one
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle,
                       MakeSampleBundle(Compiled({entry}, {{entry.variant, FakeElf("fp32")}})));
  ExpectSelfConsistent(bundle);
  EXPECT_EQ(bundle.entries(0).launch().grid(0), 6);
  EXPECT_EQ(bundle.entries(0).launch().block(0), 128);
}

TEST(MakeSampleBundleTest, OneBinaryPerCompiledVariant) {
  const Variant fp16 = MakeVariant(v1::FLOAT16, 128, 4);
  std::vector<SampleEntry> entries = QuickstartEntries();
  entries.push_back(EntryFor(8, fp16));
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle,
                       MakeSampleBundle(Compiled(entries, {{kQuickstartVariant, FakeElf("bf16")},
                                                           {fp16, FakeElf("fp16")}})));
  ExpectSelfConsistent(bundle);
  EXPECT_THAT(bundle.binaries(), SizeIs(2));
  EXPECT_NE(bundle.entries(3).binary_sha256(), bundle.entries(0).binary_sha256());
}

TEST(MakeSampleBundleTest, RejectsWhatAnImporterWould) {
  const std::map<Variant, std::string> cubins = {{kQuickstartVariant, FakeElf("x")}};
  const auto fails_with = [&](std::vector<SampleEntry> entries, const std::string& message) {
    EXPECT_THAT(MakeSampleBundle(Compiled(std::move(entries), cubins)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
  };
  fails_with({EntryFor(0)}, "batch and n must be positive");
  fails_with({EntryFor(1, MakeVariant(v1::FLOAT64, 256, 2))}, "no dtype FLOAT64");
  fails_with({EntryFor(1, MakeVariant(v1::BFLOAT16, 96, 2))}, "BLOCK=96");
  fails_with({EntryFor(1, MakeVariant(v1::BFLOAT16, 256, 3))}, "ELEMS_PER_THREAD=3");
  fails_with({EntryFor(8), EntryFor(8)}, "entries[1]: a second entry");
  fails_with({EntryFor(1, MakeVariant(v1::BFLOAT16, 512, 2))},
             "no compiled cubin for bf16 BLOCK=512");

  EXPECT_THAT(
      MakeSampleBundle(Compiled(QuickstartEntries(), {{kQuickstartVariant, "not a cubin"}})),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an ELF image")));
  EXPECT_THAT(MakeSampleBundle(Synthetic(QuickstartEntries(), 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 8")));
}

TEST(MakeSampleBundleTest, SyntheticBinariesAreDeterministicAndFlagged) {
  const SampleBundleOptions options = Synthetic(QuickstartEntries(), 100);
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle first, MakeSampleBundle(options));
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle second, MakeSampleBundle(options));
  ExpectSelfConsistent(first);
  ASSERT_THAT(first.binaries(), SizeIs(1));  // all three entries share a variant
  EXPECT_EQ(first.binaries(0).cubin().size(), 100u);
  EXPECT_EQ(first.binaries(0).cubin(), second.binaries(0).cubin());
  EXPECT_THAT(first.binaries(0).compile_log(), HasSubstr("not a loadable cubin"));
  EXPECT_NE(first.binaries(0).cubin().substr(0, 4),
            "\x7f"
            "ELF");
}

TEST(MakeSyntheticBundleTest, DistinctProblemsAndCubins) {
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, MakeSyntheticBundle(500, 64));
  ExpectSelfConsistent(bundle);
  EXPECT_THAT(bundle.entries(), SizeIs(500));
  ASSERT_THAT(bundle.binaries(), SizeIs(500));
  std::set<v1::DType> dtypes;
  std::set<int64_t> blocks;
  for (const v1::Binary& binary : bundle.binaries()) EXPECT_EQ(binary.cubin().size(), 64u);
  for (const v1::Entry& entry : bundle.entries()) {
    dtypes.insert(entry.problem().dtype());
    blocks.insert(entry.config().params().at("BLOCK"));
  }
  EXPECT_THAT(dtypes, SizeIs(3));
  EXPECT_THAT(blocks, SizeIs(4));

  ASSERT_OK_AND_ASSIGN(v1::CacheBundle empty, MakeSyntheticBundle(0, 64));
  EXPECT_THAT(empty.entries(), SizeIs(0));
  EXPECT_THAT(empty.families(), SizeIs(1));
  EXPECT_THAT(MakeSyntheticBundle(-1, 64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entries must be >= 0")));
}

TEST(MakeSampleBundleTest, SurvivesJson) {
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, MakeSyntheticBundle(20, 33));
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(bundle, &json).ok());
  v1::CacheBundle parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(bundle, parsed));
  ExpectSelfConsistent(parsed);
}

// The store's importer is the judge of a bundle: the samples must go in
// whole, be found again byte for byte, and a second import must change nothing.
class StoreImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    cache::StoreOptions options;
    options.path = dir_.File("cache.db");
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open(options));
  }
  TempDir dir_;  // declared first: removed after the store has closed
  std::unique_ptr<cache::Store> store_;
};

TEST_F(StoreImportTest, TakesTheQuickstartBundle) {
  const std::string cubin = FakeElf("quickstart cubin");
  ASSERT_OK_AND_ASSIGN(
      v1::CacheBundle bundle,
      MakeSampleBundle(Compiled(QuickstartEntries(), {{kQuickstartVariant, cubin}})));
  ASSERT_OK_AND_ASSIGN(v1::ImportResponse first, store_->Import(bundle, /*replace=*/false));
  EXPECT_EQ(first.families(), 1);
  EXPECT_EQ(first.binaries(), 1);
  EXPECT_EQ(first.entries(), 3);

  cache::EntryKey key{.family = "vector_scale",
                      .family_hash = bundle.families(0).content_hash(),
                      .problem = bundle.entries(1).problem(),
                      .device = "NVIDIA H200"};
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> found, store_->FindEntry(key));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->problem().dims().at("batch"), 8);
  EXPECT_EQ(found->config().params().at("BLOCK"), 256);
  ASSERT_OK_AND_ASSIGN(v1::Binary binary, store_->GetBinary(found->binary_sha256()));
  EXPECT_EQ(binary.cubin(), cubin);
  ASSERT_OK_AND_ASSIGN(cache::FamilyRecord family, store_->GetFamily("vector_scale"));
  EXPECT_EQ(family.family.source(), VectorScaleSource());

  ASSERT_OK_AND_ASSIGN(v1::ImportResponse again, store_->Import(bundle, /*replace=*/false));
  EXPECT_EQ(again.entries(), 0);
  EXPECT_EQ(again.entries_skipped(), 3);
}

TEST_F(StoreImportTest, TakesASyntheticBundle) {
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, MakeSyntheticBundle(300, 128));
  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response, store_->Import(bundle, /*replace=*/false));
  EXPECT_EQ(response.entries(), 300);
  EXPECT_EQ(response.binaries(), 300);
  ASSERT_OK_AND_ASSIGN(cache::StoreStats stats, store_->Stats());
  EXPECT_EQ(stats.binary_bytes, 300 * 128);
}

}  // namespace
}  // namespace autotune::testing
