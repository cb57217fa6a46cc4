#include "cache/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "cache/store_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/problem.h"

namespace autotune::cache {
namespace {

using ::autotune::cache::testing::CountRows;
using ::autotune::cache::testing::EqualsProto;
using ::autotune::cache::testing::KeyOf;
using ::autotune::cache::testing::MakeBinary;
using ::autotune::cache::testing::MakeEntry;
using ::autotune::cache::testing::MakeFamily;
using ::autotune::cache::testing::MakeProblem;
using ::autotune::cache::testing::MeasurementFor;
using ::autotune::cache::testing::OpenRaw;
using ::autotune::cache::testing::OptionsFor;
using ::autotune::cache::testing::TempDir;
using ::autotune::testing::IsOk;
using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAreArray;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("cache.db");
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(OptionsFor(path_));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // Registers `family` and returns its content hash.
  std::string Register(const v1::KernelFamily& family, bool builtin = false) {
    absl::StatusOr<FamilyRecord> record = store_->PutFamily(family, builtin);
    EXPECT_TRUE(record.ok()) << record.status();
    return record.ok() ? record->content_hash : "";
  }

  std::string StoreBinary(const std::string& bytes, const std::string& nvrtc = "12.8") {
    absl::StatusOr<std::string> sha = store_->PutBinary(MakeBinary(bytes, nvrtc));
    EXPECT_TRUE(sha.ok()) << sha.status();
    return sha.ok() ? *sha : "";
  }

  std::vector<v1::Entry> AllEntries() {
    absl::StatusOr<std::vector<v1::Entry>> entries = store_->ListEntries({}, -1, 0);
    EXPECT_TRUE(entries.ok()) << entries.status();
    return entries.ok() ? *entries : std::vector<v1::Entry>{};
  }

  // Row counts of every table, read through a separate connection.
  std::map<std::string, int64_t> RowCounts() {
    auto raw = OpenRaw(path_);
    std::map<std::string, int64_t> counts;
    for (const char* table :
         {"family_versions", "families", "binaries", "entries", "measurements", "jobs"}) {
      counts[table] = CountRows(*raw, table);
    }
    return counts;
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

// ---- Families -------------------------------------------------------------------

TEST_F(StoreTest, PutFamilyStoresItUnderItsContentHashAndMakesItCurrent) {
  const v1::KernelFamily gemm = MakeFamily("gemm");
  bool changed = false;
  ASSERT_OK_AND_ASSIGN(FamilyRecord record, store_->PutFamily(gemm, /*builtin=*/true, &changed));
  EXPECT_TRUE(changed);
  EXPECT_EQ(record.content_hash, FamilyContentHash(gemm));
  EXPECT_TRUE(record.builtin);
  EXPECT_THAT(record.registered_at, HasSubstr("T"));
  EXPECT_THAT(record.family, EqualsProto(gemm));

  ASSERT_OK_AND_ASSIGN(FamilyRecord current, store_->GetFamily("gemm"));
  EXPECT_EQ(current.content_hash, record.content_hash);
  EXPECT_THAT(current.family, EqualsProto(gemm));

  ASSERT_OK(store_->PutFamily(gemm, /*builtin=*/true, &changed).status());
  EXPECT_FALSE(changed) << "same content again does not move the current hash";
}

TEST_F(StoreTest, NewSourceMovesCurrentHashAndKeepsOldVersionAddressable) {
  const std::string old_hash = Register(MakeFamily("gemm", "__global__ void gemm() {}"));
  bool changed = false;
  ASSERT_OK_AND_ASSIGN(FamilyRecord edited,
                       store_->PutFamily(MakeFamily("gemm", "__global__ void gemm() { }"),
                                         /*builtin=*/false, &changed));
  EXPECT_TRUE(changed);
  EXPECT_NE(edited.content_hash, old_hash);
  ASSERT_OK_AND_ASSIGN(FamilyRecord current, store_->GetFamily("gemm"));
  EXPECT_EQ(current.content_hash, edited.content_hash);
  ASSERT_OK_AND_ASSIGN(FamilyRecord old, store_->GetFamilyVersion("gemm", old_hash));
  EXPECT_EQ(old.family.source(), "__global__ void gemm() {}");
}

TEST_F(StoreTest, BuiltinFlagIsStickyOnceSet) {
  const v1::KernelFamily gemm = MakeFamily("gemm");
  Register(gemm, /*builtin=*/true);
  ASSERT_OK_AND_ASSIGN(FamilyRecord again, store_->PutFamily(gemm, /*builtin=*/false));
  EXPECT_TRUE(again.builtin);
}

TEST_F(StoreTest, UnknownFamiliesAreNotFound) {
  EXPECT_THAT(store_->GetFamily("nope"),
              StatusIs(absl::StatusCode::kNotFound, "unknown family 'nope'"));
  const std::string hash = Register(MakeFamily("gemm"));
  EXPECT_THAT(store_->GetFamilyVersion("gemm", "abc123"),
              StatusIs(absl::StatusCode::kNotFound, "family 'gemm' has no version abc123"));
  EXPECT_THAT(store_->GetFamilyVersion("other", hash),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("family 'other'")));
}

// `autotune kernels` prints 12 hex digits of a hash; every call that takes
// one takes a prefix of it, down to kMinHashPrefix, when it names one
// version.
TEST_F(StoreTest, AVersionIsFoundByAPrefixOfItsHashThatFitsItAlone) {
  // Versions until two share their first kMinHashPrefix digits (about 300
  // for 16 bits, by the birthday bound).
  std::map<std::string, std::string> by_prefix;
  std::string first, second;
  for (int i = 0; first.empty(); ++i) {
    v1::KernelFamily family = MakeFamily("gemm");
    family.set_description(absl::StrCat("version ", i));
    const std::string hash = FamilyContentHash(family);
    auto [it, added] = by_prefix.emplace(hash.substr(0, kMinHashPrefix), hash);
    if (!added) {
      first = it->second;
      second = hash;
    }
    Register(family);
  }
  ASSERT_OK_AND_ASSIGN(FamilyRecord found, store_->GetFamilyVersion("gemm", first.substr(0, 12)));
  EXPECT_EQ(found.content_hash, first);
  ASSERT_OK_AND_ASSIGN(found, store_->GetFamilyVersion("gemm", second.substr(0, 12)));
  EXPECT_EQ(found.content_hash, second);
  EXPECT_THAT(store_->GetFamilyVersion("gemm", first.substr(0, kMinHashPrefix)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat("the hash prefix ",
                                                    first.substr(0, kMinHashPrefix), " fits 2")),
                             HasSubstr(first.substr(0, 16)), HasSubstr(second.substr(0, 16)),
                             HasSubstr("give more of it"))));
  // Too short, not hex, or fitting none: not found.
  EXPECT_THAT(store_->GetFamilyVersion("gemm", first.substr(0, kMinHashPrefix - 1)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("has no version")));
  EXPECT_THAT(store_->GetFamilyVersion("gemm", "%"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("has no version")));
  EXPECT_THAT(store_->GetFamilyVersion("gemm", first.substr(0, 11) + "z"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("has no version")));
  EXPECT_THAT(store_->GetFamilyVersion("other", first.substr(0, 12)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("has no version")));
}

