// Crash safety of the real daemon: autotuned killed with SIGKILL 100 times
// (25 times each on four databases, side by side), in every phase of its
// jobs (compile, screen, serial validation) and in the middle of imports,
// and started again on the same database each time.
//
// What must hold: every entry the daemon had committed before a kill (read
// back just before it) is there after the restart; the measurement count
// never goes down; an import is all or nothing, and one the CLI saw succeed
// is all there; every interrupted job resumes and ends; and at the end
// PRAGMA integrity_check says ok. Compiles are real (NVRTC); the stand-in
// profile worker (service/testing/fake_profile_worker.cc) acts out the GPU,
// taking FAKE_WORKER_SLEEP_MS per variant so that each phase can be hit.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "client/bundle.h"
#include "client/local_cache.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "proto/problem.h"
#include "tests/support/daemon_test.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

// The kills are spread over kShards daemons, each on its own database, so
// that ctest runs them side by side: a kill and its restart mostly wait on
// the daemon, not on a core. $CRASH_TEST_KILLS (the total) overrides 100 for
// a quick run by hand; every shard gets at least 4, one in each phase.
constexpr int kShards = 4;
int KillsPerShard() {
  const char* text = std::getenv("CRASH_TEST_KILLS");
  const int total = text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : 100;
  return std::max(4, (total + kShards - 1) / kShards);
}
constexpr int kEntriesPerImport = 100;

// "family|dims|dtype|device" of every entry, through ListEntries pages.
absl::StatusOr<std::set<std::string>> EntryKeys(v1::Autotune::Stub& stub) {
  std::set<std::string> keys;
  for (int offset = 0;; offset += 1000) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::ListEntriesRequest request;
    request.set_limit(1000);
    request.set_offset(offset);
    v1::ListEntriesResponse response;
    const grpc::Status status = stub.ListEntries(&context, request, &response);
    if (!status.ok()) return absl::UnavailableError(status.error_message());
    for (const v1::Entry& entry : response.entries()) {
      keys.insert(absl::StrCat(entry.family(), "|", FormatDims(entry.problem().dims()), "|",
                               v1::DType_Name(entry.problem().dtype()), "|",
                               entry.device().name()));
    }
    if (offset + response.entries_size() >= response.total()) break;
  }
  return keys;
}

absl::StatusOr<v1::StatsResponse> Stats(v1::Autotune::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::StatsResponse response;
  const grpc::Status status = stub.Stats(&context, v1::StatsRequest(), &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response;
}

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "cannot open";
  }
  std::string result;
  sqlite3_exec(
      db, "PRAGMA integrity_check",
      [](void* out, int, char** values, char**) {
        static_cast<std::string*>(out)->append(values[0] != nullptr ? values[0] : "NULL");
        return 0;
      },
      &result, nullptr);
  sqlite3_close(db);
  return result;
}

bool Ended(const v1::Job& job) {
  return job.state() == v1::SUCCEEDED || job.state() == v1::FAILED || job.state() == v1::CANCELLED;
}

class CrashTest : public DaemonTest {
 protected:
  void SetUp() override {
    setenv("FAKE_WORKER_SLEEP_MS", "30", 1);
    const std::string testdata = SERVICE_TESTDATA_DIR;
    ASSERT_OK_AND_ASSIGN(family_text_, ReadFile(testdata + "/modes.textproto"));
    family_text_ = absl::StrReplaceAll(
        family_text_, {{"values: [0, 1, 2, 3, 4, 5, 6, 7]", "values: [0, 1, 2, 6]"}});
    ASSERT_OK_AND_ASSIGN(source_, ReadFile(testdata + "/modes.cu"));
    ASSERT_OK(WriteFileAtomically(Path("modes.textproto"), family_text_));
    ASSERT_OK(WriteFileAtomically(
        Path("modes.manifest"),
        "items { family: \"modes\" dims { name: \"n\" values: [256, 512, 1024, 2048, "
        "4096, 8192] } dtypes: [FLOAT32] }\n"));
    ASSERT_OK(NewSourceVersion(0));
    ASSERT_OK(StartDaemon());
  }
  void TearDown() override { unsetenv("FAKE_WORKER_SLEEP_MS"); }

