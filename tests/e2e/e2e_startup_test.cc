// End to end: the start-up lookups of an inference server (client/
// startup_lookup.h) against the real autotuned holding the quick start's
// sample (vector_scale bf16 n=4096 at batch 1, 8 and 64 on an H200), with
// the service up, stopped, and hung.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "client/bundle.h"
#include "client/kernel_loader.h"
#include "client/local_cache.h"
#include "client/startup_lookup.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::autotune::client::AnswerSource;
using ::autotune::client::StartupAnswer;
using ::autotune::client::StartupLookup;
using ::autotune::client::StartupOptions;
using ::testing::HasSubstr;
using ::testing::Not;

v1::LookupRequest Request(int64_t batch, int64_t n = 4096,
                          const std::string& family = "vector_scale") {
  v1::LookupRequest request;
  request.set_family(family);
  (*request.mutable_problem()->mutable_dims())["batch"] = batch;
  (*request.mutable_problem()->mutable_dims())["n"] = n;
  request.mutable_problem()->set_dtype(v1::BFLOAT16);
  return request;
}

// EXACT, NEAREST, MISS (no entry for n=1000) and an unknown family.
std::vector<v1::LookupRequest> ServerShapes() {
  return {Request(8), Request(12), Request(8, 1000), Request(8, 4096, "no_such_family")};
}

class StartupEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{"--kernels", "none"});
    ASSERT_OK(daemon_->Start());
    SampleBundleOptions options;
    options.entries = QuickstartEntries();
    options.cubin_kind = CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 4096;
    ASSERT_OK_AND_ASSIGN(bundle_, MakeSampleBundle(options));
    const std::string path = dir_.path() + "/sample.json";
    ASSERT_OK(client::WriteBundleFile(path, bundle_));
    CommandResult imported =
        RunCommand({AutotuneCliPath(), "--server", daemon_->address(), "import", path});
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    // Import keeps the daemon's own compile of each entry, never the
    // bundle's bytes: what a reader gets is what the daemon compiled. Read
    // back by an export (a lookup here would warm the daemon's cubin cache).
    const std::string exported_path = dir_.path() + "/served.json";
    CommandResult exported = RunCommand(
        {AutotuneCliPath(), "--server", daemon_->address(), "export", "--out", exported_path});
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
    ASSERT_OK_AND_ASSIGN(v1::CacheBundle served, client::ReadBundleFile(exported_path));
    ASSERT_EQ(served.binaries_size(), 1);
    served_cubin_ = served.binaries(0).cubin();
    ASSERT_NE(served_cubin_, bundle_.binaries(0).cubin());
  }
  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Stop();
  }

  std::unique_ptr<StartupLookup> Lookup(const std::string& address, const std::string& local,
                                        absl::Duration deadline = absl::Seconds(5)) {
    StartupOptions options;
    options.client.address = address;
    options.deadline = deadline;
    options.local_cache_dir = local;
    options.device.set_name("NVIDIA H200");
    auto lookup = StartupLookup::Create(options);
    EXPECT_OK(lookup.status());
    return lookup.ok() ? std::move(*lookup) : nullptr;
  }
  std::string LocalDir() const { return dir_.path() + "/local"; }
  // The cubin the daemon serves for the sample's entries (its own compile).
  const std::string& SampleCubin() const { return served_cubin_; }

  // The answers the service gives to ServerShapes(), checked.
  void ExpectServerShapesAnswered(const std::vector<StartupAnswer>& answers, AnswerSource source) {
    ASSERT_EQ(answers.size(), 4u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_OK(answers[i].error) << i;
      EXPECT_EQ(answers[i].source, source) << i;
    }
    EXPECT_EQ(answers[0].response.match(), v1::EXACT);
    ASSERT_NE(answers[0].cubin, nullptr);
    EXPECT_EQ(*answers[0].cubin, SampleCubin());
    EXPECT_EQ(answers[1].response.match(), v1::NEAREST);
    EXPECT_EQ(answers[1].response.entry().problem().dims().at("batch"), 8);
    ASSERT_NE(answers[1].cubin, nullptr);
    EXPECT_EQ(*answers[1].cubin, SampleCubin());
    // The miss carries what to run untuned.
    EXPECT_EQ(answers[2].response.match(), v1::MISS);
    EXPECT_EQ(answers[2].response.miss_kind(), v1::MISS_NO_ENTRY);
    EXPECT_EQ(answers[2].response.default_config().params().at("BLOCK"), 256);
    EXPECT_EQ(answers[2].cubin, nullptr);
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  v1::CacheBundle bundle_;
  std::string served_cubin_;
};