TEST_F(StoreTest, RemoveFamilyTakesEveryVersionAndOnlyWithEntriesWhenAskedTo) {
  const std::string old_hash = Register(MakeFamily("gemm", "__global__ void gemm() {}"));
  const std::string hash = Register(MakeFamily("gemm", "__global__ void gemm() { }"));
  const std::string other = Register(MakeFamily("axpy"));
  const v1::Entry entry =
      MakeEntry("gemm", old_hash, MakeProblem({{"m", 8}}, v1::BFLOAT16), "H200");
  ASSERT_OK(store_->PutEntry(entry));
  ASSERT_OK(store_->AddMeasurement(MeasurementFor(entry, 256)));
  const v1::Entry kept = MakeEntry("axpy", other, MakeProblem({{"m", 8}}, v1::BFLOAT16), "H200");
  ASSERT_OK(store_->PutEntry(kept));

  EXPECT_THAT(store_->RemoveFamily("gemm", /*with_entries=*/false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("family 'gemm' has 1 entries and 1 measurements")));
  ASSERT_OK_AND_ASSIGN(Store::RemovedFamily removed,
                       store_->RemoveFamily("gemm", /*with_entries=*/true));
  EXPECT_EQ(removed.versions, 2);
  EXPECT_EQ(removed.entries, 1);
  EXPECT_EQ(removed.measurements, 1);
  EXPECT_THAT(store_->GetFamily("gemm"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(store_->GetFamilyVersion("gemm", hash),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(AllEntries(), ElementsAre(EqualsProto(kept)));
  EXPECT_THAT(store_->RemoveFamily("gemm", true),
              StatusIs(absl::StatusCode::kNotFound, "unknown family 'gemm'"));

  Register(MakeFamily("softmax"), /*builtin=*/true);
  EXPECT_THAT(store_->RemoveFamily("softmax", true),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("built-in family")));
  // A name may be registered again once removed.
  EXPECT_EQ(Register(MakeFamily("gemm", "__global__ void gemm() {}")), old_hash);
}

TEST_F(StoreTest, PutFamilyRejectsBadNames) {
  EXPECT_THAT(store_->PutFamily(MakeFamily(""), false),
              StatusIs(absl::StatusCode::kInvalidArgument, "family.name is empty"));
  EXPECT_THAT(store_->PutFamily(MakeFamily("Gemm"), false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "family.name 'Gemm' must match [a-z][a-z0-9_]*"));
  EXPECT_THAT(store_->PutFamily(MakeFamily("my-kernel"), false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'my-kernel'")));
  EXPECT_EQ(RowCounts()["family_versions"], 0);
}

TEST_F(StoreTest, ListFamiliesSummarisesCurrentVersions) {
  const std::string old_hash = Register(MakeFamily("gemm", "old"));
  const std::string gemm_hash = Register(MakeFamily("gemm", "new"));
  const std::string softmax_hash = Register(MakeFamily("softmax"), /*builtin=*/true);
  const v1::Problem problem = MakeProblem({{"m", 128}}, v1::BFLOAT16);
  ASSERT_OK(store_->PutEntry(MakeEntry("gemm", gemm_hash, problem, "H200")));
  ASSERT_OK(store_->PutEntry(MakeEntry("gemm", gemm_hash, problem, "A100")));
  ASSERT_OK(store_->PutEntry(MakeEntry("gemm", old_hash, problem, "H200")));

  ASSERT_OK_AND_ASSIGN(std::vector<v1::KernelSummary> kernels, store_->ListFamilies());
  ASSERT_THAT(kernels, SizeIs(2));
  EXPECT_EQ(kernels[0].name(), "gemm");
  EXPECT_EQ(kernels[0].content_hash(), gemm_hash);
  EXPECT_EQ(kernels[0].entry_count(), 2) << "entries of the old version are not counted";
  EXPECT_EQ(kernels[0].config_count(), 6);  // BLOCK x UNROLL = 2 x 3
  EXPECT_EQ(kernels[0].description(), "test family gemm");
  EXPECT_THAT(kernels[0].dims(), SizeIs(1));
  EXPECT_THAT(kernels[0].dtypes(), ElementsAre(v1::BFLOAT16, v1::FLOAT16));
  EXPECT_FALSE(kernels[0].builtin());
  EXPECT_EQ(kernels[1].name(), "softmax");
  EXPECT_EQ(kernels[1].content_hash(), softmax_hash);
  EXPECT_EQ(kernels[1].entry_count(), 0);
  EXPECT_TRUE(kernels[1].builtin());
  EXPECT_FALSE(kernels[1].registered_at().empty());
}

// ---- Binaries -------------------------------------------------------------------

TEST_F(StoreTest, BinaryRoundTrip) {
  const std::string cubin(
      "\x7f"
      "ELF\0\x01\x02 cubin bytes",
      20);
  v1::Binary binary = MakeBinary(cubin, "13.0");
  binary.set_family("gemm");
  binary.set_family_hash("h");
  ASSERT_OK_AND_ASSIGN(std::string sha, store_->PutBinary(binary));
  EXPECT_EQ(sha, Sha256Hex(cubin));
  binary.set_sha256(sha);
  ASSERT_OK_AND_ASSIGN(v1::Binary stored, store_->GetBinary(sha));
  EXPECT_THAT(stored, EqualsProto(binary));
  // Putting the same bytes again is a no-op that returns the same key.
  ASSERT_OK_AND_ASSIGN(std::string again, store_->PutBinary(binary));
  EXPECT_EQ(again, sha);
  EXPECT_EQ(RowCounts()["binaries"], 1);
}

TEST_F(StoreTest, PutBinaryChecksTheGivenDigest) {
  v1::Binary binary = MakeBinary("cubin");
  binary.set_sha256(Sha256Hex("something else"));
  EXPECT_THAT(store_->PutBinary(binary),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("binary.sha256 is ", Sha256Hex("something else"),
                                    " but the cubin hashes to ", Sha256Hex("cubin"))));
  EXPECT_THAT(store_->PutBinary(MakeBinary("")),
              StatusIs(absl::StatusCode::kInvalidArgument, "binary.cubin is empty"));
  EXPECT_EQ(RowCounts()["binaries"], 0);
}

TEST_F(StoreTest, MissingBinaryIsNotFound) {
  EXPECT_THAT(store_->GetBinary(Sha256Hex("x")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not found")));
}

TEST_F(StoreTest, CorruptedBinaryIsDataLossAndNeverServed) {
  const std::string hash = Register(MakeFamily("gemm"));
  const std::string sha = StoreBinary("good cubin bytes");
  ASSERT_OK(store_->PutEntry(
      MakeEntry("gemm", hash, MakeProblem({{"m", 1}}, v1::BFLOAT16), "H200", "12.8", sha)));

  // Damage the blob behind the store's back, through another connection.
  const std::string damaged = "good cubin bytez";
  {
    auto raw = OpenRaw(path_);
    ASSERT_OK_AND_ASSIGN(sqlite::Statement update,
                         raw->Prepare("UPDATE binaries SET cubin = ?1 WHERE sha256 = ?2"));
    update.BindBlob(1, damaged).BindText(2, sha);
    ASSERT_OK(update.Run());
    EXPECT_EQ(raw->changes(), 1);
  }

  EXPECT_THAT(store_->GetBinary(sha),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(absl::StrCat("binary ", sha, " is corrupt: stored bytes hash to ",
                                              Sha256Hex(damaged), "; run `autotune invalidate`"))));
  EXPECT_THAT(store_->Export({}, false),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is corrupt")));

  // A good copy (a re-compile or an import) heals it.
  ASSERT_OK(store_->PutBinary(MakeBinary("good cubin bytes")).status());
  ASSERT_OK_AND_ASSIGN(v1::Binary healed, store_->GetBinary(sha));
  EXPECT_EQ(healed.cubin(), "good cubin bytes");
}

// ---- Entries --------------------------------------------------------------------

TEST_F(StoreTest, EntryRoundTripFindsByExactKey) {
  const std::string hash = Register(MakeFamily("gemm"));
  const std::string sha = StoreBinary("cubin");
  v1::Problem problem;
  (*problem.mutable_dims())["m"] = 128;
  (*problem.mutable_dims())["k"] = 64;
  problem.set_dtype(v1::BFLOAT16);
  const v1::Entry entry = MakeEntry("gemm", hash, problem, "NVIDIA H200", "12.8", sha);
  ASSERT_OK(store_->PutEntry(entry));

  // The same dims inserted in another order are the same key.
  v1::Problem reordered;
  (*reordered.mutable_dims())["k"] = 64;
  (*reordered.mutable_dims())["m"] = 128;
  reordered.set_dtype(v1::BFLOAT16);
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> found,
                       store_->FindEntry({"gemm", hash, reordered, "NVIDIA H200"}));
  ASSERT_TRUE(found.has_value());
  EXPECT_THAT(*found, EqualsProto(entry));

  // An empty family_hash means the current version.
  ASSERT_OK_AND_ASSIGN(found, store_->FindEntry({"gemm", "", problem, "NVIDIA H200"}));
  EXPECT_TRUE(found.has_value());

  // Every other key component must match.
  v1::Problem other_dtype = problem;
  other_dtype.set_dtype(v1::FLOAT16);
  v1::Problem other_dims = problem;
  (*other_dims.mutable_dims())["m"] = 256;
  for (const EntryKey& miss : std::vector<EntryKey>{
           {"gemm", hash, other_dtype, "NVIDIA H200"},
           {"gemm", hash, other_dims, "NVIDIA H200"},
           {"gemm", hash, problem, "NVIDIA A100"},
           {"gemm", Sha256Hex("other"), problem, "NVIDIA H200"},
           {"softmax", "", problem, "NVIDIA H200"},
       }) {
    ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> none, store_->FindEntry(miss));
    EXPECT_FALSE(none.has_value()) << miss.family << " " << miss.device;
  }
}

TEST_F(StoreTest, PutEntryReplacesTheEntryForItsKey) {
  const std::string hash = Register(MakeFamily("gemm"));
  v1::Entry entry = MakeEntry("gemm", hash, MakeProblem({{"m", 8}}, v1::BFLOAT16), "H200");
  ASSERT_OK(store_->PutEntry(entry));
  (*entry.mutable_config()->mutable_params())["BLOCK"] = 128;
  entry.set_nvrtc_version("13.0");
  ASSERT_OK(store_->PutEntry(entry));
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> found, store_->FindEntry(KeyOf(entry)));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->config().params().at("BLOCK"), 128);
  EXPECT_THAT(AllEntries(), SizeIs(1));
  // The key column follows the replacement too.
  v1::EntryFilter older;
  older.set_nvrtc_older_than("12.9");
  int64_t total = -1;
  ASSERT_OK(store_->ListEntries(older, -1, 0, &total).status());
  EXPECT_EQ(total, 0);
}

struct BadEntryCase {
  std::string name;
  std::function<void(v1::Entry&)> mutate;
  absl::StatusCode code;
  std::string message;
};

TEST_F(StoreTest, PutEntryNamesEveryBadField) {
  const std::string hash = Register(MakeFamily("gemm"));
  const std::string sha = StoreBinary("cubin");
  const v1::Entry good =
      MakeEntry("gemm", hash, MakeProblem({{"m", 8}}, v1::BFLOAT16), "H200", "12.8", sha);
  const std::string missing_sha = Sha256Hex("not stored");
  const std::vector<BadEntryCase> cases = {
      {"no family", [](v1::Entry& e) { e.clear_family(); }, absl::StatusCode::kInvalidArgument,
       "entry.family is empty"},
      {"no family hash", [](v1::Entry& e) { e.clear_family_hash(); },
       absl::StatusCode::kInvalidArgument, "entry.family_hash is empty"},
      {"no device", [](v1::Entry& e) { e.mutable_device()->clear_name(); },
       absl::StatusCode::kInvalidArgument, "entry.device.name is empty"},
      {"no dims", [](v1::Entry& e) { e.mutable_problem()->clear_dims(); },
       absl::StatusCode::kInvalidArgument, "entry.problem.dims is empty"},
      {"no dtype", [](v1::Entry& e) { e.mutable_problem()->clear_dtype(); },
       absl::StatusCode::kInvalidArgument, "entry.problem.dtype is not set"},
      {"bad nvrtc", [](v1::Entry& e) { e.set_nvrtc_version("twelve"); },
       absl::StatusCode::kInvalidArgument,
       "entry.nvrtc_version: nvrtc version 'twelve' is not MAJOR.MINOR (e.g. \"12.8\")"},
      {"unknown version", [](v1::Entry& e) { e.set_family_hash("0123"); },
       absl::StatusCode::kNotFound,
       "entry.family_hash: family 'gemm' has no stored version 0123 (register the family "
       "first)"},
      {"unknown family", [](v1::Entry& e) { e.set_family("softmax"); }, absl::StatusCode::kNotFound,
       "entry.family_hash: family 'softmax' has no stored version " + hash +
           " (register the family first)"},
      {"unknown binary", [&](v1::Entry& e) { e.set_binary_sha256(missing_sha); },
       absl::StatusCode::kNotFound,
       "entry.binary_sha256: binary " + missing_sha + " is not stored"},
  };
  for (const BadEntryCase& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::Entry entry = good;
    bad.mutate(entry);
    EXPECT_THAT(store_->PutEntry(entry), StatusIs(bad.code, bad.message));
  }
  EXPECT_EQ(RowCounts()["entries"], 0);
  EXPECT_OK(store_->PutEntry(good));
}

TEST_F(StoreTest, ListCandidatesIsOneFamilyVersionAndDtype) {
  const std::string hash = Register(MakeFamily("gemm"));
  const std::string old_hash = Register(MakeFamily("gemm", "old source"));
  ASSERT_OK(store_->PutFamily(MakeFamily("gemm"), false).status());  // current again
  for (int m : {512, 64, 128}) {
    ASSERT_OK(
        store_->PutEntry(MakeEntry("gemm", hash, MakeProblem({{"m", m}}, v1::BFLOAT16), "H200")));
  }
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", hash, MakeProblem({{"m", 64}}, v1::BFLOAT16), "A100")));
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", hash, MakeProblem({{"m", 64}}, v1::FLOAT16), "H200")));
  ASSERT_OK(store_->PutEntry(
      MakeEntry("gemm", old_hash, MakeProblem({{"m", 64}}, v1::BFLOAT16), "H200")));

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> h200,
                       store_->ListCandidates("gemm", hash, v1::BFLOAT16, "H200"));
  std::vector<std::string> dims;
  for (const v1::Entry& e : h200) dims.push_back(FormatDims(e.problem().dims()));
  EXPECT_THAT(dims, ElementsAre("m=128", "m=512", "m=64"));  // canonical-key order

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> any_device,
                       store_->ListCandidates("gemm", hash, v1::BFLOAT16, ""));
  EXPECT_THAT(any_device, SizeIs(4));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> current,
                       store_->ListCandidates("gemm", "", v1::BFLOAT16, ""));
  EXPECT_THAT(current, SizeIs(4));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> fp16,
                       store_->ListCandidates("gemm", hash, v1::FLOAT16, ""));
  EXPECT_THAT(fp16, SizeIs(1));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> none,
                       store_->ListCandidates("gemm", hash, v1::FLOAT32, ""));
  EXPECT_THAT(none, IsEmpty());
}