  // A new version of the family's source: its variants compile again.
  absl::Status NewSourceVersion(int version) {
    return WriteFileAtomically(Path("modes.cu"),
                               absl::StrCat(source_, "// version ", version, "\n"));
  }

  absl::Status StartDaemon() {
    absl::Status started =
        DaemonTest::StartDaemon({"--kernels", "none", "--compile-workers", "2", "--profile-worker",
                                 FAKE_PROFILE_WORKER_PATH, "--lease-dir", Path("leases")},
                                absl::Seconds(60));
    if (started.ok()) {
      stub_ = v1::Autotune::NewStub(
          grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
    }
    return started;
  }

  // A bundle of kEntriesPerImport entries no other import has (n = 1000 + i).
  absl::StatusOr<std::string> ImportFile(int i) {
    SampleBundleOptions options;
    for (int batch = 1; batch <= kEntriesPerImport; ++batch) {
      SampleEntry entry;
      entry.batch = batch;
      entry.n = 1000 + i;
      entry.median_us = 10;
      options.entries.push_back(entry);
    }
    options.cubin_kind = CubinKind::kSynthetic;
    options.synthetic_cubin_bytes = 64 << 10;
    options.synthetic_cubin_per_entry = true;
    ASSIGN_OR_RETURN(v1::CacheBundle bundle, MakeSampleBundle(options));
    const std::string path = Path(absl::StrCat("import-", i, ".json"));
    RETURN_IF_ERROR(client::WriteBundleFile(path, bundle));
    return path;
  }

  // Polls until some job is in `state`, or until the newest job is one
  // other than `older` and has ended (it will not get there), or `timeout`.
  void WaitForJobIn(v1::JobState state, absl::Duration timeout, const std::string& older = "-") {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      grpc::ClientContext context;
      v1::ListJobsRequest request;
      request.set_limit(10);
      v1::ListJobsResponse response;
      if (stub_->ListJobs(&context, request, &response).ok()) {
        for (const v1::Job& job : response.jobs()) {
          if (job.state() == state) return;
        }
        if (response.jobs_size() > 0 && response.jobs(0).id() != older && older != "-" &&
            Ended(response.jobs(0))) {
          return;
        }
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  // The newest job's id; empty when there is none.
  std::string NewestJobId() {
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_limit(1);
    v1::ListJobsResponse response;
    if (!stub_->ListJobs(&context, request, &response).ok() || response.jobs_size() == 0) return "";
    return response.jobs(0).id();
  }

  static int EntriesWithN(const std::set<std::string>& keys, int n) {
    int count = 0;
    const std::string needle = absl::StrCat(",n=", n, "|");
    for (const std::string& key : keys) {
      if (absl::StartsWith(key, "vector_scale|") && absl::StrContains(key, needle)) ++count;
    }
    return count;
  }

  std::string family_text_;
  std::string source_;
  std::unique_ptr<v1::Autotune::Stub> stub_;
};

class CrashShardTest : public CrashTest, public ::testing::WithParamInterface<int> {};

TEST_P(CrashShardTest, KilledAHundredTimesItLosesNothingItAcknowledgedAndFinishesEveryJob) {
  std::mt19937 random(20261201 + GetParam());
  std::map<std::string, int> killed_in;  // phase -> kills
  int imports_acknowledged = 0, imports_interrupted = 0, entries_lost = 0, partial_imports = 0;
  std::set<std::string> interrupted_jobs;
  absl::Mutex warmups_mu;
  std::map<std::string, int> warmups;  // how each warmup CLI ended
  int64_t measurements_seen = 0;
  const int kills = KillsPerShard();
  for (int i = 0; i < kills; ++i) {
    const absl::Time started = absl::Now();
    const int kind = i % 4;  // 0 compile, 1 screen, 2 serial, 3 import
    std::thread action;
    v1::JobState target = v1::JOB_STATE_UNSPECIFIED;
    CommandResult import_result;
    int import_n = 0;
    if (kind == 3) {
      ASSERT_OK_AND_ASSIGN(const std::string file, ImportFile(i));
      import_n = 1000 + i;
      action = std::thread([&, file] { import_result = Cli({"import", file}); });
      absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 400)(random)));
    } else {
      if (kind == 0) {
        ASSERT_OK(NewSourceVersion(i));
        CommandResult registered = Cli({"register", Path("modes.textproto"), "--replace"});
        ASSERT_EQ(registered.exit_code, 0) << registered.err;
      }
      action = std::thread([&] {
        const CommandResult warmup = Cli({"warmup", Path("modes.manifest"), "--retune"});
        // How the CLI saw its job end: the first words of its last error line.
        std::string said = warmup.exit_code == 0 ? "ok" : warmup.err;
        while (!said.empty() && said.back() == '\n') said.pop_back();
        said = said.substr(said.rfind('\n') + 1).substr(0, 60);
        absl::MutexLock lock(&warmups_mu);
        ++warmups[said];
      });
      target = kind == 0 ? v1::COMPILING : kind == 1 ? v1::SCREENING : v1::VALIDATING;
      WaitForJobIn(target, absl::Seconds(30));
      // The serial phase of this small job is short: kill within it.
      const int most_ms = target == v1::VALIDATING ? 20 : 100;
      absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, most_ms)(random)));
    }
    // What the daemon has committed and says so, read just before the kill.
    absl::StatusOr<std::set<std::string>> before = EntryKeys(*stub_);
    ASSERT_OK(before.status());
    ASSERT_OK_AND_ASSIGN(v1::StatsResponse stats_before, Stats(*stub_));
    grpc::ClientContext context;
    v1::ListJobsRequest jobs_request;
    jobs_request.set_limit(10);
    v1::ListJobsResponse recent;
    ASSERT_TRUE(stub_->ListJobs(&context, jobs_request, &recent).ok());
    std::string phase = kind == 3 ? "import" : "no job running";
    for (const v1::Job& job : recent.jobs()) {
      if (Ended(job)) continue;
      interrupted_jobs.insert(job.id());
      // The phase the kill hit: the targeted one when a job is in it, else
      // that of a job past the queue.
      if (kind == 3 || job.state() == v1::QUEUED) continue;
      if (job.state() == target || phase == "no job running")
        phase = v1::JobState_Name(job.state());
    }
    stub_.reset();
    daemon_->Kill();
    action.join();
    ++killed_in[phase];
    const absl::Duration to_kill = absl::Now() - started;

    const absl::Time restarting = absl::Now();
    ASSERT_OK(StartDaemon()) << "restart " << i;
    if (std::getenv("CRASH_TEST_VERBOSE") != nullptr) {
      std::printf("kill %d in %s after %s; restarted in %s\n", i, phase.c_str(),
                  absl::FormatDuration(to_kill).c_str(),
                  absl::FormatDuration(absl::Now() - restarting).c_str());
    }
    ASSERT_OK_AND_ASSIGN(std::set<std::string> after, EntryKeys(*stub_));
    for (const std::string& key : *before) {
      if (after.count(key) == 0) {
        ++entries_lost;
        ADD_FAILURE() << "kill " << i << " (" << phase << "): entry lost: " << key;
      }
    }
    ASSERT_OK_AND_ASSIGN(v1::StatsResponse stats_after, Stats(*stub_));
    EXPECT_GE(stats_after.measurements(), stats_before.measurements()) << "kill " << i;
    EXPECT_GE(stats_after.measurements(), measurements_seen) << "kill " << i;
    measurements_seen = stats_after.measurements();
    if (kind == 3) {
      const int present = EntriesWithN(after, import_n);
      if (import_result.exit_code == 0) {
        ++imports_acknowledged;
        EXPECT_EQ(present, kEntriesPerImport)
            << "kill " << i << ": an acknowledged import is not all there: " << import_result.out
            << import_result.err;
      } else {
        ++imports_interrupted;
      }
      if (present != 0 && present != kEntriesPerImport) {
        ++partial_imports;
        ADD_FAILURE() << "kill " << i << ": import half there: " << present << " of "
                      << kEntriesPerImport;
      }
    }
  }

  // Every job ends on the last start, the interrupted ones resumed.
  std::vector<v1::Job> jobs;
  const absl::Time deadline = absl::Now() + absl::Minutes(5);
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_limit(1000);
    v1::ListJobsResponse response;
    ASSERT_TRUE(stub_->ListJobs(&context, request, &response).ok());
    jobs.assign(response.jobs().begin(), response.jobs().end());
    if (std::all_of(jobs.begin(), jobs.end(), Ended)) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::map<std::string, int> ended;
  for (const v1::Job& job : jobs) {
    ++ended[v1::JobState_Name(job.state())];
    EXPECT_TRUE(Ended(job)) << job.id() << " never ended: " << v1::JobState_Name(job.state());
    if (interrupted_jobs.count(job.id()) != 0) {
      EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.id() << ": " << job.error();
    }
  }
  stub_.reset();
  EXPECT_EQ(daemon_->Stop(), 0);
  const std::string integrity = IntegrityCheck(daemon_->db_path());
  EXPECT_EQ(integrity, "ok");

  std::vector<std::string> phases;
  for (const auto& [phase, count] : killed_in) phases.push_back(absl::StrCat(phase, " ", count));
  std::vector<std::string> states;
  for (const auto& [state, count] : ended) states.push_back(absl::StrCat(state, " ", count));
  std::printf(
      "crash safety, shard %d of %d: %d SIGKILLs (%s); acknowledged entries lost: %d; imports "
      "acknowledged %d, "
      "interrupted %d, half there %d; jobs interrupted %zu, all jobs at the end: %s; "
      "measurements %lld; integrity_check: %s\n",
      GetParam() + 1, kShards, kills, absl::StrJoin(phases, ", ").c_str(), entries_lost,
      imports_acknowledged, imports_interrupted, partial_imports, interrupted_jobs.size(),
      absl::StrJoin(states, ", ").c_str(), static_cast<long long>(measurements_seen),
      integrity.c_str());
  for (const auto& [said, count] : warmups)
    std::printf("  warmup CLI: %d x %s\n", count, said.c_str());
  for (const char* phase : {"COMPILING", "SCREENING", "VALIDATING", "import"}) {
    EXPECT_GT(killed_in[phase], 0) << "no kill landed in " << phase;
  }
}
INSTANTIATE_TEST_SUITE_P(FourDaemons, CrashShardTest, ::testing::Range(0, kShards),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("shard", info.param + 1);
                         });

