// Resource faults with the real daemon: the database's disk fills up, the
// database file or its folder turns read-only, a profile worker never
// answers, NVRTC is not there. Each must give a clear error, corrupt
// nothing, keep lookups answering where the database can still be read, and
// go away once its cause does.
//
// The process runs in a mount namespace of its own (entered in main(),
// before any thread: as root a plain one, otherwise inside a user namespace),
// so the small tmpfs a test fills and the empty folder mounted over NVRTC's
// are seen by this test and its daemons only, and vanish with them.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/scoped_env.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/autotune.grpc.pb.h"
#include "service/testing/worker_hold.h"
#include "tests/support/process.h"
#include "tests/support/sample_bundle.h"

namespace autotune::testing {
namespace {

using ::autotune::testing::ScopedEnv;

using ::testing::HasSubstr;

// Why the mount namespace could not be entered; empty when it was.
std::string& NamespaceProblem() {
  static std::string problem;
  return problem;
}

bool WriteProcFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
  return static_cast<bool>(file.flush());
}

// Enters a private mount namespace. Must run before any thread starts.
std::string EnterMountNamespace() {
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) != 0) return absl::StrCat("unshare(CLONE_NEWNS): ", strerror(errno));
  } else {
    const uid_t uid = geteuid();
    const gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      return absl::StrCat("unshare(CLONE_NEWUSER | CLONE_NEWNS): ", strerror(errno));
    }
    if (!WriteProcFile("/proc/self/setgroups", "deny") ||
        !WriteProcFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")) ||
        !WriteProcFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1"))) {
      return "cannot map this user into the new user namespace";
    }
  }
  // Mounts made here stay here.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::StrCat("making / private: ", strerror(errno));
  }
  return "";
}

#define SKIP_WITHOUT_NAMESPACE()                                                      \
  if (!NamespaceProblem().empty()) {                                                  \
    GTEST_SKIP() << "no private mount namespace here (" << NamespaceProblem() << ")"; \
  }

// Unmounts `path` when it goes, so the test's folder can be removed.
class ScopedMount {
 public:
  explicit ScopedMount(std::string path) : path_(std::move(path)) {}
  ~ScopedMount() { umount2(path_.c_str(), MNT_DETACH); }
  ScopedMount(const ScopedMount&) = delete;
  ScopedMount& operator=(const ScopedMount&) = delete;

 private:
  std::string path_;
};

