// End to end: the real autotuned on a temporary socket and database, driven
// through the autotune CLI and the C++ client library.
#include <sqlite3.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_matchers.h"
#include "base/version.h"
#include "client/bundle.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/problem.h"
#include "tests/support/daemon_test.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class CacheEndToEndTest : public DaemonTest {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    // Only the sample family: these tests count what the cache holds.
    ASSERT_OK(StartDaemon({"--kernels", "none"}));
    // The quick start's sample: vector_scale bf16 n=4096, batch 1, 8, 64.
    SampleBundleOptions options;
    options.entries = QuickstartEntries();
    options.cubin_kind = CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 4096;
    ASSERT_OK_AND_ASSIGN(bundle_, MakeSampleBundle(options));
    bundle_path_ = dir_.path() + "/sample.json";
    ASSERT_OK(client::WriteBundleFile(bundle_path_, bundle_));
  }

  void TearDown() override { StopDaemon(); }

  void ImportSample() {
    CommandResult result = Cli({"import", bundle_path_});
    ASSERT_EQ(result.exit_code, 0) << result.err;
  }

  v1::LookupResponse LookupJson(const std::string& dims, const std::string& dtype,
                                std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"lookup", "vector_scale", "--dims",      dims,    "--dtype",
                                     dtype,    "--device",     "NVIDIA H200", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult result = Cli(args);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    v1::LookupResponse response;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &response).ok())
        << result.out;
    return response;
  }

  int64_t EntryCount() {
    auto client = Connect();
    v1::ListEntriesRequest request;
    auto listed = client->ListEntries(request);
    EXPECT_OK(listed);
    return listed.ok() ? listed->total() : -1;
  }

  std::unique_ptr<client::Client> Connect() {
    client::ClientOptions options;
    options.address = daemon_->address();
    auto connected = client::Client::Connect(options);
    EXPECT_OK(connected);
    return connected.ok() ? std::move(*connected) : nullptr;
  }

  v1::CacheBundle bundle_;
  std::string bundle_path_;
};

TEST_F(CacheEndToEndTest, ImportedEntryIsExactNeighbourIsNearestUnknownIsMiss) {
  ImportSample();

  v1::LookupResponse exact = LookupJson("batch=8,n=4096", "bf16");
  EXPECT_EQ(exact.match(), v1::EXACT);
  EXPECT_EQ(exact.entry().problem().dims().at("batch"), 8);
  EXPECT_EQ(exact.entry().config().params().at("BLOCK"), 256);

  // 12 is nearer to 8 than to 64 in log2 terms (0.58 vs 2.4).
  v1::LookupResponse nearest = LookupJson("batch=12,n=4096", "bf16");
  EXPECT_EQ(nearest.match(), v1::NEAREST);
  EXPECT_EQ(nearest.entry().problem().dims().at("batch"), 8);
  ASSERT_EQ(nearest.distance_size(), 1);
  EXPECT_EQ(nearest.distance(0).requested(), 12);
  EXPECT_EQ(nearest.distance(0).tuned(), 8);

  // n is not bucketed: no stand-in for another n, nor for another dtype.
  EXPECT_EQ(LookupJson("batch=8,n=1024", "bf16").match(), v1::MISS);
  EXPECT_EQ(LookupJson("batch=8,n=4096", "fp16").match(), v1::MISS);
  // --exact refuses the neighbour, and says so.
  const v1::LookupResponse exact_only = LookupJson("batch=12,n=4096", "bf16", {"--exact"});
  EXPECT_EQ(exact_only.match(), v1::MISS);
  EXPECT_EQ(exact_only.miss_kind(), v1::MISS_EXACT_ONLY);

  // The human form says the same, and a MISS still exits 0.
  CommandResult miss = Cli({"lookup", "vector_scale", "--dims", "batch=8,n=1024", "--dtype", "bf16",
                            "--device", "NVIDIA H200"});
  EXPECT_EQ(miss.exit_code, 0) << miss.err;
  EXPECT_THAT(miss.out, HasSubstr("MISS"));
  EXPECT_THAT(miss.out, HasSubstr("why          no-entry"));
}