TEST_F(CrashTest, WorkersKilledMidCompileAndMidMeasurementAreReplacedAndJobsStillEnd) {
  int compile_kills = 0, profile_kills = 0;
  for (int round = 0; round < 6; ++round) {
    ASSERT_OK(NewSourceVersion(1000 + round));
    CommandResult registered = Cli({"register", Path("modes.textproto"), "--replace"});
    ASSERT_EQ(registered.exit_code, 0) << registered.err;
    const std::string older = NewestJobId();
    std::thread warmup([&] { Cli({"warmup", Path("modes.manifest"), "--retune"}); });
    // Even rounds kill the compile workers while they compile; odd rounds
    // the profile worker while it screens, then while it times serially.
    if (round % 2 == 0) {
      WaitForJobIn(v1::COMPILING, absl::Seconds(30), older);
      for (pid_t pid : ChildrenNamed(daemon_->pid(), "autotune-worker")) {
        compile_kills += kill(pid, SIGKILL) == 0;
      }
    } else {
      for (v1::JobState phase : {v1::SCREENING, v1::VALIDATING}) {
        WaitForJobIn(phase, absl::Seconds(30), older);
        for (pid_t pid : ChildrenNamed(daemon_->pid(), "fake-profile-worker")) {
          profile_kills += kill(pid, SIGKILL) == 0;
        }
      }
    }
    warmup.join();  // the job ended, one way or another
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_limit(1);
    v1::ListJobsResponse newest;
    ASSERT_TRUE(stub_->ListJobs(&context, request, &newest).ok());
    ASSERT_EQ(newest.jobs_size(), 1);
    EXPECT_TRUE(Ended(newest.jobs(0))) << v1::JobState_Name(newest.jobs(0).state());
  }
  EXPECT_GT(compile_kills, 0);
  EXPECT_GT(profile_kills, 0);
  // What the killed workers left undone is done by the next run: a lost
  // compile is not cached as an error, a lost measurement not as a result.
  CommandResult again = Cli({"warmup", Path("modes.manifest"), "--retune"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  ASSERT_OK_AND_ASSIGN(v1::StatsResponse stats, Stats(*stub_));
  EXPECT_GE(stats.entries(), 6);
  stub_.reset();
  EXPECT_EQ(daemon_->Stop(), 0);
  EXPECT_EQ(IntegrityCheck(daemon_->db_path()), "ok");
  std::printf(
      "workers killed: %d compile workers mid-compile, %d profile workers mid-measurement\n",
      compile_kills, profile_kills);
}

TEST(LocalCacheCrashTest, AWriterKilledAtRandomLeavesOnlyWholeFiles) {
  TempDir dir;
  const std::string cache_dir = dir.File("cache");
  std::mt19937 random(7);
  int answers_read = 0, leftovers = 0;
  for (int kill_number = 0; kill_number < 50; ++kill_number) {
    const std::string writer = LOCAL_CACHE_WRITER_PATH;
    std::vector<char*> argv = {const_cast<char*>(writer.c_str()),
                               const_cast<char*>(cache_dir.c_str()), nullptr};
    // The kill comes at a random moment after the writer said it writes
    // (a sanitized build may take longer than the whole window to start).
    int started[2];
    ASSERT_EQ(pipe2(started, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, started[1], STDOUT_FILENO);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, writer.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(started[1]);
    ASSERT_EQ(spawned, 0);
    pollfd ready{.fd = started[0], .events = POLLIN, .revents = 0};
    char byte = 0;
    const bool writing = poll(&ready, 1, 60000) == 1 && read(started[0], &byte, 1) == 1;
    close(started[0]);
    if (writing) {
      absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(5, 60)(random)));
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer ended by itself: " << status;
    ASSERT_TRUE(writing) << "kill " << kill_number << ": the writer wrote nothing within 60 s";

    ASSERT_OK_AND_ASSIGN(client::LocalCache cache, client::LocalCache::Open(cache_dir));
    for (int i = 0; i < 16; ++i) {
      v1::LookupRequest request;
      request.set_family("crash");
      (*request.mutable_problem()->mutable_dims())["n"] = i;
      request.mutable_problem()->set_dtype(v1::FLOAT32);
      absl::StatusOr<std::optional<v1::LocalAnswer>> answer = cache.GetAnswer(request);
      ASSERT_OK(answer.status()) << "kill " << kill_number << ", answer " << i;
      if (!answer->has_value()) continue;
      ++answers_read;
      // The cubin is written before the answer that names it.
      absl::StatusOr<std::optional<std::string>> cubin =
          cache.GetCubin((*answer)->response().entry().binary_sha256());
      ASSERT_OK(cubin.status()) << "kill " << kill_number << ", cubin of answer " << i;
      EXPECT_TRUE(cubin->has_value())
          << "kill " << kill_number << ": answer " << i << " names a cubin that is not there";
    }
  }
  for (const auto& file : std::filesystem::recursive_directory_iterator(cache_dir)) {
    leftovers += absl::StrContains(file.path().filename().string(), ".tmp.");
  }
  EXPECT_GT(answers_read, 0);
  std::printf(
      "local cache: 50 writers killed; %d answers read back whole; %d temporary files "
      "left by killed writers\n",
      answers_read, leftovers);
}

}  // namespace
}  // namespace autotune::testing