// A tmpfs of `size` ("2m") at `path`, remountable with another size.
absl::Status MountTmpfs(const std::string& path, const std::string& size) {
  std::filesystem::create_directories(path);
  if (mount("tmpfs", path.c_str(), "tmpfs", 0, absl::StrCat("size=", size, ",mode=0700").c_str()) !=
      0) {
    return absl::InternalError(absl::StrCat("mount tmpfs at ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ResizeTmpfs(const std::string& path, const std::string& size) {
  if (mount(nullptr, path.c_str(), nullptr, MS_REMOUNT, absl::StrCat("size=", size).c_str()) != 0) {
    return absl::InternalError(absl::StrCat("remount ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// 16 entries (batch 1..16, n = `n`) with their own `cubin_bytes` binaries.
v1::CacheBundle Bundle(int64_t n, int64_t cubin_bytes) {
  SampleBundleOptions options;
  for (int batch = 1; batch <= 16; ++batch) {
    SampleEntry entry;
    entry.batch = batch;
    entry.n = n;
    entry.median_us = 10;
    options.entries.push_back(entry);
  }
  options.cubin_kind = CubinKind::kSynthetic;
  options.synthetic_cubin_bytes = cubin_bytes;
  options.synthetic_cubin_per_entry = true;
  absl::StatusOr<v1::CacheBundle> bundle = MakeSampleBundle(options);
  EXPECT_OK(bundle.status());
  return bundle.ok() ? *bundle : v1::CacheBundle();
}

std::unique_ptr<client::Client> Connect(const Daemon& daemon) {
  client::ClientOptions options;
  options.address = daemon.address();
  absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Connect(options);
  EXPECT_OK(client.status());
  return client.ok() ? *std::move(client) : nullptr;
}

// How a lookup of (batch, n) with its cubin is answered: "EXACT", "MISS" or
// the error.
std::string LookupWithCubin(client::Client& client, int64_t batch, int64_t n) {
  v1::LookupRequest request;
  request.set_family(std::string(kVectorScaleFamily));
  (*request.mutable_problem()->mutable_dims())["batch"] = batch;
  (*request.mutable_problem()->mutable_dims())["n"] = n;
  request.mutable_problem()->set_dtype(v1::BFLOAT16);
  *request.mutable_device() = SampleDevice();
  request.set_include_cubin(true);
  absl::StatusOr<v1::LookupResponse> response = client.Lookup(request);
  if (!response.ok()) return std::string(response.status().ToString());
  if (response->match() == v1::EXACT && response->cubin().empty()) return "EXACT without cubin";
  return v1::MatchKind_Name(response->match());
}

std::string IntegrityCheck(const std::string& db) {
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(handle);
    return "cannot open";
  }
  sqlite3_stmt* statement = nullptr;
  std::string result = "no row";
  if (sqlite3_prepare_v2(handle, "PRAGMA integrity_check", -1, &statement, nullptr) == SQLITE_OK &&
      sqlite3_step(statement) == SQLITE_ROW) {
    result = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
  }
  sqlite3_finalize(statement);
  sqlite3_close(handle);
  return result;
}

std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text.substr(text.rfind('\n') + 1);
}

TEST(ResourceTest, AFullDiskFailsTheWriteAloneAndWritesWorkAgainOnceThereIsSpace) {
  SKIP_WITHOUT_NAMESPACE();
  TempDir dir;
  const std::string data = dir.File("data");
  ASSERT_OK(MountTmpfs(data, "3m"));
  ScopedMount unmount(data);
  const std::string db = data + "/cache.db";
  Daemon daemon(dir.path(), {"--db", db, "--kernels", "none"});
  ASSERT_OK(daemon.Start());
  std::unique_ptr<client::Client> client = Connect(daemon);
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->Import(Bundle(4096, 1024), /*replace=*/false).status());

  // Imports of 16 x 64 KiB until the disk is full.
  absl::Status full;
  int64_t full_n = 0;
  for (int64_t n = 10000; n < 10100 && full.ok(); ++n) {
    full = client->Import(Bundle(n, 64 << 10), /*replace=*/false).status();
    full_n = n;
  }
  ASSERT_FALSE(full.ok()) << "3 MiB never filled up";
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr(db));
  EXPECT_THAT(full.message(), HasSubstr("full"));

  // Reads go on: what was stored before is served, cubins included.
  EXPECT_EQ(LookupWithCubin(*client, 3, 4096), "EXACT");
  // The import that failed left nothing behind.
  EXPECT_EQ(LookupWithCubin(*client, 3, full_n), "MISS");
  ASSERT_OK(client->Stats(v1::StatsRequest()).status());

  // Space comes back: the same import goes through, with no restart.
  ASSERT_OK(ResizeTmpfs(data, "64m"));
  ASSERT_OK(client->Import(Bundle(full_n, 64 << 10), /*replace=*/false).status());
  EXPECT_EQ(LookupWithCubin(*client, 3, full_n), "EXACT");
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
  EXPECT_EQ(IntegrityCheck(db), "ok");
}

// Runs autotuned without the capabilities that let root ignore file modes,
// so a read-only file is read-only to it as it would be to a service user.
std::string WriteUnprivilegedLauncher(const TempDir& dir) {
  const std::string path = dir.File("autotuned-unprivileged");
  std::ofstream(path) << "#!/bin/sh\nexec setpriv "
                         "--bounding-set=-dac_override,-dac_read_search,-fowner "
                      << AutotunedPath() << " \"$@\"\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(ResourceTest, AReadOnlyDatabaseIsRefusedNamingItAndServedOnceWritableAgain) {
  SKIP_WITHOUT_NAMESPACE();
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) is missing";
  TempDir dir;
  const std::string data = dir.File("data");
  std::filesystem::create_directories(data);
  const std::string db = data + "/cache.db";
  ScopedEnv unprivileged("AUTOTUNED", WriteUnprivilegedLauncher(dir));
  {
    Daemon daemon(dir.path(), {"--db", db, "--kernels", "none"});
    ASSERT_OK(daemon.Start());
    std::unique_ptr<client::Client> client = Connect(daemon);
    ASSERT_OK(client->Import(Bundle(4096, 1024), /*replace=*/false).status());
    ASSERT_EQ(daemon.Stop(), 0) << daemon.Stderr();
  }
  // The file, then only its folder, read-only: each refused in one line.
  for (const std::string& what : {std::string("file"), std::string("folder")}) {
    SCOPED_TRACE(what);
    chmod(db.c_str(), what == "file" ? 0444 : 0644);
    chmod(data.c_str(), what == "folder" ? 0555 : 0755);
    Daemon daemon(dir.path(), {"--db", db, "--kernels", "none"});
    EXPECT_FALSE(daemon.Start().ok());
    EXPECT_NE(daemon.WaitExit(), 0);
    const std::string said = LastLine(daemon.Stderr());
    EXPECT_THAT(said, HasSubstr(db)) << daemon.Stderr();
    EXPECT_THAT(said, HasSubstr("must be readable and writable by this user, and its folder "
                                "writable"))
        << daemon.Stderr();
  }
  chmod(db.c_str(), 0644);
  chmod(data.c_str(), 0755);
  Daemon daemon(dir.path(), {"--db", db, "--kernels", "none"});
  ASSERT_OK(daemon.Start());
  std::unique_ptr<client::Client> client = Connect(daemon);
  EXPECT_EQ(LookupWithCubin(*client, 3, 4096), "EXACT");
  ASSERT_OK(client->Import(Bundle(5000, 1024), /*replace=*/false).status());
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
  EXPECT_EQ(IntegrityCheck(db), "ok");
}

// The stand-in profile worker's MODE=3 never answers: the variant ends
// TIMEOUT, the worker is replaced, the job finishes, lookups never wait.
TEST(ResourceTest, AProfileWorkerThatNeverAnswersTimesOutAloneWhileLookupsGoOn) {
  TempDir dir;
  ASSERT_OK(WriteModesFamily(dir.path(), "[0, 3]", "[256]"));
  // The worker holds just before the MODE=3 variant, so the lookups below
  // start when it starts to hang (for about 30 s) however long the compile
  // took, not before.
  WorkerHold hold(dir.File("hold"), "screen", 2);
  Daemon daemon(dir.path(), {"--kernels", "none", "--profile-worker", FAKE_PROFILE_WORKER_PATH,
                             "--lease-dir", dir.File("leases"), "--variant-timeout", "2"});
  setenv("FAKE_WORKER_HOLD", hold.spec().c_str(), 1);
  const absl::Status started = daemon.Start();
  unsetenv("FAKE_WORKER_HOLD");
  ASSERT_OK(started);
  std::unique_ptr<client::Client> client = Connect(daemon);
  ASSERT_OK(client->Import(Bundle(4096, 1024), /*replace=*/false).status());
  const std::vector<std::string> cli = {AutotuneCliPath(), "--server", daemon.address()};
  std::vector<std::string> registering = cli;
  registering.insert(registering.end(), {"register", dir.File("modes.textproto")});
  ASSERT_EQ(RunCommand(registering).exit_code, 0);

  CommandResult warmup;
  std::thread job([&] {
    std::vector<std::string> argv = cli;
    argv.insert(argv.end(), {"warmup", dir.File("modes.manifest"), "--json"});
    warmup = RunCommand(argv, absl::Minutes(2));
  });
  const bool held = hold.WaitHeld();
  hold.Go();
  EXPECT_TRUE(held) << "the worker never came to the MODE=3 variant" << daemon.Stderr();
  // While the worker hangs, lookups are answered at once.
  absl::Duration slowest;
  int lookups = 0;
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    const absl::Time start = absl::Now();
    EXPECT_EQ(LookupWithCubin(*client, 1 + lookups % 16, 4096), "EXACT");
    slowest = std::max(slowest, absl::Now() - start);
    ++lookups;
  }
  job.join();
  EXPECT_EQ(warmup.exit_code, 0) << warmup.err;
  EXPECT_THAT(warmup.out, HasSubstr("TIMEOUT"));
  EXPECT_LT(slowest, absl::Seconds(1)) << lookups << " lookups";
  v1::ListJobsRequest jobs;
  jobs.set_limit(1);
  ASSERT_OK_AND_ASSIGN(v1::ListJobsResponse listed, client->ListJobs(jobs));
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
}

// The folder NVRTC was loaded from, found through the loader.
std::string NvrtcFolder() {
  void* handle = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return "";
  link_map* map = nullptr;
  std::string folder;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) {
    folder = std::filesystem::path(std::filesystem::canonical(map->l_name)).parent_path();
  }
  return folder;
}

