#include "client/local_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
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
