#include "client/local_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

v1::LookupRequest Request(int64_t batch) {
  v1::LookupRequest request;
  request.set_family("gla_decode");
  (*request.mutable_problem()->mutable_dims())["batch"] = batch;
  (*request.mutable_problem()->mutable_dims())["dim"] = 128;
  request.mutable_problem()->set_dtype(v1::BFLOAT16);
  request.mutable_device()->set_name("NVIDIA H200");
  return request;
}

v1::LocalAnswer Answer(int64_t batch, const std::string& stored_at = "2026-12-01T10:00:00Z") {
  v1::LocalAnswer answer;
  *answer.mutable_request() = Request(batch);
  answer.mutable_response()->set_match(v1::EXACT);
  (*answer.mutable_response()->mutable_entry()->mutable_config()->mutable_params())["VEC"] = 4;
  answer.set_server("unix:///run/autotune.sock");
  answer.set_stored_at(stored_at);
  return answer;
}

class LocalCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(LocalCache cache, LocalCache::Open(dir_.path() + "/local"));
    cache_.emplace(std::move(cache));
  }
  testing::TempDir dir_;
  std::optional<LocalCache> cache_;
};

TEST_F(LocalCacheTest, AnswersComeBackByTheirLookup) {
  v1::LocalAnswer answer = Answer(8);
  answer.mutable_request()->set_include_cubin(true);
  answer.mutable_response()->set_cubin("not kept here");
  ASSERT_OK(cache_->PutAnswer(answer));
  // include_cubin does not make another lookup.
  ASSERT_OK_AND_ASSIGN(std::optional<v1::LocalAnswer> back, cache_->GetAnswer(Request(8)));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->response().entry().config().params().at("VEC"), 4);
  EXPECT_TRUE(back->response().cubin().empty());
  EXPECT_EQ(back->server(), "unix:///run/autotune.sock");
  ASSERT_OK_AND_ASSIGN(std::optional<v1::LocalAnswer> other, cache_->GetAnswer(Request(16)));
  EXPECT_FALSE(other.has_value());
  v1::LookupRequest exact_only = Request(8);
  exact_only.set_exact_only(true);
  EXPECT_NE(LocalCache::AnswerKey(exact_only), LocalCache::AnswerKey(Request(8)));
  v1::LookupRequest old_driver = Request(8);
  old_driver.set_driver_version("12.8");
  EXPECT_NE(LocalCache::AnswerKey(old_driver), LocalCache::AnswerKey(Request(8)));
}

TEST_F(LocalCacheTest, TheKeyIsTheDocumentedText) {
  // The Python client computes the same key from the same text.
  EXPECT_EQ(
      LocalCache::AnswerKey(Request(8)),
      Sha256Hex("autotune-lookup 1\ngla_decode\n\nbatch=8,dim=128\n3\nNVIDIA H200\n0\n0\n0\n\n"));
}