TEST_F(StoreTest, ListEntriesPagesInAStableOrderWithTotal) {
  const std::string gemm = Register(MakeFamily("gemm"));
  const std::string axpy = Register(MakeFamily("axpy"));
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", gemm, MakeProblem({{"m", 2}}, v1::BFLOAT16), "H200")));
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", gemm, MakeProblem({{"m", 1}}, v1::FLOAT16), "H200")));
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", gemm, MakeProblem({{"m", 1}}, v1::BFLOAT16), "H200")));
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", gemm, MakeProblem({{"m", 1}}, v1::BFLOAT16), "A100")));
  ASSERT_OK(
      store_->PutEntry(MakeEntry("axpy", axpy, MakeProblem({{"m", 9}}, v1::BFLOAT16), "H200")));

  const auto describe = [](const std::vector<v1::Entry>& entries) {
    std::vector<std::string> out;
    for (const v1::Entry& e : entries) {
      out.push_back(absl::StrCat(e.family(), " ", FormatDims(e.problem().dims()), " ",
                                 std::string(DTypeName(e.problem().dtype())), " ",
                                 e.device().name()));
    }
    return out;
  };
  int64_t total = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> all, store_->ListEntries({}, -1, 0, &total));
  EXPECT_EQ(total, 5);
  EXPECT_THAT(describe(all),
              ElementsAre("axpy m=9 bf16 H200", "gemm m=1 fp16 H200", "gemm m=1 bf16 A100",
                          "gemm m=1 bf16 H200", "gemm m=2 bf16 H200"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> page, store_->ListEntries({}, 2, 1, &total));
  EXPECT_EQ(total, 5);
  EXPECT_THAT(describe(page), ElementsAre("gemm m=1 fp16 H200", "gemm m=1 bf16 A100"));
  ASSERT_OK_AND_ASSIGN(page, store_->ListEntries({}, 10, 4, &total));
  EXPECT_THAT(describe(page), ElementsAre("gemm m=2 bf16 H200"));
  ASSERT_OK_AND_ASSIGN(page, store_->ListEntries({}, 0, 0, &total));
  EXPECT_THAT(page, IsEmpty()) << "limit 0 only counts";
  EXPECT_EQ(total, 5);

  v1::EntryFilter filter;
  filter.set_family("gemm");
  filter.set_device("H200");
  ASSERT_OK_AND_ASSIGN(page, store_->ListEntries(filter, -1, 0, &total));
  EXPECT_EQ(total, 3);

  EXPECT_THAT(store_->ListEntries({}, 1, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset is -1; must be >= 0"));
  filter.set_nvrtc_older_than("12");
  EXPECT_THAT(store_->ListEntries(filter, 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("filter.nvrtc_older_than: nvrtc version '12'")));
}

// ---- Invalidation scopes ----------------------------------------------------------

struct InvalidateCase {
  std::string name;
  std::function<void(v1::EntryFilter&)> filter;
  std::vector<std::string> removed;  // entry labels
  int64_t measurements_removed;
  friend void PrintTo(const InvalidateCase& c, std::ostream* os) { *os << c.name; }
};

class InvalidateTest : public StoreTest, public ::testing::WithParamInterface<InvalidateCase> {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    gemm1_ = Register(MakeFamily("gemm", "gemm v1"));
    gemm2_ = Register(MakeFamily("gemm", "gemm v2"));
    softmax_ = Register(MakeFamily("softmax"));
    // label, family, hash, dims, dtype, device, nvrtc
    Add("E1", "gemm", gemm1_, {{"m", 128}}, v1::BFLOAT16, "H200", "12.4");
    Add("E2", "gemm", gemm1_, {{"m", 256}}, v1::BFLOAT16, "H200", "13.0");
    Add("E3", "gemm", gemm1_, {{"m", 128}}, v1::BFLOAT16, "A100", "12.4");
    Add("E4", "gemm", gemm2_, {{"m", 128}}, v1::BFLOAT16, "H200", "13.0");
    Add("E5", "softmax", softmax_, {{"n", 1024}}, v1::BFLOAT16, "H200", "12.9");
    Add("E6", "gemm", gemm1_, {{"m", 128}}, v1::FLOAT16, "H200", "13.0");
    Add("E7", "gemm", gemm1_, {{"m", 512}}, v1::BFLOAT16, "H200", "");  // NVRTC unknown
    // Measurements of a problem that has no best entry (yet).
    orphan_ = MakeEntry("gemm", gemm1_, MakeProblem({{"m", 1024}}, v1::BFLOAT16), "H200");
    ASSERT_OK(store_->AddMeasurement(MeasurementFor(orphan_, 128, v1::WRONG_RESULT)));
  }

  void Add(const std::string& label, const std::string& family, const std::string& hash,
           const std::map<std::string, int64_t>& dims, v1::DType dtype, const std::string& device,
           const std::string& nvrtc) {
    v1::Entry entry = MakeEntry(family, hash, MakeProblem(dims, dtype), device, nvrtc);
    entry.set_job_id(label);  // the label travels inside the stored entry
    ASSERT_OK(store_->PutEntry(entry));
    ASSERT_OK(store_->AddMeasurement(MeasurementFor(entry, 128)));
    ASSERT_OK(store_->AddMeasurement(MeasurementFor(entry, 256)));
    entries_.push_back(entry);
  }

  static std::vector<std::string> Labels(const std::vector<v1::Entry>& entries) {
    std::vector<std::string> labels;
    for (const v1::Entry& e : entries) labels.push_back(e.job_id());
    return labels;
  }

  std::string gemm1_, gemm2_, softmax_;
  std::vector<v1::Entry> entries_;
  v1::Entry orphan_;
};

constexpr int64_t kAllMeasurements = 7 * 2 + 1;

TEST_P(InvalidateTest, RemovesExactlyWhatTheFilterNames) {
  const InvalidateCase& c = GetParam();
  v1::EntryFilter filter;
  c.filter(filter);
  if (!filter.family_hash().empty()) {
    // Cases name versions symbolically; resolve them here.
    const std::map<std::string, std::string> hashes = {
        {"gemm1", gemm1_}, {"gemm2", gemm2_}, {"softmax", softmax_}};
    filter.set_family_hash(hashes.at(filter.family_hash()));
  }
  const std::map<std::string, int64_t> before = RowCounts();

  ASSERT_OK_AND_ASSIGN(InvalidateResult dry, store_->Invalidate(filter, /*dry_run=*/true));
  EXPECT_THAT(Labels(dry.removed), UnorderedElementsAreArray(c.removed));
  EXPECT_EQ(dry.measurements_removed, c.measurements_removed);
  EXPECT_EQ(RowCounts(), before) << "a dry run changes nothing";

  ASSERT_OK_AND_ASSIGN(InvalidateResult result, store_->Invalidate(filter, /*dry_run=*/false));
  EXPECT_THAT(Labels(result.removed), UnorderedElementsAreArray(c.removed));
  EXPECT_EQ(result.measurements_removed, c.measurements_removed);

  // Everything not named is still there, measurements included.
  const std::set<std::string> removed(c.removed.begin(), c.removed.end());
  std::vector<std::string> expected_left;
  for (const v1::Entry& entry : entries_) {
    if (removed.contains(entry.job_id())) {
      ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> gone, store_->FindEntry(KeyOf(entry)));
      EXPECT_FALSE(gone.has_value()) << entry.job_id();
      continue;
    }
    expected_left.push_back(entry.job_id());
    ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> kept, store_->ListMeasurements(KeyOf(entry)));
    EXPECT_THAT(kept, SizeIs(2)) << entry.job_id();
  }
  EXPECT_THAT(Labels(AllEntries()), UnorderedElementsAreArray(expected_left));
  ASSERT_OK_AND_ASSIGN(StoreStats stats, store_->Stats());
  EXPECT_EQ(stats.measurements, kAllMeasurements - c.measurements_removed);
  // Families and binaries are not touched by invalidation.
  EXPECT_EQ(RowCounts()["family_versions"], before.at("family_versions"));
}