TEST_F(CacheEndToEndTest, LookupsWithoutDeviceNameAreAnsweredWhenUnambiguous) {
  ImportSample();
  CommandResult result =
      Cli({"lookup", "vector_scale", "--dims", "batch=64,n=4096", "--dtype", "bf16", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  v1::LookupResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &response).ok());
  EXPECT_EQ(response.match(), v1::EXACT);
  EXPECT_EQ(response.entry().device().name(), "NVIDIA H200");
}

TEST_F(CacheEndToEndTest, BadInputNamesTheFieldAndUnknownFamilyIsNotFound) {
  ImportSample();
  CommandResult unknown = Cli({"lookup", "no_such_family", "--dims", "batch=8", "--dtype", "bf16",
                               "--device", "NVIDIA H200"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(unknown.err, HasSubstr("no_such_family"));

  CommandResult bad_dim = Cli({"lookup", "vector_scale", "--dims", "batch=8,heads=4,n=4096",
                               "--dtype", "bf16", "--device", "NVIDIA H200"});
  EXPECT_EQ(bad_dim.exit_code, 1);
  EXPECT_THAT(bad_dim.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad_dim.err,
              HasSubstr("request.problem.dims['heads']: not a dim of family 'vector_scale'"));

  CommandResult usage = Cli({"lookup", "vector_scale", "--dims", "batch=x", "--dtype", "bf16"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("batch"));
}

TEST_F(CacheEndToEndTest, BatchLookupThroughTheClientLibraryShipsEachCubinOnce) {
  ImportSample();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  v1::BatchLookupRequest request;
  request.set_include_cubin(true);
  for (int64_t batch : {1, 8, 12, 64, 3}) {
    v1::LookupRequest* lookup = request.add_lookups();
    lookup->set_family("vector_scale");
    (*lookup->mutable_problem()->mutable_dims())["batch"] = batch;
    (*lookup->mutable_problem()->mutable_dims())["n"] = 4096;
    lookup->mutable_problem()->set_dtype(v1::BFLOAT16);
    lookup->mutable_device()->set_name("NVIDIA H200");
  }
  v1::LookupRequest* bad = request.add_lookups();
  bad->set_family("vector_scale");
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse response, client->BatchLookup(request));
  ASSERT_EQ(response.results_size(), 6);
  EXPECT_EQ(response.results(0).response().match(), v1::EXACT);
  EXPECT_EQ(response.results(1).response().match(), v1::EXACT);
  EXPECT_EQ(response.results(2).response().match(), v1::NEAREST);
  EXPECT_EQ(response.results(3).response().match(), v1::EXACT);
  EXPECT_EQ(response.results(4).response().match(), v1::NEAREST);
  // A bad item is answered with its own error; the others are unaffected.
  EXPECT_EQ(response.results(5).error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(response.results(5).error_message(), HasSubstr("lookups[5].problem"));
  // One variant serves every entry of the quick start: one binary.
  ASSERT_EQ(response.binaries_size(), 1);
  const std::string& sha = response.results(0).response().entry().binary_sha256();
  ASSERT_TRUE(response.binaries().contains(sha));
  // The daemon's own compile of the entry, not the bytes the bundle brought.
  EXPECT_NE(response.binaries().at(sha), bundle_.binaries(0).cubin());
  EXPECT_TRUE(
      response.binaries().at(sha).starts_with("\x7f"
                                              "ELF"));
}

// The files servers read today, read back the way vLLM reads them.
TEST_F(CacheEndToEndTest, ExportConfigsWritesTheJsonLayoutServersReadToday) {
  ImportSample();
  const std::string out = dir_.path() + "/configs";
  CommandResult exported = Cli({"export-configs", "vector_scale", "--out", out});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_THAT(exported.out, HasSubstr("wrote 1 files (3 configs of 3 entries)"));
  const std::string file = out + "/n=4096,device_name=NVIDIA_H200,dtype=bf16.json";
  const auto config_of = [&](int64_t batch) {
    for (const v1::Entry& entry : bundle_.entries()) {
      if (entry.problem().dims().at("batch") != batch) continue;
      std::map<std::string, int64_t> params(entry.config().params().begin(),
                                            entry.config().params().end());
      std::vector<std::string> fields;
      for (const auto& [name, value] : params)
        fields.push_back(absl::StrCat("\"", name, "\": ", value));
      return absl::StrCat("{", absl::StrJoin(fields, ", "), "}\n");
    }
    return std::string("none");
  };
  for (auto [m, tuned] : {std::pair<int64_t, int64_t>{1, 1}, {12, 8}, {40, 64}, {500, 64}}) {
    CommandResult read = RunCommand(
        {PYTHON3_EXECUTABLE, AUTOTUNE_TESTS_DIR "/vllm_config_reader.py", file, absl::StrCat(m)});
    ASSERT_EQ(read.exit_code, 0) << read.err;
    EXPECT_EQ(read.out, config_of(tuned)) << "M=" << m;
  }
  CommandResult unknown = Cli({"export-configs", "nope", "--out", out});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("unknown family 'nope'"));
}

TEST_F(CacheEndToEndTest, InvalidateRemovesExactlyWhatItNames) {
  ImportSample();
  ASSERT_EQ(EntryCount(), 3);

  CommandResult dry = Cli({"invalidate", "--family", "vector_scale", "--dims", "batch=8,n=4096",
                           "--dtype", "bf16", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(EntryCount(), 3);

  CommandResult one = Cli(
      {"invalidate", "--family", "vector_scale", "--dims", "batch=8,n=4096", "--dtype", "bf16"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(EntryCount(), 2);
  // Batch 8 is gone: it is now answered from a neighbour, the others stay exact.
  EXPECT_EQ(LookupJson("batch=8,n=4096", "bf16").match(), v1::NEAREST);
  EXPECT_EQ(LookupJson("batch=1,n=4096", "bf16").match(), v1::EXACT);
  EXPECT_EQ(LookupJson("batch=64,n=4096", "bf16").match(), v1::EXACT);

  CommandResult other_device = Cli({"invalidate", "--device", "NVIDIA H100"});
  ASSERT_EQ(other_device.exit_code, 0) << other_device.err;
  EXPECT_EQ(EntryCount(), 2);

  CommandResult no_selector = Cli({"invalidate"});
  EXPECT_NE(no_selector.exit_code, 0);
  EXPECT_EQ(EntryCount(), 2);

  CommandResult by_device = Cli({"invalidate", "--device", "NVIDIA H200"});
  ASSERT_EQ(by_device.exit_code, 0) << by_device.err;
  EXPECT_EQ(EntryCount(), 0);
}

TEST_F(CacheEndToEndTest, HandCorruptedCubinIsRefusedOnLookup) {
  ImportSample();
  {
    // Another writer flips bytes of the stored blob behind the daemon's back.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(daemon_->db_path().c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, "UPDATE binaries SET cubin = zeroblob(length(cubin))", nullptr,
                                nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << (error != nullptr ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }
  const std::string cubin_path = dir_.path() + "/out.cubin";
  CommandResult result = Cli({"lookup", "vector_scale", "--dims", "batch=8,n=4096", "--dtype",
                              "bf16", "--device", "NVIDIA H200", "--cubin-out", cubin_path});
  EXPECT_EQ(result.exit_code, 1) << result.out;
  EXPECT_THAT(result.err, HasSubstr("DATA_LOSS"));
  EXPECT_THAT(result.err, HasSubstr("corrupt"));

  auto client = Connect();
  v1::BatchLookupRequest request;
  request.set_include_cubin(true);
  v1::LookupRequest* lookup = request.add_lookups();
  lookup->set_family("vector_scale");
  (*lookup->mutable_problem()->mutable_dims())["batch"] = 8;
  (*lookup->mutable_problem()->mutable_dims())["n"] = 4096;
  lookup->mutable_problem()->set_dtype(v1::BFLOAT16);
  lookup->mutable_device()->set_name("NVIDIA H200");
  ASSERT_OK_AND_ASSIGN(v1::BatchLookupResponse response, client->BatchLookup(request));
  EXPECT_EQ(response.results(0).error_code(), static_cast<int>(absl::StatusCode::kDataLoss));
  EXPECT_EQ(response.binaries_size(), 0);
}

TEST_F(CacheEndToEndTest, FailedImportChangesNothing) {
  ImportSample();
  v1::CacheBundle broken = bundle_;
  // A second batch of entries whose last one points at a binary nobody has.
  for (v1::Entry& entry : *broken.mutable_entries()) {
    (*entry.mutable_problem()->mutable_dims())["n"] = 8192;
    entry.mutable_launch()->set_grid(0, entry.launch().grid(0) * 2);  // twice the elements
  }
  broken.mutable_entries(2)->set_binary_sha256(std::string(64, 'a'));
  const std::string path = dir_.path() + "/broken.json";
  ASSERT_OK(client::WriteBundleFile(path, broken));
  CommandResult result = Cli({"import", path});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("entries[2]"));
  EXPECT_EQ(EntryCount(), 3);
  EXPECT_EQ(LookupJson("batch=1,n=8192", "bf16").match(), v1::MISS);
}

// How a fleet's warmup shards push: per entry the better measurement stays.
TEST_F(CacheEndToEndTest, ImportKeepBetterKeepsTheBetterMeasurementOfEachEntry) {
  ImportSample();
  v1::CacheBundle pushed = bundle_;
  ASSERT_GE(pushed.entries_size(), 2);
  // The first entry measured faster elsewhere, the second slower.
  v1::Entry& faster = *pushed.mutable_entries(0);
  faster.mutable_timing()->set_median_us(faster.timing().median_us() / 2);
  faster.set_job_id("shard-0");
  v1::Entry& slower = *pushed.mutable_entries(1);
  slower.mutable_timing()->set_median_us(slower.timing().median_us() * 2);
  slower.set_job_id("shard-1");
  const std::string path = dir_.path() + "/shard.json";
  ASSERT_OK(client::WriteBundleFile(path, pushed));

  CommandResult both = Cli({"import", "--replace", "--keep-better", path});
  EXPECT_NE(both.exit_code, 0);
  EXPECT_THAT(both.err, HasSubstr("exclude each other"));
  CommandResult merged = Cli({"import", "--keep-better", path});
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_THAT(merged.out, HasSubstr("measured as well or better"));

  CommandResult exported = Cli({"export", "--out", dir_.path() + "/after.json"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  ASSERT_OK_AND_ASSIGN(v1::CacheBundle after, client::ReadBundleFile(dir_.path() + "/after.json"));
  std::map<std::string, std::string> job_by_dims;
  for (const v1::Entry& entry : after.entries()) {
    job_by_dims[FormatDims(entry.problem().dims())] = entry.job_id();
  }
  EXPECT_EQ(job_by_dims[FormatDims(faster.problem().dims())], "shard-0");
  EXPECT_NE(job_by_dims[FormatDims(slower.problem().dims())], "shard-1");
}

// An online backup taken from the running daemon, restored by starting a
// daemon on it.
TEST_F(CacheEndToEndTest, AnOnlineBackupRestoresIntoADaemonThatAnswersTheSame) {
  ImportSample();
  TempDir other;
  const std::string copy = other.path() + "/restored.db";
  // Backups go into the daemon's --backup-dir only, by name.
  StopDaemon();
  ASSERT_OK(StartDaemon({"--kernels", "none", "--backup-dir", other.path()}));
  CommandResult backup = Cli({"backup", "--out", "restored.db"});
  ASSERT_EQ(backup.exit_code, 0) << backup.err;
  EXPECT_THAT(backup.out, HasSubstr("backed up 3 entries"));
  EXPECT_THAT(backup.out, HasSubstr("integrity ok"));
  CommandResult again = Cli({"backup", "--out", "restored.db"});
  EXPECT_NE(again.exit_code, 0);
  ASSERT_EQ(daemon_->Stop(), 0);

  daemon_ = std::make_unique<Daemon>(other.path(),
                                     std::vector<std::string>{"--kernels", "none", "--db", copy});
  ASSERT_OK(daemon_->Start());
  EXPECT_EQ(EntryCount(), 3);
  EXPECT_EQ(LookupJson("batch=8,n=4096", "bf16").match(), v1::EXACT);
  EXPECT_EQ(daemon_->Stop(), 0);  // before its directory goes
  daemon_.reset();
}

TEST_F(CacheEndToEndTest, ExportThenImportIntoAFreshDaemonGivesTheSameAnswers) {
  ImportSample();
  const std::string exported = dir_.path() + "/export.json";
  CommandResult result = Cli({"export", "--out", exported});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  ASSERT_EQ(daemon_->Stop(), 0);

  TempDir other;
  daemon_ = std::make_unique<Daemon>(other.path(), std::vector<std::string>{"--kernels", "none"});
  ASSERT_OK(daemon_->Start());
  CommandResult imported = Cli({"import", exported});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_EQ(EntryCount(), 3);
  EXPECT_EQ(LookupJson("batch=12,n=4096", "bf16").match(), v1::NEAREST);
}

TEST_F(CacheEndToEndTest, ShowWithoutADeviceTakesTheOnlyOneTheProblemWasTunedOn) {
  ImportSample();
  CommandResult result =
      Cli({"show", "vector_scale", "--dims", "batch=8,n=4096", "--dtype", "bf16"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("NVIDIA H200"));
  CommandResult missing =
      Cli({"show", "vector_scale", "--dims", "batch=3,n=4096", "--dtype", "bf16"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND: no entry for vector_scale batch=3,n=4096 bf16"));
}

TEST_F(CacheEndToEndTest, ReadCommandsAnswerJson) {
  ImportSample();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"stats", "--json"},
           {"ls", "--json"},
           {"kernels", "--json"},
           {"jobs", "--json"},
           {"show", "vector_scale", "--dims", "batch=8,n=4096", "--dtype", "bf16", "--device",
            "NVIDIA H200", "--json"}}) {
    CommandResult result = Cli(args);
    EXPECT_EQ(result.exit_code, 0) << args[0] << ": " << result.err;
    EXPECT_THAT(result.out, HasSubstr("{")) << args[0];
  }
  CommandResult stats = Cli({"stats", "--json"});
  v1::StatsResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(stats.out, &response).ok());
  EXPECT_EQ(response.entries(), 3);
  EXPECT_EQ(response.families(), 1);
  EXPECT_EQ(response.binaries(), 1);
  EXPECT_EQ(response.database_path(), daemon_->db_path());
  // One version for both binaries, the project's.
  EXPECT_EQ(response.server_version(), kVersion);
  CommandResult version = Cli({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out, absl::StrCat(kVersion, "\n"));
}

TEST(MeasuringWithoutGpuTest, JobsAreRefusedWithTheReasonAndChangeNothing) {
  TempDir dir;
  Daemon daemon(dir.path(), {"--kernels", "none", "--gpus", "none"});
  ASSERT_OK(daemon.Start());
  const std::string manifest = dir.path() + "/manifest.textproto";
  FILE* file = fopen(manifest.c_str(), "w");
  ASSERT_NE(file, nullptr);
  fputs("items { family: \"vector_scale\" dims { name: \"batch\" values: 1 } }\n", file);
  fclose(file);
  CommandResult result =
      RunCommand({AutotuneCliPath(), "--server", daemon.address(), "warmup", manifest});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(result.err, HasSubstr("--gpus none"));
  EXPECT_THAT(result.err, HasSubstr("--compile-only"));
  CommandResult jobs = RunCommand({AutotuneCliPath(), "--server", daemon.address(), "jobs"});
  EXPECT_EQ(jobs.exit_code, 0);
  EXPECT_THAT(jobs.out, Not(HasSubstr("QUEUED")));
}

TEST(ClientWithoutDaemonTest, SaysTheServerCannotBeReached) {
  TempDir dir;
  CommandResult result =
      RunCommand({AutotuneCliPath(), "--server", "unix://" + dir.path() + "/none.sock", "stats"});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_THAT(result.err, HasSubstr("cannot reach autotuned"));
}

}  // namespace
}  // namespace autotune::testing