TEST_F(LocalCacheTest, ATornOrEditedAnswerIsDataLossAndWritingItAgainMendsIt) {
  ASSERT_OK(cache_->PutAnswer(Answer(8)));
  const std::string path = cache_->AnswerPath(Request(8));
  ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(path));
  ASSERT_OK(WriteFileAtomically(path, bytes.substr(0, bytes.size() - 3)));
  EXPECT_THAT(cache_->GetAnswer(Request(8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("does not match its seal")));
  std::string edited = bytes;
  edited[edited.size() - 1] ^= 1;
  ASSERT_OK(WriteFileAtomically(path, edited));
  EXPECT_THAT(cache_->GetAnswer(Request(8)), StatusIs(absl::StatusCode::kDataLoss, ::testing::_));
  ASSERT_OK(WriteFileAtomically(path, "garbage"));
  EXPECT_THAT(cache_->GetAnswer(Request(8)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no valid seal line")));
  ASSERT_OK(cache_->PutAnswer(Answer(8)));
  EXPECT_OK(cache_->GetAnswer(Request(8)).status());
}

TEST_F(LocalCacheTest, CubinsAreCheckedOnTheWayInAndOut) {
  const std::string cubin(5000, 'c');
  const std::string sha = Sha256Hex(cubin);
  EXPECT_THAT(cache_->PutCubin(Sha256Hex("other"), cubin),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not hash to")));
  EXPECT_THAT(cache_->PutCubin("../../etc/passwd", cubin),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> missing, cache_->GetCubin(sha));
  EXPECT_FALSE(missing.has_value());
  ASSERT_OK(cache_->PutCubin(sha, cubin));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> back, cache_->GetCubin(sha));
  EXPECT_EQ(back, cubin);

  // Damaged in place: refused, then stored again whole.
  {
    std::fstream file(cache_->CubinPath(sha), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('X');
  }
  EXPECT_THAT(cache_->GetCubin(sha),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("does not match its sha256")));
  ASSERT_OK(cache_->PutCubin(sha, cubin));
  ASSERT_OK_AND_ASSIGN(back, cache_->GetCubin(sha));
  EXPECT_EQ(back, cubin);
}

TEST_F(LocalCacheTest, RecipeSourcesAreKeptLikeCubins) {
  const std::string source = "extern \"C\" __global__ void k() {}\n";
  const std::string sha = Sha256Hex(source);
  EXPECT_THAT(cache_->PutSource(Sha256Hex("other"), source),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not hash to")));
  ASSERT_OK(cache_->PutSource(sha, source));
  EXPECT_EQ(cache_->SourcePath(sha), cache_->directory() + "/sources/" + sha + ".cu");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> back, cache_->GetSource(sha));
  EXPECT_EQ(back, source);
  {
    std::fstream file(cache_->SourcePath(sha), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2);
    file.put('X');
  }
  EXPECT_THAT(cache_->GetSource(sha),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("local source")));
  ASSERT_OK(cache_->PutSource(sha, source));  // mended: the damaged file is not kept
  ASSERT_OK_AND_ASSIGN(back, cache_->GetSource(sha));
  EXPECT_EQ(back, source);
}

// The answers of Answer(1..n), read back from their files as a start-up's
// writer does, and a cubin for each, named by its sha256.
struct PackContents {
  std::vector<LocalCache::PackedAnswer> answers;
  std::map<std::string, SharedBytes> cubins;
  google::protobuf::RepeatedPtrField<v1::LookupRequest> requests;
};

PackContents StoreAnswers(const LocalCache& cache, int n) {
  PackContents contents;
  for (int i = 1; i <= n; ++i) {
    // Sizes that are not multiples of the alignment, one of them empty.
    const std::string cubin = absl::StrCat("cubin ", i, std::string(i == 2 ? 0 : 1000 * i, 'x'));
    const std::string sha = Sha256Hex(cubin);
    v1::LocalAnswer answer = Answer(i);
    answer.mutable_response()->mutable_entry()->set_binary_sha256(sha);
    EXPECT_OK(cache.PutAnswer(answer));
    LocalCache::PackedAnswer packed;
    packed.key = LocalCache::AnswerKey(answer.request());
    absl::StatusOr<std::optional<v1::LocalAnswer>> back =
        cache.GetAnswer(answer.request(), &packed.stamp);
    EXPECT_TRUE(back.ok() && back->has_value());
    if (back.ok() && back->has_value()) packed.answer = **back;
    *contents.requests.Add() = answer.request();
    contents.answers.push_back(std::move(packed));
    contents.cubins[sha] = ShareBytes(cubin);
  }
  return contents;
}

void FlipByte(const std::string& path, int64_t from_end) {
  std::filesystem::permissions(path, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-from_end, std::ios::end);
  const char c = static_cast<char>(file.get());
  file.seekp(-from_end, std::ios::end);
  file.put(static_cast<char>(c ^ 1));
}

TEST_F(LocalCacheTest, APackKeyIsTheDocumentedTextOfItsRequestsInOrder) {
  google::protobuf::RepeatedPtrField<v1::LookupRequest> requests;
  *requests.Add() = Request(1);
  *requests.Add() = Request(2);
  const auto serialized = [](const v1::LookupRequest& request) {
    std::string bytes;
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
    coded.Trim();
    return bytes;
  };
  const std::string one = serialized(Request(1));
  const std::string two = serialized(Request(2));
  const std::string key = LocalCache::PackKey(requests);
  EXPECT_EQ(key, Sha256Hex(absl::StrCat("autotune-pack 2\n", one.size(), "\n", one, two.size(),
                                        "\n", two)));
  // include_cubin does not count; the order does.
  requests.Mutable(0)->set_include_cubin(true);
  EXPECT_EQ(LocalCache::PackKey(requests), key);
  requests.SwapElements(0, 1);
  EXPECT_NE(LocalCache::PackKey(requests), key);
}

TEST_F(LocalCacheTest, APackGivesBackItsAnswersAndCubinsFromOneReadOnlyFile) {
  const PackContents contents = StoreAnswers(*cache_, 3);
  const std::string key = LocalCache::PackKey(contents.requests);
  ASSERT_OK_AND_ASSIGN(std::optional<LocalCache::Pack> none, cache_->GetPack(key));
  EXPECT_FALSE(none.has_value());
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  struct stat info;
  ASSERT_EQ(stat(cache_->PackPath(key).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0222, 0u);  // read-only: never written in place

  ASSERT_OK_AND_ASSIGN(std::optional<LocalCache::Pack> pack, cache_->GetPack(key));
  ASSERT_TRUE(pack.has_value());
  EXPECT_EQ(pack->changed, 0);
  ASSERT_EQ(pack->answers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const LocalCache::PackedAnswer& packed = contents.answers[i];
    ASSERT_TRUE(pack->answers[i].has_value()) << i;
    const v1::LocalAnswer& back = *pack->answers[i];
    EXPECT_EQ(back.response().entry().binary_sha256(),
              packed.answer.response().entry().binary_sha256());
    EXPECT_EQ(back.stored_at(), packed.answer.stored_at());
    EXPECT_FALSE(back.has_request());  // the key names it
  }
  ASSERT_EQ(pack->cubins.size(), 3u);
  for (const auto& [sha, bytes] : contents.cubins) {
    ASSERT_TRUE(pack->cubins.contains(sha));
    EXPECT_EQ(*pack->cubins.at(sha), *bytes);
    // Each cubin starts at a multiple of 256 bytes in memory (the driver
    // reads an ELF image in place).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pack->cubins.at(sha)->data()) % 256, 0u);
  }
  // The views outlive the pack object and the file.
  const SharedBytes kept = pack->cubins.begin()->second;
  const std::string expected(*kept);
  pack.reset();
  std::filesystem::remove(cache_->PackPath(key));
  EXPECT_EQ(*kept, expected);
}

TEST_F(LocalCacheTest, ALookupWithoutAnAnswerKeepsItsPlaceInThePack) {
  PackContents contents = StoreAnswers(*cache_, 3);
  contents.answers[1] = LocalCache::PackedAnswer();  // the service had no answer for it
  const std::string key = LocalCache::PackKey(contents.requests);
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  ASSERT_OK_AND_ASSIGN(std::optional<LocalCache::Pack> pack, cache_->GetPack(key));
  ASSERT_EQ(pack->answers.size(), 3u);
  EXPECT_TRUE(pack->answers[0].has_value());
  EXPECT_FALSE(pack->answers[1].has_value());
  EXPECT_TRUE(pack->answers[2].has_value());
  EXPECT_EQ(pack->changed, 0);
}

TEST_F(LocalCacheTest, ThePackIsRewrittenOnlyWhenItsContentsChange) {
  PackContents contents = StoreAnswers(*cache_, 2);
  const std::string key = LocalCache::PackKey(contents.requests);
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  struct stat first;
  ASSERT_EQ(stat(cache_->PackPath(key).c_str(), &first), 0);
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  struct stat same;
  ASSERT_EQ(stat(cache_->PackPath(key).c_str(), &same), 0);
  EXPECT_EQ(same.st_ino, first.st_ino);  // kept, only its time refreshed
  contents.answers[0].answer.set_stored_at("2026-12-04T00:00:00Z");
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  struct stat changed;
  ASSERT_EQ(stat(cache_->PackPath(key).c_str(), &changed), 0);
  EXPECT_NE(changed.st_ino, first.st_ino);
}

TEST_F(LocalCacheTest, AnAnswerWrittenSinceThePackIsLeftToItsFile) {
  const PackContents contents = StoreAnswers(*cache_, 2);
  const std::string key = LocalCache::PackKey(contents.requests);
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  // Another process keeps a newer answer for lookup 1.
  ASSERT_OK(cache_->PutAnswer(Answer(1, "2026-12-05T00:00:00Z")));
  ASSERT_OK_AND_ASSIGN(std::optional<LocalCache::Pack> pack, cache_->GetPack(key));
  ASSERT_TRUE(pack.has_value());
  EXPECT_EQ(pack->changed, 1);
  ASSERT_EQ(pack->answers.size(), 2u);
  EXPECT_FALSE(pack->answers[0].has_value());
  EXPECT_TRUE(pack->answers[1].has_value());
  EXPECT_EQ(pack->cubins.size(), 2u);  // named by their bytes: never stale
}

TEST_F(LocalCacheTest, ADamagedPackIsDataLossNamingTheFileAndServesNothing) {
  const PackContents contents = StoreAnswers(*cache_, 3);
  const std::string key = LocalCache::PackKey(contents.requests);
  const std::string path = cache_->PackPath(key);
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  const std::string whole = *ReadFile(path);
  const auto restore = [&] {
    std::filesystem::remove(path);
    std::ofstream(path, std::ios::binary) << whole;
  };
  // A byte of the last cubin.
  FlipByte(path, 300);
  EXPECT_THAT(cache_->GetPack(key),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr(path), HasSubstr("(corrupted)"))));
  // A byte of the index.
  restore();
  std::fstream(path, std::ios::in | std::ios::out | std::ios::binary).seekp(60) << '~';
  EXPECT_THAT(cache_->GetPack(key),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("does not match its index's check")));
  // Cut short, in the index and in the data.
  for (const size_t size : {whole.size() / 20, whole.size() - 10}) {
    restore();
    std::filesystem::resize_file(path, size);
    EXPECT_THAT(cache_->GetPack(key), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)))
        << size;
  }
  // Not a pack at all.
  std::filesystem::remove(path);
  std::ofstream(path) << "autotune-answer 1 ...\n";
  EXPECT_THAT(cache_->GetPack(key),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("has no valid first line")));
  // Writing it again mends it.
  std::filesystem::remove(path);
  ASSERT_OK(cache_->PutPack(key, contents.answers, contents.cubins));
  ASSERT_OK_AND_ASSIGN(std::optional<LocalCache::Pack> pack, cache_->GetPack(key));
  EXPECT_EQ(pack->answers.size(), 3u);
}