INSTANTIATE_TEST_SUITE_P(
    Scopes, InvalidateTest,
    ::testing::Values(
        InvalidateCase{"ByFamily",
                       [](v1::EntryFilter& f) { f.set_family("gemm"); },
                       {"E1", "E2", "E3", "E4", "E6", "E7"},
                       6 * 2 + 1},
        InvalidateCase{
            "ByOtherFamily", [](v1::EntryFilter& f) { f.set_family("softmax"); }, {"E5"}, 2},
        InvalidateCase{
            "ByFamilyHash", [](v1::EntryFilter& f) { f.set_family_hash("gemm2"); }, {"E4"}, 2},
        InvalidateCase{"ByFamilyAndHash",
                       [](v1::EntryFilter& f) {
                         f.set_family("gemm");
                         f.set_family_hash("gemm1");
                       },
                       {"E1", "E2", "E3", "E6", "E7"},
                       5 * 2 + 1},
        InvalidateCase{"ByDevice", [](v1::EntryFilter& f) { f.set_device("A100"); }, {"E3"}, 2},
        InvalidateCase{"ByProblem",
                       [](v1::EntryFilter& f) {
                         *f.mutable_problem() = MakeProblem({{"m", 128}}, v1::BFLOAT16);
                       },
                       {"E1", "E3", "E4"},
                       6},
        InvalidateCase{
            "ByProblemDimsAnyDtype",
            [](v1::EntryFilter& f) { (*f.mutable_problem()->mutable_dims())["m"] = 128; },
            {"E1", "E3", "E4", "E6"},
            8},
        InvalidateCase{"ByDtypeOnly",
                       [](v1::EntryFilter& f) { f.mutable_problem()->set_dtype(v1::FLOAT16); },
                       {"E6"},
                       2},
        InvalidateCase{"ByNvrtcOlderThan12_9",
                       [](v1::EntryFilter& f) { f.set_nvrtc_older_than("12.9"); },
                       {"E1", "E3"},
                       4},
        InvalidateCase{"ByNvrtcOlderThan13_0",
                       [](v1::EntryFilter& f) { f.set_nvrtc_older_than("13.0"); },
                       {"E1", "E3", "E5"},
                       6},
        InvalidateCase{"ByNvrtcOlderThanAnything",
                       [](v1::EntryFilter& f) { f.set_nvrtc_older_than("11.0"); },
                       {},
                       0},
        InvalidateCase{"CombinedFamilyDeviceNvrtc",
                       [](v1::EntryFilter& f) {
                         f.set_family("gemm");
                         f.set_device("H200");
                         f.set_nvrtc_older_than("13.0");
                       },
                       {"E1"},
                       2},
        InvalidateCase{"CombinedVersionAndProblem",
                       [](v1::EntryFilter& f) {
                         f.set_family("gemm");
                         f.set_family_hash("gemm1");
                         *f.mutable_problem() = MakeProblem({{"m", 128}}, v1::BFLOAT16);
                       },
                       {"E1", "E3"},
                       4},
        InvalidateCase{"NothingMatches", [](v1::EntryFilter& f) { f.set_device("B200"); }, {}, 0},
        InvalidateCase{"EmptyFilterMatchesEverything",
                       [](v1::EntryFilter&) {},
                       {"E1", "E2", "E3", "E4", "E5", "E6", "E7"},
                       kAllMeasurements}),
    [](const ::testing::TestParamInfo<InvalidateCase>& info) { return info.param.name; });

// ---- Measurements ---------------------------------------------------------------

