#include "service/pools/compile_pool.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/pid_folder.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

wv1::CompileOutcome Failed(const wv1::CompileTask& task, wv1::CompileOutcome::Status status,
                           std::string log) {
  wv1::CompileOutcome outcome;
  outcome.set_task_id(task.task_id());
  outcome.set_status(status);
  outcome.set_log(std::move(log));
  return outcome;
}

// Removes the empty working folders (autotune-compile-<pid>-XXXXXX) of
// pools whose process is gone: a daemon killed by a signal cannot remove
// its own. A folder that is not empty, or whose process still runs, stays.
void RemoveFoldersOfGoneProcesses(const std::filesystem::path& temp) {
  std::error_code error;
  for (std::filesystem::directory_iterator it(temp, error), end; !error && it != end;
       it.increment(error)) {
    if (FolderOfGoneProcess(it->path().filename().string(), "autotune-compile-")) {
      rmdir(it->path().c_str());  // only when empty
    }
  }
}

}  // namespace

CompilePool::CompilePool(CompilePoolOptions options)
    : options_(std::move(options)),
      size_(options_.workers > 0
                ? options_.workers
                : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
      slots_(static_cast<size_t>(size_)) {}

absl::StatusOr<std::unique_ptr<CompilePool>> CompilePool::Start(const CompilePoolOptions& options) {
  if (options.worker_path.empty()) {
    return absl::InvalidArgumentError("compile pool: worker_path is empty");
  }
  auto pool = std::unique_ptr<CompilePool>(new CompilePool(options));
  std::error_code error;
  std::filesystem::path temp = std::filesystem::temp_directory_path(error);
  if (error) temp = "/tmp";
  RemoveFoldersOfGoneProcesses(temp);
  std::string folder = (temp / absl::StrCat("autotune-compile-", getpid(), "-XXXXXX")).string();
  if (mkdtemp(folder.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("compile pool: cannot make the workers' working directory ", folder, ": ",
                     std::strerror(errno)));
  }
  pool->work_dir_ = std::move(folder);
  absl::Status started = pool->Spawn(pool->slots_[0]);
  if (!started.ok()) return started;
  return pool;
}

CompilePool::~CompilePool() {
  for (Slot& slot : slots_) slot.process.Stop();
  if (!work_dir_.empty()) rmdir(work_dir_.c_str());
}

absl::Status CompilePool::Spawn(Slot& slot) {
  std::vector<std::string> args = {"compile"};
  if (options_.memory_limit_mb > 0) {
    args.push_back("--memory-limit-mb");
    args.push_back(absl::StrCat(options_.memory_limit_mb));
  }
  if (options_.allow_unconfined) args.push_back("--allow-unconfined");
  absl::StatusOr<wv1::Hello> hello =
      slot.process.Start(options_.worker_path, args, options_.start_timeout, work_dir_);
  if (!hello.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("compile worker ", hello.status().message()));
  }
  if (nvrtc_version_.empty()) {
    nvrtc_version_ = hello->nvrtc_version();
    confinement_ = hello->confinement();
    memory_limit_ = hello->memory_limit();
  }
  return absl::OkStatus();
}

wv1::CompileOutcome CompilePool::Compile(const wv1::CompileTask& task, absl::Duration timeout) {
  Slot* slot = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto has_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const Slot& candidate : slots_) {
        if (!candidate.busy) return true;
      }
      return false;
    };
    mu_.Await(absl::Condition(&has_free));
    // Prefer a running worker; start a new one only when none is idle.
    for (Slot& candidate : slots_) {
      if (!candidate.busy &&
          (slot == nullptr || (!slot->process.running() && candidate.process.running()))) {
        slot = &candidate;
      }
    }
    slot->busy = true;
  }
  auto release = [this, slot] {
    absl::MutexLock lock(&mu_);
    slot->busy = false;
  };

  if (!slot->process.running()) {
    absl::Status spawned = Spawn(*slot);
    if (!spawned.ok()) {
      release();
      return Failed(task, wv1::CompileOutcome::WORKER_LOST, std::string(spawned.message()));
    }
  }
  wv1::WorkerRequest request;
  *request.mutable_compile() = task;
  absl::Status status = slot->process.Send(request);
  wv1::WorkerResponse response;
  if (status.ok()) status = slot->process.Receive(absl::Now() + timeout, &response);
  if (status.ok() && !response.has_compile()) {
    status = absl::DataLossError("the worker answered with something other than a compile outcome");
  }
  wv1::CompileOutcome outcome;
  if (status.ok()) {
    outcome = std::move(*response.mutable_compile());
  } else if (absl::IsDeadlineExceeded(status)) {
    slot->process.Kill();
    ++replaced_;
    outcome = Failed(task, wv1::CompileOutcome::TIMEOUT,
                     absl::StrCat("compile did not finish within ", absl::FormatDuration(timeout),
                                  "; the worker was killed"));
  } else {
    const std::string how = slot->process.ExitReason();
    slot->process.Kill();
    ++replaced_;
    outcome = Failed(
        task, wv1::CompileOutcome::WORKER_LOST,
        absl::StrCat("the compile worker ", how, " while compiling (", status.message(), ")"));
  }
  release();
  return outcome;
}

}  // namespace autotune::service