TEST_F(LocalCacheTest, APackOfCubinsThatDoNotMatchTheirNamesIsNotWritten) {
  PackContents contents = StoreAnswers(*cache_, 1);
  contents.cubins[Sha256Hex("other")] = ShareBytes("not other");
  const std::string key = LocalCache::PackKey(contents.requests);
  EXPECT_THAT(cache_->PutPack(key, contents.answers, contents.cubins),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not hash to")));
  EXPECT_FALSE(std::filesystem::exists(cache_->PackPath(key)));
  EXPECT_THAT(cache_->PutPack("../answers/x", contents.answers, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pack key")));
}

TEST_F(LocalCacheTest, OnlyTheMostRecentlyWrittenPacksAreKept) {
  const PackContents contents = StoreAnswers(*cache_, 1);
  std::vector<std::string> keys;
  for (int i = 0; i < LocalCache::kPacksKept + 3; ++i) {
    google::protobuf::RepeatedPtrField<v1::LookupRequest> batch;
    *batch.Add() = Request(100 + i);
    keys.push_back(LocalCache::PackKey(batch));
    ASSERT_OK(cache_->PutPack(keys.back(), contents.answers, contents.cubins));
    // Times apart, so that the order is theirs and not the file system's.
    const timespec at[2] = {{.tv_sec = 1000 + i, .tv_nsec = 0}, {.tv_sec = 1000 + i, .tv_nsec = 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, cache_->PackPath(keys.back()).c_str(), at, 0), 0);
  }
  int kept = 0;
  for (int i = 0; i < static_cast<int>(keys.size()); ++i) {
    const bool exists = std::filesystem::exists(cache_->PackPath(keys[i]));
    EXPECT_EQ(exists, i >= 3) << i;
    kept += exists;
  }
  EXPECT_EQ(kept, LocalCache::kPacksKept);
}

TEST_F(LocalCacheTest, TwoProcessesWritingAtOnceNeverLeaveAPartialFile) {
  const std::string big(1 << 20, 'b');
  const std::string sha = Sha256Hex(big);
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    ASSERT_GE(children[c], 0);
    if (children[c] == 0) {
      absl::StatusOr<LocalCache> cache = LocalCache::Open(dir_.path() + "/local");
      bool ok = cache.ok();
      for (int i = 0; ok && i < 200; ++i) {
        v1::LocalAnswer answer = Answer(8, absl::StrCat("writer ", c, " round ", i));
        // Answers of different sizes, so a torn one could not pass as whole.
        answer.set_server(std::string(static_cast<size_t>(1 + (i * 37) % 4000), 's'));
        ok = cache->PutAnswer(answer).ok() && cache->PutCubin(sha, big).ok();
      }
      _exit(ok ? 0 : 1);
    }
  }
  int reads = 0;
  int running = 2;
  while (running > 0) {
    absl::StatusOr<std::optional<v1::LocalAnswer>> answer = cache_->GetAnswer(Request(8));
    ASSERT_OK(answer.status());
    absl::StatusOr<std::optional<std::string>> cubin = cache_->GetCubin(sha);
    ASSERT_OK(cubin.status());
    ++reads;
    running = 0;
    for (pid_t child : children) running += waitpid(child, nullptr, WNOHANG) == 0 ? 1 : 0;
  }
  for (pid_t child : children) waitpid(child, nullptr, 0);
  EXPECT_GT(reads, 0);
  ASSERT_OK_AND_ASSIGN(std::optional<v1::LocalAnswer> last, cache_->GetAnswer(Request(8)));
  ASSERT_TRUE(last.has_value());
  EXPECT_THAT(last->stored_at(), HasSubstr("round 199"));
}

TEST(LocalCacheDirectoryTest, FollowsTheEnvironment) {
  setenv("AUTOTUNE_LOCAL_CACHE", "/x/local", 1);
  EXPECT_EQ(LocalCache::DefaultDirectory(), "/x/local");
  unsetenv("AUTOTUNE_LOCAL_CACHE");
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(LocalCache::DefaultDirectory(), "/x/cache/autotune");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_THAT(LocalCache::DefaultDirectory(), ::testing::EndsWith("/.cache/autotune"));
  EXPECT_THAT(LocalCache::Open(""), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

}  // namespace
}  // namespace autotune::client