TEST_F(StoreTest, MeasurementsListOldestFirstAndIdenticalOnesAreStoredOnce) {
  const std::string hash = Register(MakeFamily("gemm"));
  const v1::Entry entry = MakeEntry("gemm", hash, MakeProblem({{"m", 8}}, v1::BFLOAT16), "H200");
  const v1::Measurement first = MeasurementFor(entry, 256);
  v1::Measurement second = MeasurementFor(entry, 128, v1::COMPILE_ERROR);
  second.set_detail("error: too many resources requested");
  ASSERT_OK(store_->AddMeasurement(first));
  ASSERT_OK(store_->AddMeasurement(second));
  ASSERT_OK(store_->AddMeasurement(first));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Measurement> listed, store_->ListMeasurements(KeyOf(entry)));
  ASSERT_THAT(listed, SizeIs(2));
  EXPECT_THAT(listed[0], EqualsProto(first));
  EXPECT_THAT(listed[1], EqualsProto(second));

  EntryKey other = KeyOf(entry);
  other.device = "A100";
  ASSERT_OK_AND_ASSIGN(listed, store_->ListMeasurements(other));
  EXPECT_THAT(listed, IsEmpty());
}

TEST_F(StoreTest, AddMeasurementNamesEveryBadField) {
  const std::string hash = Register(MakeFamily("gemm"));
  const v1::Measurement good =
      MeasurementFor(MakeEntry("gemm", hash, MakeProblem({{"m", 8}}, v1::BFLOAT16), "H200"), 64);
  const std::vector<std::pair<std::function<void(v1::Measurement&)>, std::string>> cases = {
      {[](v1::Measurement& m) { m.clear_family(); }, "measurement.family is empty"},
      {[](v1::Measurement& m) { m.clear_family_hash(); }, "measurement.family_hash is empty"},
      {[](v1::Measurement& m) { m.mutable_device()->clear_name(); },
       "measurement.device.name is empty"},
      {[](v1::Measurement& m) { m.mutable_problem()->clear_dims(); },
       "measurement.problem.dims is empty"},
      {[](v1::Measurement& m) { m.mutable_problem()->clear_dtype(); },
       "measurement.problem.dtype is not set"},
      {[](v1::Measurement& m) { m.clear_status(); }, "measurement.status is not set"},
  };
  for (const auto& [mutate, message] : cases) {
    v1::Measurement measurement = good;
    mutate(measurement);
    EXPECT_THAT(store_->AddMeasurement(measurement),
                StatusIs(absl::StatusCode::kInvalidArgument, message));
  }
  v1::Measurement unknown = good;
  unknown.set_family_hash("0123");
  EXPECT_THAT(store_->AddMeasurement(unknown),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("measurement.family_hash: family 'gemm' has no stored version")));
  EXPECT_EQ(RowCounts()["measurements"], 0);
}

// ---- Jobs -------------------------------------------------------------------------

TEST_F(StoreTest, JobsAreCreatedQueuedUpdatedAndListedNewestFirst) {
  v1::JobSpec spec;
  spec.mutable_manifest()->add_items()->set_family("gemm");
  ASSERT_OK_AND_ASSIGN(v1::Job first, store_->CreateJob(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job second, store_->CreateJob(spec));
  EXPECT_NE(first.id(), second.id());
  EXPECT_THAT(first.id(), ::testing::MatchesRegex("[0-9a-f]{16}"));
  EXPECT_EQ(first.state(), v1::QUEUED);
  EXPECT_THAT(first.spec(), EqualsProto(spec));
  EXPECT_FALSE(first.created_at().empty());
  ASSERT_OK_AND_ASSIGN(v1::Job stored, store_->GetJob(first.id()));
  EXPECT_THAT(stored, EqualsProto(first));

  v1::Job running = first;
  running.set_state(v1::COMPILING);
  running.mutable_counts()->set_variants(42);
  running.clear_created_at();
  running.clear_updated_at();
  ASSERT_OK(store_->UpdateJob(running));
  ASSERT_OK_AND_ASSIGN(stored, store_->GetJob(first.id()));
  EXPECT_EQ(stored.state(), v1::COMPILING);
  EXPECT_EQ(stored.counts().variants(), 42);
  EXPECT_EQ(stored.created_at(), first.created_at()) << "kept when the update leaves it empty";
  EXPECT_FALSE(stored.updated_at().empty());

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> jobs, store_->ListJobs(0));
  ASSERT_THAT(jobs, SizeIs(2));
  EXPECT_EQ(jobs[0].id(), second.id());
  EXPECT_EQ(jobs[1].id(), first.id());
  ASSERT_OK_AND_ASSIGN(jobs, store_->ListJobs(1));
  ASSERT_THAT(jobs, SizeIs(1));
  EXPECT_EQ(jobs[0].id(), second.id());

  // Only the jobs that have not ended: the second ends.
  ASSERT_OK_AND_ASSIGN(jobs, store_->ListUnfinishedJobs());
  EXPECT_THAT(jobs, SizeIs(2));
  for (v1::JobState end : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    v1::Job ended = second;
    ended.set_state(end);
    ASSERT_OK(store_->UpdateJob(ended));
    ASSERT_OK_AND_ASSIGN(jobs, store_->ListUnfinishedJobs());
    ASSERT_THAT(jobs, SizeIs(1)) << v1::JobState_Name(end);
    EXPECT_EQ(jobs[0].id(), first.id());
  }
}

TEST_F(StoreTest, UnknownJobsAreNotFound) {
  EXPECT_THAT(store_->GetJob("nope"), StatusIs(absl::StatusCode::kNotFound, "unknown job 'nope'"));
  v1::Job job;
  job.set_id("nope");
  EXPECT_THAT(store_->UpdateJob(job), StatusIs(absl::StatusCode::kNotFound, "unknown job 'nope'"));
  EXPECT_THAT(store_->UpdateJob(v1::Job()),
              StatusIs(absl::StatusCode::kInvalidArgument, "job.id is empty"));
}

// ---- Import / Export ------------------------------------------------------------

class BundleTest : public StoreTest {
 protected:
  // A store holding two families, binaries, entries and measurements.
  void Populate() {
    gemm_ = Register(MakeFamily("gemm"));
    softmax_ = Register(MakeFamily("softmax"));
    const std::string sha1 = StoreBinary("cubin one", "12.4");
    const std::string sha2 = StoreBinary("cubin two", "13.0");
    StoreBinary("cubin unused");
    const std::vector<v1::Entry> entries = {
        MakeEntry("gemm", gemm_, MakeProblem({{"m", 64}}, v1::BFLOAT16), "H200", "12.4", sha1),
        MakeEntry("gemm", gemm_, MakeProblem({{"m", 128}}, v1::BFLOAT16), "H200", "13.0", sha2),
        MakeEntry("gemm", gemm_, MakeProblem({{"m", 64}}, v1::BFLOAT16), "A100", "13.0", sha2),
        MakeEntry("softmax", softmax_, MakeProblem({{"n", 4096}}, v1::FLOAT16), "H200", "13.0"),
    };
    for (const v1::Entry& entry : entries) {
      ASSERT_OK(store_->PutEntry(entry));
      ASSERT_OK(store_->AddMeasurement(MeasurementFor(entry, 128)));
    }
  }

  std::unique_ptr<Store> OpenOther(const std::string& name) {
    absl::StatusOr<std::unique_ptr<Store>> other = Store::Open(OptionsFor(dir_.File(name)));
    EXPECT_TRUE(other.ok()) << other.status();
    return other.ok() ? std::move(*other) : nullptr;
  }

  std::string gemm_, softmax_;
};

TEST_F(BundleTest, ExportCarriesWhatTheEntriesUse) {
  Populate();
  v1::EntryFilter filter;
  filter.set_family("gemm");
  filter.set_device("H200");
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, store_->Export(filter, false));
  EXPECT_EQ(bundle.format_version(), 1);
  EXPECT_THAT(bundle.entries(), SizeIs(2));
  ASSERT_THAT(bundle.families(), SizeIs(1));
  EXPECT_EQ(bundle.families(0).content_hash(), gemm_);
  EXPECT_THAT(bundle.binaries(), SizeIs(2)) << "the unused binary stays out";
  EXPECT_THAT(bundle.measurements(), IsEmpty());

  ASSERT_OK_AND_ASSIGN(bundle, store_->Export(filter, true));
  EXPECT_THAT(bundle.measurements(), SizeIs(2));
}