TEST(ResourceTest, WithoutNvrtcCompilesFailSayingWhatToSetAndWorkOnceItIsBack) {
  SKIP_WITHOUT_NAMESPACE();
  const std::string folder = NvrtcFolder();
  if (folder.empty()) GTEST_SKIP() << "NVRTC is not installed here";
  TempDir dir;
  ASSERT_OK(WriteModesFamily(dir.path(), "[0, 1]", "[256]"));
  // An empty folder over NVRTC's: for this test and its daemon, it is gone.
  // Not where the system's own libraries live (a distribution's CUDA), which
  // it would hide too.
  for (const char* system : {"/lib", "/usr/lib", "/lib64", "/usr/lib64"}) {
    if (folder == system || absl::StartsWith(folder, absl::StrCat(system, "/"))) {
      GTEST_SKIP() << "NVRTC is in " << folder << ", beside the system's libraries";
    }
  }
  ASSERT_EQ(mount("tmpfs", folder.c_str(), "tmpfs", MS_RDONLY, "size=4k"), 0) << strerror(errno);
  auto unmount = std::make_unique<ScopedMount>(folder);
  Daemon daemon(dir.path(), {"--kernels", "none"});
  ASSERT_OK(daemon.Start());
  const std::vector<std::string> cli = {AutotuneCliPath(), "--server", daemon.address()};
  std::vector<std::string> registering = cli;
  registering.insert(registering.end(), {"register", dir.File("modes.textproto")});
  ASSERT_EQ(RunCommand(registering).exit_code, 0);
  std::vector<std::string> warmup = cli;
  warmup.insert(warmup.end(), {"warmup", dir.File("modes.manifest"), "--compile-only"});
  const CommandResult without = RunCommand(warmup, absl::Minutes(2));
  EXPECT_NE(without.exit_code, 0);
  EXPECT_THAT(without.out + without.err, HasSubstr("AUTOTUNE_NVRTC")) << without.out << without.err;

  // NVRTC back: a job compiles again, with no restart (the daemon tries
  // to start its compile pool again at most every 5 s).
  unmount.reset();
  CommandResult with;
  for (const absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;) {
    with = RunCommand(warmup, absl::Minutes(2));
    if (with.exit_code == 0) break;
    absl::SleepFor(absl::Seconds(1));
  }
  EXPECT_EQ(with.exit_code, 0) << with.out << with.err;
  EXPECT_THAT(daemon.Stderr(), HasSubstr("compiling is available again"));
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
}

}  // namespace
}  // namespace autotune::testing

int main(int argc, char** argv) {
  // Before anything starts a thread.
  autotune::testing::NamespaceProblem() = autotune::testing::EnterMountNamespace();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