TEST_F(StartupEndToEndTest, TheServiceAnswersAndTheLocalCacheKeepsTheAnswers) {
  auto lookup = Lookup(daemon_->address(), LocalDir());
  ASSERT_NE(lookup, nullptr);
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(answers, AnswerSource::kService);
  EXPECT_THAT(answers[3].error, StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_family")));
  EXPECT_THAT(answers[0].note, HasSubstr("answered by " + daemon_->address()));
  // What a restart will find, once written.
  ASSERT_OK(lookup->FlushLocalCache());
  const client::LocalCache& local = *lookup->local_cache();
  ASSERT_OK_AND_ASSIGN(std::optional<v1::LocalAnswer> kept, local.GetAnswer(answers[0].request));
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->server(), daemon_->address());
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> cubin, local.GetCubin(Sha256Hex(SampleCubin())));
  EXPECT_EQ(cubin, SampleCubin());
}

TEST_F(StartupEndToEndTest, StartsFromSeveralThreadsAtOnceShareOneLookup) {
  auto lookup = Lookup(daemon_->address(), LocalDir());
  std::vector<std::thread> threads;
  std::atomic<int> answered{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 5; ++round) {
        const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
        if (answers.size() == 4 && answers[0].response.match() == v1::EXACT &&
            answers[0].cubin != nullptr && *answers[0].cubin == SampleCubin()) {
          ++answered;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(answered.load(), 20);
  ASSERT_OK(lookup->FlushLocalCache());
}

TEST_F(StartupEndToEndTest, WithTheServiceDownAWarmLocalCacheAnswers) {
  Lookup(daemon_->address(), LocalDir())->LookupAll(ServerShapes());
  const std::string address = daemon_->address();
  EXPECT_EQ(daemon_->Stop(), 0);
  daemon_.reset();

  auto lookup = Lookup(address, LocalDir());
  const absl::Time start = absl::Now();
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ExpectServerShapesAnswered(answers, AnswerSource::kLocalCache);
  EXPECT_THAT(answers[0].note, HasSubstr("the service did not answer"));
  EXPECT_THAT(answers[0].note, HasSubstr("answer stored"));
  // Never answered by the service, so never kept: an error that says both.
  EXPECT_THAT(answers[3].error,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("has no answer for it")));
}

TEST_F(StartupEndToEndTest, WithTheServiceDownAColdLocalCacheFailsWithinTheDeadline) {
  const std::string address = daemon_->address();
  EXPECT_EQ(daemon_->Stop(), 0);
  daemon_.reset();
  auto lookup = Lookup(address, dir_.path() + "/cold", absl::Seconds(1));
  const absl::Time start = absl::Now();
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  for (const StartupAnswer& answer : answers) {
    EXPECT_THAT(answer.error,
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the service did not answer")));
    EXPECT_THAT(answer.error.message(), HasSubstr(address));
    EXPECT_THAT(answer.error.message(), HasSubstr("has no answer for it"));
  }
}

TEST_F(StartupEndToEndTest, AHungServiceCostsTheDeadlineAndNoMore) {
  Lookup(daemon_->address(), LocalDir())->LookupAll(ServerShapes());
  // A socket that accepts connections and never says a word.
  const std::string path = dir_.path() + "/hung.sock";
  const int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 16), 0);

  auto lookup = Lookup("unix://" + path, LocalDir(), absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  const absl::Duration took = absl::Now() - start;
  close(listener);
  EXPECT_GE(took, absl::Milliseconds(400));
  EXPECT_LT(took, absl::Milliseconds(1500));
  ExpectServerShapesAnswered(answers, AnswerSource::kLocalCache);
}

// Removes the local cache's packs: what follows reads file by file.
void RemovePacks(const client::LocalCache& local) {
  std::filesystem::remove_all(local.directory() + "/packs");
  std::filesystem::create_directory(local.directory() + "/packs");
}

TEST_F(StartupEndToEndTest, ADamagedLocalCubinIsRefusedAndFetchedAgain) {
  auto lookup = Lookup(daemon_->address(), LocalDir());
  lookup->LookupAll(ServerShapes());
  ASSERT_OK(lookup->FlushLocalCache());
  RemovePacks(*lookup->local_cache());
  const std::string cubin_path = lookup->local_cache()->CubinPath(Sha256Hex(SampleCubin()));
  {
    std::fstream file(cubin_path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(10);
    file.put('X');
  }
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(answers, AnswerSource::kService);
  EXPECT_THAT(answers[0].note, HasSubstr("does not match its sha256"));
  EXPECT_THAT(answers[0].note, HasSubstr("fetched again"));
  ASSERT_OK(lookup->FlushLocalCache());
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> mended,
                       lookup->local_cache()->GetCubin(Sha256Hex(SampleCubin())));
  EXPECT_EQ(mended, SampleCubin());

  // With the service down, a damaged cubin is refused, not served.
  RemovePacks(*lookup->local_cache());
  {
    std::fstream file(cubin_path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(10);
    file.put('Y');
  }
  const std::string address = daemon_->address();
  EXPECT_EQ(daemon_->Stop(), 0);
  daemon_.reset();
  const std::vector<StartupAnswer> offline = Lookup(address, LocalDir())->LookupAll(ServerShapes());
  EXPECT_EQ(offline[0].response.match(), v1::EXACT);
  EXPECT_EQ(offline[0].cubin, nullptr);
  EXPECT_THAT(offline[0].note, HasSubstr("does not match its sha256"));
}

// A cubin damaged in the daemon's store fails the GetBinaries call that
// asks for it: the answers stand, without the cubins of that call, and say
// why (the kernel loader then compiles their recipes).
TEST_F(StartupEndToEndTest, ACubinDamagedOnTheServiceCostsTheCubinsOfItsCallNotTheAnswers) {
  ASSERT_OK(CorruptEveryStoredBinary(daemon_->db_path()));
  auto lookup = Lookup(daemon_->address(), LocalDir());
  ASSERT_NE(lookup, nullptr);
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  ASSERT_EQ(answers.size(), 4u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_OK(answers[i].error) << i;
    EXPECT_EQ(answers[i].source, AnswerSource::kService) << i;
    EXPECT_EQ(answers[i].cubin, nullptr) << i;
    EXPECT_THAT(answers[i].note, HasSubstr("its cubin was not fetched")) << i;
    EXPECT_THAT(answers[i].note, HasSubstr("corrupt")) << i;
  }
  EXPECT_EQ(answers[0].response.match(), v1::EXACT);
  EXPECT_EQ(answers[1].response.match(), v1::NEAREST);
}

// A start keeps its batch's answers and cubins in one pack, which the next
// start with the service down maps instead of reading each file; a damaged
// pack is refused whole and the files answer, and an answer kept since by
// another process wins over the pack's.
TEST_F(StartupEndToEndTest, WithTheServiceDownTheBatchsPackAnswersUnlessItIsDamagedOrOlder) {
  auto lookup = Lookup(daemon_->address(), LocalDir());
  const std::vector<StartupAnswer> first = lookup->LookupAll(ServerShapes());
  ASSERT_OK(lookup->FlushLocalCache());
  const client::LocalCache& local = *lookup->local_cache();
  google::protobuf::RepeatedPtrField<v1::LookupRequest> sent;
  for (const StartupAnswer& answer : first) *sent.Add() = answer.request;
  const std::string pack_path = local.PackPath(client::LocalCache::PackKey(sent));
  ASSERT_TRUE(std::filesystem::exists(pack_path));
  const std::string address = daemon_->address();
  EXPECT_EQ(daemon_->Stop(), 0);
  daemon_.reset();

  // The pack alone answers: the cubin files are gone.
  std::filesystem::remove(local.CubinPath(Sha256Hex(SampleCubin())));
  std::vector<StartupAnswer> offline = Lookup(address, LocalDir())->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(offline, AnswerSource::kLocalCache);
  EXPECT_THAT(offline[0].note, Not(HasSubstr("local pack")));

  // Damaged: refused whole, the files answer (here without the cubin).
  {
    std::filesystem::permissions(pack_path, std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
    std::fstream file(pack_path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put('Z');
  }
  offline = Lookup(address, LocalDir())->LookupAll(ServerShapes());
  EXPECT_EQ(offline[0].response.match(), v1::EXACT);
  EXPECT_EQ(offline[0].cubin, nullptr);
  EXPECT_THAT(offline[0].note, HasSubstr("local pack " + pack_path));
  EXPECT_THAT(offline[0].note, HasSubstr("read file by file"));
  EXPECT_THAT(offline[0].note, HasSubstr("its cubin is not in the local cache"));
}

TEST_F(StartupEndToEndTest, AnAnswerKeptSinceThePackWinsOverIt) {
  auto lookup = Lookup(daemon_->address(), LocalDir());
  const std::vector<StartupAnswer> first = lookup->LookupAll(ServerShapes());
  ASSERT_OK(lookup->FlushLocalCache());
  const std::string address = daemon_->address();
  EXPECT_EQ(daemon_->Stop(), 0);
  daemon_.reset();
  // Another server on this host kept a newer answer for the first lookup.
  v1::LocalAnswer newer;
  *newer.mutable_request() = first[0].request;
  *newer.mutable_response() = first[0].response;
  (*newer.mutable_response()->mutable_entry()->mutable_config()->mutable_params())["BLOCK"] = 1024;
  newer.set_server("unix:///elsewhere.sock");
  newer.set_stored_at("2026-12-05T00:00:00Z");
  ASSERT_OK(lookup->local_cache()->PutAnswer(newer));
  const std::vector<StartupAnswer> offline = Lookup(address, LocalDir())->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(offline, AnswerSource::kLocalCache);
  EXPECT_EQ(offline[0].response.entry().config().params().at("BLOCK"), 1024);
  EXPECT_THAT(offline[0].note, HasSubstr("by unix:///elsewhere.sock"));
  EXPECT_EQ(offline[1].response.entry().config().params().at("BLOCK"),
            first[1].response.entry().config().params().at("BLOCK"));
}

// Each answer carries the recipe of its config, and its source comes from
// the service or, with the service down, from the local cache: what a
// kernel loader compiles here when no binary loads.
TEST_F(StartupEndToEndTest, AnswersCarryRecipesWhoseSourceTheLocalCacheKeeps) {
  const std::string& source = bundle_.families(0).family().source();
  auto lookup = Lookup(daemon_->address(), LocalDir());
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(answers, AnswerSource::kService);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(answers[i].response.has_recipe()) << i;
    ASSERT_NE(answers[i].recipe_source, nullptr) << i;
    EXPECT_EQ(*answers[i].recipe_source, source);
  }
  EXPECT_EQ(answers[0].recipe_source, answers[2].recipe_source);  // one copy, shared
  // The MISS's recipe builds the default config, the others the entry's.
  EXPECT_THAT(answers[2].response.recipe().options(), ::testing::Contains("-DBLOCK=256"));
  EXPECT_THAT(answers[0].response.recipe().options(),
              ::testing::Contains(absl::StrCat(
                  "-DBLOCK=", answers[0].response.entry().config().params().at("BLOCK"))));
  // The recipe compiles with this host's NVRTC (when there is one).
  absl::StatusOr<client::LocalBinary> compiled =
      client::CompileRecipe(answers[2].response.recipe(), *answers[2].recipe_source, "sm_90");
  if (!absl::IsFailedPrecondition(compiled.status())) {
    ASSERT_OK(compiled.status());
    EXPECT_EQ(compiled->function_name, "vector_scale");
  }
  ASSERT_OK(lookup->FlushLocalCache());
  const std::string path =
      lookup->local_cache()->SourcePath(answers[0].response.recipe().source_sha256());
  lookup.reset();  // its open channel would hold the daemon's shutdown up

  const std::string address = daemon_->address();
  EXPECT_EQ(daemon_->Stop(), 0);
  daemon_.reset();
  const std::vector<StartupAnswer> offline = Lookup(address, LocalDir())->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(offline, AnswerSource::kLocalCache);
  ASSERT_NE(offline[2].recipe_source, nullptr);
  EXPECT_EQ(*offline[2].recipe_source, source);

  // A damaged source is refused, not compiled.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(3);
    file.put('#');
  }
  const std::vector<StartupAnswer> damaged = Lookup(address, LocalDir())->LookupAll(ServerShapes());
  EXPECT_EQ(damaged[2].recipe_source, nullptr);
  EXPECT_THAT(damaged[2].note, HasSubstr("does not match its sha256"));
}

TEST_F(StartupEndToEndTest, AnEntryBuiltForANewerDriverIsNotServedAsExact) {
  StartupOptions options;
  options.client.address = daemon_->address();
  options.local_cache_dir = "none";
  options.device.set_name("NVIDIA H200");
  options.driver_version = "12.8";  // the sample's binaries are NVRTC 13.0
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StartupLookup> lookup, StartupLookup::Create(options));
  const std::vector<StartupAnswer> answers = lookup->LookupAll({Request(8)});
  ASSERT_OK(answers[0].error);
  EXPECT_EQ(answers[0].response.match(), v1::MISS);
  EXPECT_EQ(answers[0].response.miss_kind(), v1::MISS_DRIVER_TOO_OLD);
  EXPECT_EQ(answers[0].response.entry().config().params().at("BLOCK"),
            bundle_.entries(0).config().params().at("BLOCK"));
  EXPECT_EQ(answers[0].cubin, nullptr);
}

TEST_F(StartupEndToEndTest, TuneOnMissAsksForTheMissesOnlyAndSaysWhatTheServiceDid) {
  StartupOptions options;
  options.client.address = daemon_->address();
  options.local_cache_dir = LocalDir();
  options.device.set_name("NVIDIA H200");
  options.tune_on_miss = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StartupLookup> lookup, StartupLookup::Create(options));
  const std::vector<StartupAnswer> answers = lookup->LookupAll(ServerShapes());
  ExpectServerShapesAnswered(answers, AnswerSource::kService);
  EXPECT_FALSE(answers[0].tuning.has_value());  // EXACT
  EXPECT_FALSE(answers[1].tuning.has_value());  // NEAREST
  // This daemon has no GPU: the miss cannot be tuned here, and says why.
  ASSERT_TRUE(answers[2].tuning.has_value());
  EXPECT_EQ(answers[2].tuning->state(), v1::TUNING_REFUSED);
  EXPECT_THAT(answers[2].note, HasSubstr("tune-on-miss: TUNING_REFUSED: this daemon cannot tune"));
}

}  // namespace
}  // namespace autotune::testing