TEST_F(BundleTest, ExportImportRoundTripIntoAnEmptyStore) {
  Populate();
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, store_->Export({}, true));
  std::unique_ptr<Store> other = OpenOther("other.db");
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response, other->Import(bundle, false));
  EXPECT_EQ(response.families(), 2);
  EXPECT_EQ(response.binaries(), 2);
  EXPECT_EQ(response.entries(), 4);
  EXPECT_EQ(response.entries_skipped(), 0);
  EXPECT_EQ(response.measurements(), 4);

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> imported, other->ListEntries({}, -1, 0));
  const std::vector<v1::Entry> original = AllEntries();
  ASSERT_EQ(imported.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_THAT(imported[i], EqualsProto(original[i]));
    if (!original[i].binary_sha256().empty()) {
      EXPECT_OK(other->GetBinary(original[i].binary_sha256()).status());
    }
    ASSERT_OK_AND_ASSIGN(auto measurements, other->ListMeasurements(KeyOf(original[i])));
    EXPECT_THAT(measurements, SizeIs(1));
  }
  ASSERT_OK_AND_ASSIGN(FamilyRecord gemm, other->GetFamily("gemm"));
  EXPECT_EQ(gemm.content_hash, gemm_);
  EXPECT_FALSE(gemm.builtin);

  ASSERT_OK_AND_ASSIGN(v1::CacheBundle again, other->Export({}, true));
  EXPECT_THAT(again, EqualsProto(bundle));
}

TEST_F(BundleTest, ImportingTwiceSkipsWhatIsThere) {
  Populate();
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, store_->Export({}, true));
  const std::map<std::string, int64_t> before = RowCounts();
  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response, store_->Import(bundle, false));
  EXPECT_EQ(response.families(), 0);
  EXPECT_EQ(response.binaries(), 0);
  EXPECT_EQ(response.entries(), 0);
  EXPECT_EQ(response.entries_skipped(), 4);
  EXPECT_EQ(response.measurements(), 0);
  EXPECT_EQ(RowCounts(), before);
}

TEST_F(BundleTest, ExistingEntriesAreKeptUnlessReplace) {
  Populate();
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, store_->Export({}, false));
  v1::Entry& changed = *bundle.mutable_entries(0);
  (*changed.mutable_config()->mutable_params())["BLOCK"] = 1024;
  const EntryKey key = KeyOf(changed);

  ASSERT_OK_AND_ASSIGN(v1::ImportResponse kept, store_->Import(bundle, false));
  EXPECT_EQ(kept.entries_skipped(), 4);
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> found, store_->FindEntry(key));
  EXPECT_EQ(found->config().params().at("BLOCK"), 256);

  ASSERT_OK_AND_ASSIGN(v1::ImportResponse replaced, store_->Import(bundle, true));
  EXPECT_EQ(replaced.entries(), 4);
  EXPECT_EQ(replaced.entries_skipped(), 0);
  ASSERT_OK_AND_ASSIGN(found, store_->FindEntry(key));
  EXPECT_EQ(found->config().params().at("BLOCK"), 1024);
}

TEST_F(BundleTest, AnOnlineBackupIsAConsistentCopyThatOpens) {
  Populate();
  // Found on 2bc4d71: a backup was written at any absolute path.
  EXPECT_THAT(store_->Backup("backup.db"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--backup-dir")));
  const std::string folder = dir_.File("backups");
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  StoreOptions options = OptionsFor(path_);
  options.backup_dir = folder;
  store_.reset();
  ASSERT_OK_AND_ASSIGN(store_, Store::Open(options));

  const std::string copy = folder + "/backup.db";
  ASSERT_OK_AND_ASSIGN(v1::BackupResponse backup, store_->Backup("backup.db"));
  EXPECT_EQ(backup.path(), copy);
  EXPECT_EQ(backup.entries(), 4);
  EXPECT_EQ(backup.schema_version(), kSchemaVersion);
  EXPECT_GT(backup.bytes(), 0);
  EXPECT_EQ(std::filesystem::status(copy).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  // Writes after the backup are not in it; the copy opens as a store.
  ASSERT_OK(
      store_->PutEntry(MakeEntry("gemm", gemm_, MakeProblem({{"m", 4096}}, v1::BFLOAT16), "H200")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> restored, Store::Open(OptionsFor(copy)));
  ASSERT_OK_AND_ASSIGN(StoreStats stats, restored->Stats());
  EXPECT_EQ(stats.entries, 4);
  EXPECT_EQ(stats.measurements, 4);

  EXPECT_THAT(store_->Backup("backup.db"),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(copy)));
  for (const std::string& name :
       {dir_.File("outside.db"), std::string("../outside.db"), std::string(".."), std::string("."),
        std::string(""), std::string("a\nb.db")}) {
    EXPECT_THAT(store_->Backup(name),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a file name")))
        << name;
  }
  // A link planted in the folder is not followed, and not replaced.
  const std::string target = dir_.File("target");
  ASSERT_EQ(symlink(target.c_str(), (folder + "/planted.db").c_str()), 0);
  EXPECT_THAT(store_->Backup("planted.db"),
              StatusIs(absl::StatusCode::kAlreadyExists, ::testing::_));
  EXPECT_FALSE(std::filesystem::exists(target));
  // A folder others may write is refused: they could swap the file.
  ASSERT_EQ(chmod(folder.c_str(), 0777), 0);
  EXPECT_THAT(store_->Backup("other.db"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("group and others")));
}

TEST(StoreAvailabilityTest, NamesAMovedOrReplacedFileAndAHeldWriteLockAndRecovers) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  StoreOptions options = OptionsFor(path);
  options.busy_timeout = absl::Milliseconds(100);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(options));
  EXPECT_THAT(store->CheckAvailable(), IsOk());

  const std::string moved = dir.File("moved.db");
  ASSERT_EQ(rename(path.c_str(), moved.c_str()), 0);
  EXPECT_THAT(store->CheckAvailable(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                AllOf(HasSubstr(path), HasSubstr("gone"))));
  {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  EXPECT_THAT(store->CheckAvailable(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("replaced")));
  ASSERT_EQ(rename(moved.c_str(), path.c_str()), 0);
  EXPECT_THAT(store->CheckAvailable(), IsOk());

  auto other = OpenRaw(path);
  ASSERT_THAT(other->Execute("BEGIN IMMEDIATE"), IsOk());
  EXPECT_THAT(store->CheckAvailable(), StatusIs(absl::StatusCode::kAborted, HasSubstr(path)));
  ASSERT_THAT(other->Execute("ROLLBACK"), IsOk());
  EXPECT_THAT(store->CheckAvailable(), IsOk());
}

TEST(MeasuredBetterTest, CleanBeatsContendedThenTheLowerMedianWins) {
  const auto entry = [](double median_us, bool contended) {
    v1::Entry e;
    e.mutable_timing()->set_median_us(median_us);
    e.set_contended(contended);
    return e;
  };
  EXPECT_TRUE(MeasuredBetter(entry(10, false), entry(12, false)));
  EXPECT_FALSE(MeasuredBetter(entry(12, false), entry(10, false)));
  EXPECT_FALSE(MeasuredBetter(entry(10, false), entry(10, false)));  // a tie keeps
  EXPECT_TRUE(MeasuredBetter(entry(20, false), entry(10, true)));    // clean over contended
  EXPECT_FALSE(MeasuredBetter(entry(5, true), entry(10, false)));
  EXPECT_TRUE(MeasuredBetter(entry(10, false), entry(0, false)));  // a median over none
  EXPECT_FALSE(MeasuredBetter(entry(0, false), entry(10, false)));
}

// What a fleet's warmup shards push with: per key, the better measurement
// stays, whichever side it came from.
TEST_F(BundleTest, KeepBetterKeepsTheBetterMeasuredEntryOfEachKey) {
  Populate();
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, store_->Export({}, false));
  ASSERT_GE(bundle.entries_size(), 3);
  const double stored = bundle.entries(0).timing().median_us();
  ASSERT_GT(stored, 0);
  // entries[0]: faster; entries[1]: slower; entries[2]: faster but contended.
  bundle.mutable_entries(0)->mutable_timing()->set_median_us(stored / 2);
  (*bundle.mutable_entries(0)->mutable_config()->mutable_params())["BLOCK"] = 1024;
  bundle.mutable_entries(1)->mutable_timing()->set_median_us(
      bundle.entries(1).timing().median_us() * 2);
  (*bundle.mutable_entries(1)->mutable_config()->mutable_params())["BLOCK"] = 1024;
  bundle.mutable_entries(2)->mutable_timing()->set_median_us(
      bundle.entries(2).timing().median_us() / 2);
  bundle.mutable_entries(2)->set_contended(true);
  (*bundle.mutable_entries(2)->mutable_config()->mutable_params())["BLOCK"] = 1024;

  ASSERT_OK_AND_ASSIGN(v1::ImportResponse merged,
                       store_->Import(bundle, Store::Merge::kKeepBetter));
  EXPECT_EQ(merged.entries(), 1);
  EXPECT_EQ(merged.entries_skipped(), bundle.entries_size() - 1);
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> faster,
                       store_->FindEntry(KeyOf(bundle.entries(0))));
  EXPECT_EQ(faster->config().params().at("BLOCK"), 1024);
  EXPECT_DOUBLE_EQ(faster->timing().median_us(), stored / 2);
  for (int i : {1, 2}) {
    ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> kept,
                         store_->FindEntry(KeyOf(bundle.entries(i))));
    EXPECT_NE(kept->config().params().at("BLOCK"), 1024) << i;
    EXPECT_FALSE(kept->contended()) << i;
  }
}

