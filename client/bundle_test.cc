#include "client/bundle.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using ::autotune::testing::TempDir;

// The names of the files in `dir`.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

v1::Binary MakeBinary(const std::string& sha, size_t bytes) {
  v1::Binary binary;
  binary.set_sha256(sha);
  binary.set_cubin(std::string(bytes, '\x7f'));
  binary.set_arch("sm_90");
  return binary;
}

v1::CacheBundle SampleBundle() {
  v1::CacheBundle bundle;
  bundle.set_format_version(1);
  v1::FamilyRecord* family = bundle.add_families();
  family->mutable_family()->set_name("flash_attn");
  family->set_content_hash("abc123");
  v1::Binary* binary = bundle.add_binaries();
  binary->set_sha256("d00d");
  // Bytes that are not text: NUL, 0xff, an ELF magic.
  binary->set_cubin(
      std::string("\x7f"
                  "ELF\0\xff\x01",
                  7));
  v1::Entry* entry = bundle.add_entries();
  entry->set_family("flash_attn");
  (*entry->mutable_problem()->mutable_dims())["batch"] = 8;
  entry->mutable_problem()->set_dtype(v1::BFLOAT16);
  (*entry->mutable_config()->mutable_params())["BLOCK_M"] = 128;
  entry->mutable_timing()->set_median_us(12.5);
  entry->set_binary_sha256("d00d");
  return bundle;
}

TEST(BundleFileTest, RoundTripsThroughAFile) {
  TempDir dir;
  const v1::CacheBundle bundle = SampleBundle();
  ASSERT_OK(WriteBundleFile(dir.File("cache.json"), bundle));
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle read, ReadBundleFile(dir.File("cache.json")));
  EXPECT_TRUE(MessageDifferencer::Equals(read, bundle)) << read.DebugString();
  // Only the bundle is left: the temporary file was renamed into place.
  EXPECT_THAT(FilesIn(dir.path()), ElementsAre("cache.json"));
}

TEST(BundleFileTest, OverwritesAnExistingFile) {
  TempDir dir;
  WriteText(dir.File("cache.json"), "old contents");
  ASSERT_OK(WriteBundleFile(dir.File("cache.json"), SampleBundle()));
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle read, ReadBundleFile(dir.File("cache.json")));
  EXPECT_EQ(read.entries_size(), 1);
}

TEST(BundleFileTest, RoundTripsThroughStreams) {
  std::stringstream stream;
  ASSERT_OK(WriteBundle(SampleBundle(), stream, "<memory>"));
  EXPECT_THAT(stream.str(), HasSubstr("\"binary_sha256\""));
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle read, ReadBundle(stream, "<memory>"));
  EXPECT_TRUE(MessageDifferencer::Equals(read, SampleBundle()));
}

TEST(BundleFileTest, MissingFileIsNotFoundAndNamed) {
  TempDir dir;
  EXPECT_THAT(ReadBundleFile(dir.File("absent.json")),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(dir.File("absent.json")), HasSubstr("No such file"))));
}

TEST(BundleFileTest, BadJsonNamesTheFileAndTheParserMessage) {
  TempDir dir;
  WriteText(dir.File("broken.json"), "{\"entries\": [ {\"family\": ");
  EXPECT_THAT(
      ReadBundleFile(dir.File("broken.json")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr(dir.File("broken.json")), HasSubstr("is not a cache bundle: "))));
}

TEST(BundleFileTest, WrongFieldTypeIsRejected) {
  TempDir dir;
  WriteText(dir.File("typed.json"), R"({"entries": "not a list"})");
  EXPECT_THAT(ReadBundleFile(dir.File("typed.json")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("typed.json")));
}

TEST(BundleFileTest, UnknownFieldsFromANewerServerAreIgnored) {
  TempDir dir;
  WriteText(dir.File("newer.json"),
            R"({"format_version": 1, "entries": [{"family": "f", "future_field": 3}],
                "future_section": {"x": 1}})");
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle read, ReadBundleFile(dir.File("newer.json")));
  ASSERT_EQ(read.entries_size(), 1);
  EXPECT_EQ(read.entries(0).family(), "f");
}

TEST(BundleFileTest, NewerFormatVersionIsRefused) {
  TempDir dir;
  WriteText(dir.File("v2.json"), R"({"format_version": 2})");
  EXPECT_THAT(ReadBundleFile(dir.File("v2.json")),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("v2.json"), HasSubstr("format_version 2"))));
}

TEST(BundleFileTest, WriteIntoMissingDirectoryNamesTheFile) {
  TempDir dir;
  const std::string path = dir.File("no/such/dir/cache.json");
  EXPECT_THAT(WriteBundleFile(path, SampleBundle()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
}

size_t RecordBytes(const v1::CacheBundle& part) {
  v1::CacheBundle records = part;
  records.clear_format_version();
  return records.ByteSizeLong();
}

v1::CacheBundle Concatenate(const std::vector<v1::CacheBundle>& parts) {
  v1::CacheBundle whole;
  for (const v1::CacheBundle& part : parts) whole.MergeFrom(part);
  return whole;
}

TEST(SplitBundleTest, EmptyBundleIsOneEmptyPartWithTheVersion) {
  const std::vector<v1::CacheBundle> parts = SplitBundle(v1::CacheBundle());
  ASSERT_THAT(parts, SizeIs(1));
  EXPECT_EQ(parts[0].format_version(), kBundleFormatVersion);
  EXPECT_EQ(RecordBytes(parts[0]), 0u);
}

TEST(SplitBundleTest, SmallBundleIsOnePart) {
  const std::vector<v1::CacheBundle> parts = SplitBundle(SampleBundle());
  ASSERT_THAT(parts, SizeIs(1));
  EXPECT_TRUE(MessageDifferencer::Equals(parts[0], SampleBundle()));
}

TEST(SplitBundleTest, PartsStayUnderTheLimitAndKeepOrder) {
  v1::CacheBundle bundle = SampleBundle();
  for (int i = 0; i < 30; ++i) *bundle.add_binaries() = MakeBinary(absl::StrCat("b", i), 100000);
  for (int i = 0; i < 500; ++i) bundle.add_measurements()->set_detail(std::string(900, 'm'));
  const size_t limit = 1 << 20;

  const std::vector<v1::CacheBundle> parts = SplitBundle(bundle, limit);
  // 3 MB of binaries and 0.45 MB of measurements: at least four parts.
  ASSERT_GE(parts.size(), 4u);
  for (const v1::CacheBundle& part : parts) EXPECT_LE(RecordBytes(part), limit);
  for (const v1::CacheBundle& part : parts) EXPECT_EQ(part.format_version(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(Concatenate(parts), bundle));
}

TEST(SplitBundleTest, BinaryLargerThanTheLimitTravelsAlone) {
  v1::CacheBundle bundle;
  *bundle.add_binaries() = MakeBinary("small1", 1000);
  *bundle.add_binaries() = MakeBinary("huge", 3 << 20);
  *bundle.add_binaries() = MakeBinary("small2", 1000);

  const std::vector<v1::CacheBundle> parts = SplitBundle(bundle, 2 << 20);
  ASSERT_THAT(parts, SizeIs(3));
  ASSERT_THAT(parts[1].binaries(), SizeIs(1));
  EXPECT_EQ(parts[1].binaries(0).sha256(), "huge");
  EXPECT_EQ(parts[0].binaries(0).sha256(), "small1");
  EXPECT_EQ(parts[2].binaries(0).sha256(), "small2");
}

}  // namespace
}  // namespace autotune::client