TEST_F(BundleTest, ImportedFamilyBecomesCurrentOnlyForANewNameOrWithReplace) {
  const std::string local = Register(MakeFamily("gemm", "local source"));
  const v1::KernelFamily remote = MakeFamily("gemm", "remote source");
  const v1::KernelFamily fresh = MakeFamily("fresh");
  v1::CacheBundle bundle;
  bundle.set_format_version(1);
  v1::FamilyRecord* record = bundle.add_families();
  *record->mutable_family() = remote;
  record->set_content_hash(FamilyContentHash(remote));
  record = bundle.add_families();
  *record->mutable_family() = fresh;
  record->set_content_hash(FamilyContentHash(fresh));

  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response, store_->Import(bundle, false));
  EXPECT_EQ(response.families(), 2);
  ASSERT_OK_AND_ASSIGN(FamilyRecord gemm, store_->GetFamily("gemm"));
  EXPECT_EQ(gemm.content_hash, local) << "an existing name keeps its current version";
  EXPECT_OK(store_->GetFamilyVersion("gemm", FamilyContentHash(remote)).status());
  ASSERT_OK_AND_ASSIGN(FamilyRecord imported_fresh, store_->GetFamily("fresh"));
  EXPECT_EQ(imported_fresh.content_hash, FamilyContentHash(fresh));

  ASSERT_OK_AND_ASSIGN(response, store_->Import(bundle, true));
  EXPECT_EQ(response.families(), 1) << "only gemm's current version moved";
  ASSERT_OK_AND_ASSIGN(gemm, store_->GetFamily("gemm"));
  EXPECT_EQ(gemm.content_hash, FamilyContentHash(remote));
}

TEST_F(BundleTest, EntriesMayReferToWhatTheStoreAlreadyHolds) {
  Populate();
  const std::string sha = Sha256Hex("cubin one");
  v1::CacheBundle bundle;
  bundle.set_format_version(1);
  *bundle.add_entries() =
      MakeEntry("gemm", gemm_, MakeProblem({{"m", 4096}}, v1::BFLOAT16), "H200", "13.0", sha);
  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response, store_->Import(bundle, false));
  EXPECT_EQ(response.entries(), 1);
}

struct BadBundleCase {
  std::string name;
  std::function<void(v1::CacheBundle&)> mutate;
  std::string message;  // a prefix of the error message
  friend void PrintTo(const BadBundleCase& c, std::ostream* os) { *os << c.name; }
};

class BadBundleTest : public BundleTest, public ::testing::WithParamInterface<BadBundleCase> {};

TEST_P(BadBundleTest, FailsNamingTheFieldAndChangesNothing) {
  Populate();
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle bundle, store_->Export({}, true));
  // The bad item comes last, after families, binaries and entries that would
  // be new to the store on their own.
  v1::KernelFamily extra = MakeFamily("extra");
  v1::FamilyRecord* record = bundle.add_families();
  *record->mutable_family() = extra;
  record->set_content_hash(FamilyContentHash(extra));
  v1::Binary* binary = bundle.add_binaries();
  *binary = MakeBinary("extra cubin");
  binary->set_sha256(Sha256Hex("extra cubin"));
  *bundle.add_entries() =
      MakeEntry("extra", FamilyContentHash(extra), MakeProblem({{"m", 1}}, v1::BFLOAT16), "H200",
                "13.0", binary->sha256());
  // The unmodified bundle imports cleanly into a fresh store.
  {
    std::unique_ptr<Store> other = OpenOther("check.db");
    ASSERT_NE(other, nullptr);
    ASSERT_OK(other->Import(bundle, false).status());
  }

  GetParam().mutate(bundle);
  const std::map<std::string, int64_t> before = RowCounts();
  EXPECT_THAT(store_->Import(bundle, true), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     ::testing::StartsWith(GetParam().message)));
  EXPECT_EQ(RowCounts(), before);
  EXPECT_THAT(store_->GetFamily("extra"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadBundleTest,
    ::testing::Values(
        BadBundleCase{"FormatVersionMissing", [](v1::CacheBundle& b) { b.clear_format_version(); },
                      "format_version is 0; this build reads format_version 1"},
        BadBundleCase{"FormatVersionNewer", [](v1::CacheBundle& b) { b.set_format_version(2); },
                      "format_version is 2"},
        BadBundleCase{"FamilyHash",
                      [](v1::CacheBundle& b) { b.mutable_families(2)->set_content_hash("beef"); },
                      "families[2].content_hash is 'beef' but the descriptor hashes to "},
        BadBundleCase{"FamilyEdited",
                      [](v1::CacheBundle& b) {
                        b.mutable_families(1)->mutable_family()->set_source("edited");
                      },
                      "families[1].content_hash is '"},
        BadBundleCase{"FamilyName",
                      [](v1::CacheBundle& b) {
                        b.mutable_families(0)->mutable_family()->set_name("Bad Name");
                      },
                      "families[0].family.name 'Bad Name' must match"},
        BadBundleCase{"BinaryDigest",
                      [](v1::CacheBundle& b) { b.mutable_binaries(2)->set_cubin("tampered"); },
                      "binaries[2].sha256 is "},
        BadBundleCase{"BinaryDigestMissing",
                      [](v1::CacheBundle& b) { b.mutable_binaries(1)->clear_sha256(); },
                      "binaries[1].sha256 is empty"},
        BadBundleCase{"BinaryEmpty",
                      [](v1::CacheBundle& b) { b.mutable_binaries(0)->clear_cubin(); },
                      "binaries[0].cubin is empty"},
        BadBundleCase{"EntryBinaryNowhere",
                      [](v1::CacheBundle& b) {
                        b.mutable_entries(4)->set_binary_sha256(Sha256Hex("nowhere"));
                      },
                      "entries[4].binary_sha256: binary " + Sha256Hex("nowhere") +
                          " is neither in the bundle nor in the store"},
        BadBundleCase{"EntryFamilyNowhere",
                      [](v1::CacheBundle& b) { b.mutable_entries(3)->set_family_hash("f00d"); },
                      "entries[3].family_hash: family 'softmax' version f00d is neither in the "
                      "bundle nor in the store"},
        BadBundleCase{
            "EntryDevice",
            [](v1::CacheBundle& b) { b.mutable_entries(4)->mutable_device()->clear_name(); },
            "entries[4].device.name is empty"},
        BadBundleCase{
            "EntryDims",
            [](v1::CacheBundle& b) { b.mutable_entries(1)->mutable_problem()->clear_dims(); },
            "entries[1].problem.dims is empty"},
        BadBundleCase{
            "EntryDtype",
            [](v1::CacheBundle& b) { b.mutable_entries(2)->mutable_problem()->clear_dtype(); },
            "entries[2].problem.dtype is not set"},
        BadBundleCase{"EntryFamily",
                      [](v1::CacheBundle& b) { b.mutable_entries(0)->clear_family(); },
                      "entries[0].family is empty"},
        BadBundleCase{"EntryNvrtc",
                      [](v1::CacheBundle& b) { b.mutable_entries(0)->set_nvrtc_version("x"); },
                      "entries[0].nvrtc_version: nvrtc version 'x' is not MAJOR.MINOR"},
        BadBundleCase{"EntryTwice", [](v1::CacheBundle& b) { *b.add_entries() = b.entries(1); },
                      "entries[5]: same key as entries[1]"},
        BadBundleCase{"MeasurementStatus",
                      [](v1::CacheBundle& b) { b.mutable_measurements(3)->clear_status(); },
                      "measurements[3].status is not set"},
        BadBundleCase{
            "MeasurementFamilyNowhere",
            [](v1::CacheBundle& b) { b.mutable_measurements(0)->set_family_hash("f00d"); },
            "measurements[0].family_hash: family 'gemm' version f00d is neither"}),
    [](const ::testing::TestParamInfo<BadBundleCase>& info) { return info.param.name; });

// ---- Compile cache ---------------------------------------------------------------

TEST_F(StoreTest, CompileOutcomesAreKeptByKeyWithTheirBinary) {
  CompileRecord ok;
  ok.compile_key = "key-ok";
  ok.status = v1::OK;
  ok.lowered_name = "scale";
  ok.log = "a warning";
  ok.nvrtc_version = "13.0";
  ok.arch = "sm_90";
  ok.family = "scale";
  ok.family_hash = "h";
  ASSERT_OK_AND_ASSIGN(const std::string sha256, store_->PutCompile(ok,
                                                                    "\x7f"
                                                                    "ELF cubin bytes"));
  EXPECT_EQ(sha256, Sha256Hex("\x7f"
                              "ELF cubin bytes"));
  ASSERT_OK_AND_ASSIGN(std::optional<CompileRecord> found, store_->FindCompile("key-ok"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->status, v1::OK);
  EXPECT_EQ(found->binary_sha256, Sha256Hex("\x7f"
                                            "ELF cubin bytes"));
  EXPECT_EQ(found->lowered_name, "scale");
  EXPECT_EQ(found->log, "a warning");
  ASSERT_OK_AND_ASSIGN(v1::Binary binary, store_->GetBinary(found->binary_sha256));
  EXPECT_EQ(binary.cubin(),
            "\x7f"
            "ELF cubin bytes");

  CompileRecord error = ok;
  error.compile_key = "key-error";
  error.status = v1::COMPILE_ERROR;
  error.log = "scale.cu(3): error: identifier \"oops\" is undefined";
  ASSERT_OK_AND_ASSIGN(const std::string no_binary, store_->PutCompile(error, ""));
  EXPECT_EQ(no_binary, "");
  ASSERT_OK_AND_ASSIGN(found, store_->FindCompile("key-error"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->status, v1::COMPILE_ERROR);
  EXPECT_EQ(found->binary_sha256, "");
  EXPECT_THAT(found->log, HasSubstr("oops"));

  ASSERT_OK_AND_ASSIGN(found, store_->FindCompile("never-compiled"));
  EXPECT_FALSE(found.has_value());

  // Compile records keep their binaries from garbage collection.
  ASSERT_OK_AND_ASSIGN(GarbageCollectResult gc, store_->GarbageCollect(/*dry_run=*/false));
  EXPECT_EQ(gc.binaries_removed, 0);
  ASSERT_OK_AND_ASSIGN(found, store_->FindCompile("key-ok"));
  EXPECT_TRUE(found.has_value());
}

TEST_F(StoreTest, OnlyDefiniteCompileOutcomesAreKept) {
  CompileRecord record;
  record.compile_key = "k";
  record.status = v1::COMPILE_TIMEOUT;
  EXPECT_THAT(store_->PutCompile(record, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compile.status")));
  record.status = v1::OK;
  EXPECT_THAT(store_->PutCompile(record, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without a cubin")));
  record.compile_key = "";
  record.status = v1::COMPILE_ERROR;
  EXPECT_THAT(store_->PutCompile(record, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compile_key")));
}

// ---- Maintenance ----------------------------------------------------------------

TEST_F(StoreTest, GarbageCollectRemovesOnlyUnreferencedBinaries) {
  const std::string hash = Register(MakeFamily("gemm"));
  const std::string used_by_entry = StoreBinary("entry cubin");
  const std::string used_by_measurement = StoreBinary("measurement cubin");
  const std::string unused1 = StoreBinary("unused cubin 1");
  const std::string unused2 = StoreBinary("unused cubin two");
  const v1::Entry entry =
      MakeEntry("gemm", hash, MakeProblem({{"m", 1}}, v1::BFLOAT16), "H200", "12.8", used_by_entry);
  ASSERT_OK(store_->PutEntry(entry));
  v1::Measurement measurement =
      MeasurementFor(MakeEntry("gemm", hash, MakeProblem({{"m", 2}}, v1::BFLOAT16), "H200"), 64);
  measurement.set_binary_sha256(used_by_measurement);
  ASSERT_OK(store_->AddMeasurement(measurement));

  const int64_t unused_bytes = static_cast<int64_t>(std::string("unused cubin 1").size() +
                                                    std::string("unused cubin two").size());
  ASSERT_OK_AND_ASSIGN(GarbageCollectResult dry, store_->GarbageCollect(/*dry_run=*/true));
  EXPECT_EQ(dry.binaries_removed, 2);
  EXPECT_EQ(dry.bytes_freed, unused_bytes);
  EXPECT_OK(store_->GetBinary(unused1).status()) << "a dry run removes nothing";

  ASSERT_OK_AND_ASSIGN(GarbageCollectResult result, store_->GarbageCollect(/*dry_run=*/false));
  EXPECT_EQ(result.binaries_removed, 2);
  EXPECT_EQ(result.bytes_freed, unused_bytes);
  EXPECT_THAT(store_->GetBinary(unused1), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(store_->GetBinary(unused2), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_OK(store_->GetBinary(used_by_entry).status());
  EXPECT_OK(store_->GetBinary(used_by_measurement).status());

  ASSERT_OK_AND_ASSIGN(result, store_->GarbageCollect(false));
  EXPECT_EQ(result.binaries_removed, 0);

  // Once its entry is invalidated, the entry's binary is garbage too.
  v1::EntryFilter filter;
  *filter.mutable_problem() = entry.problem();
  ASSERT_OK(store_->Invalidate(filter, false).status());
  ASSERT_OK_AND_ASSIGN(result, store_->GarbageCollect(false));
  EXPECT_EQ(result.binaries_removed, 1);
  EXPECT_THAT(store_->GetBinary(used_by_entry),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(StoreTest, StatsCountWhatIsStored) {
  const std::string v1_hash = Register(MakeFamily("gemm", "one"));
  const std::string v2_hash = Register(MakeFamily("gemm", "two"));
  Register(MakeFamily("softmax"));
  const std::string sha = StoreBinary("0123456789");
  StoreBinary("abcde");
  const v1::Entry entry =
      MakeEntry("gemm", v2_hash, MakeProblem({{"m", 1}}, v1::BFLOAT16), "H200", "12.8", sha);
  ASSERT_OK(store_->PutEntry(entry));
  ASSERT_OK(store_->PutEntry(MakeEntry("gemm", v1_hash, entry.problem(), "H200")));
  ASSERT_OK(store_->AddMeasurement(MeasurementFor(entry, 1)));
  ASSERT_OK(store_->CreateJob({}).status());

  ASSERT_OK_AND_ASSIGN(StoreStats stats, store_->Stats());
  EXPECT_EQ(stats.families, 2) << "distinct names, not versions";
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.binaries, 2);
  EXPECT_EQ(stats.binary_bytes, 15);
  EXPECT_EQ(stats.measurements, 1);
  EXPECT_EQ(stats.jobs, 1);
  EXPECT_THAT(stats.jobs_by_state, ::testing::ElementsAre(::testing::Pair(v1::QUEUED, 1)));
  EXPECT_THAT(stats.measurements_by_status,
              ::testing::ElementsAre(
                  ::testing::Pair(static_cast<int>(MeasurementFor(entry, 1).status()), 1)));
  EXPECT_EQ(stats.schema_version, kSchemaVersion);
  EXPECT_GE(stats.database_bytes, static_cast<int64_t>(std::filesystem::file_size(path_)));
  EXPECT_GT(stats.database_bytes, 0);
  EXPECT_EQ(store_->path(), path_);
}

// A write lock held elsewhere past busy_timeout (an operator's sqlite3 shell,
// a backup) is a conflict worth retrying: ABORTED, never UNAVAILABLE, which a
// client reads as "the daemon cannot be reached".
TEST(StoreBusyTest, WriteBlockedByAnotherConnectionIsAbortedUntilTheLockGoes) {
  TempDir dir;
  StoreOptions options = OptionsFor(dir.File("cache.db"));
  options.busy_timeout = absl::Milliseconds(50);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(options));
  std::unique_ptr<sqlite::Connection> other = OpenRaw(options.path);
  ASSERT_NE(other, nullptr);
  {
    ASSERT_OK_AND_ASSIGN(sqlite::Transaction held,
                         sqlite::Transaction::Begin(*other, sqlite::Transaction::Kind::kWrite));
    EXPECT_THAT(store->PutFamily(MakeFamily("blocked"), /*builtin=*/false),
                StatusIs(absl::StatusCode::kAborted,
                         AllOf(HasSubstr(options.path), HasSubstr("database is locked"))));
  }
  EXPECT_OK(store->PutFamily(MakeFamily("blocked"), /*builtin=*/false).status());
}

}  // namespace
}  // namespace autotune::cache
