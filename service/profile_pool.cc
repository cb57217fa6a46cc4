#include "service/profile_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
namespace {

namespace v1 = ::autotune::v1;
namespace wv1 = ::autotune::worker::v1;


wv1::VariantOutcome Lost(const wv1::ProfileTask& task, const wv1::KernelImage& variant,
                         v1::VariantStatus status, const std::string& why) {
  wv1::VariantOutcome outcome;
  outcome.set_task_id(task.task_id());
  outcome.set_variant_id(variant.id());
  outcome.set_status(status);
  outcome.set_phase("unknown");
  outcome.set_detail(absl::StrCat(task.context(), " [", variant.label(), "]: ", why));
  outcome.set_rtol(task.rtol());
  outcome.set_atol(task.atol());
  return outcome;
}

wv1::ProfileDone Failed(const wv1::ProfileTask& task, v1::VariantStatus status,
                        const std::string& phase, const std::string& why) {
  wv1::ProfileDone done;
  done.set_task_id(task.task_id());
  done.set_status(status);
  done.set_phase(phase);
  done.set_detail(absl::StrCat(task.context(), ": ", why));
  return done;
}

}  // namespace

ProfilePool::ProfilePool(ProfilePoolOptions options) : options_(std::move(options)) {}

ProfilePool::~ProfilePool() {
  absl::MutexLock lock(&mu_);
  for (auto& gpu : gpus_) gpu->process.Stop();
}

absl::Status ProfilePool::StartWorker(Gpu& gpu, int ordinal) {
  absl::StatusOr<wv1::Hello> hello = gpu.process.Start(
      options_.worker_path, {"profile", "--device", absl::StrCat(ordinal)}, options_.start_timeout);
  if (!hello.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile worker ", hello.status().message()));
  }
  if (!hello->has_device()) {
    gpu.process.Kill();
    return absl::FailedPreconditionError(
        absl::StrCat("profile worker for device ", ordinal, " did not describe its device"));
  }
  gpu.info = hello->device();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ProfilePool>> ProfilePool::Start(const ProfilePoolOptions& options) {
  if (options.worker_path.empty()) {
    return absl::InvalidArgumentError("profile pool: worker_path is empty");
  }
  auto pool = std::unique_ptr<ProfilePool>(new ProfilePool(options));
  std::vector<int> ordinals = options.devices;
  const int first = ordinals.empty() ? 0 : ordinals.front();
  auto gpu = std::make_unique<Gpu>();
  if (absl::Status started = pool->StartWorker(*gpu, first); !started.ok()) return started;
  if (ordinals.empty()) {
    for (int i = 0; i < gpu->info.device_count(); ++i) ordinals.push_back(i);
  }
  absl::MutexLock lock(&pool->mu_);
  pool->gpus_.push_back(std::move(gpu));
  for (size_t i = 1; i < ordinals.size(); ++i) {
    auto other = std::make_unique<Gpu>();
    if (absl::Status started = pool->StartWorker(*other, ordinals[i]); !started.ok()) {
      return started;
    }
    pool->gpus_.push_back(std::move(other));
  }
  // Entries are keyed by GPU model: a job measures on whichever GPU is free,
  // so all of them must be the same model.
  const wv1::DeviceInfo& first_info = pool->gpus_.front()->info;
  for (const auto& gpu : pool->gpus_) {
    if (gpu->info.name() != first_info.name() ||
        gpu->info.compute_capability() != first_info.compute_capability() ||
        gpu->info.sm_count() != first_info.sm_count()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPUs of different models: device ", first_info.ordinal(), " is ", first_info.name(),
          " (", first_info.sm_count(), " SMs), device ", gpu->info.ordinal(), " is ",
          gpu->info.name(), " (", gpu->info.sm_count(),
          " SMs); choose GPUs of one model with --gpus"));
    }
  }
  return pool;
}

std::vector<wv1::DeviceInfo> ProfilePool::devices() const {
  absl::MutexLock lock(&mu_);
  std::vector<wv1::DeviceInfo> devices;
  for (const auto& gpu : gpus_) devices.push_back(gpu->info);
  return devices;
}

absl::Duration ProfilePool::VariantDeadline(const wv1::ProfileTask& task, absl::Duration grace) {
  // MakeProfileTask fills these; the worker refuses a task without them.
  const double launch = task.launch_timeout_s();
  const double budget = task.timing_budget_s();
  const int seeds = task.seeds();
  // The worker reports a hung launch itself after `launch`; this deadline
  // only catches a worker that stopped answering altogether. Validation
  // waits once per seed, timing at most a few times (calibration, warm-up,
  // samples, one re-measurement), each bounded by the worker.
  return absl::Seconds(launch * (seeds + 4) + budget * 4) + grace;
}

ProfileResult ProfilePool::Profile(
    const wv1::ProfileTask& task,
    const std::function<void(const wv1::VariantOutcome&)>& on_variant) {
  Gpu* gpu = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto has_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::any_of(gpus_.begin(), gpus_.end(), [](const auto& g) { return !g->busy; });
    };
    mu_.Await(absl::Condition(&has_free));
    for (auto& candidate : gpus_) {
      if (!candidate->busy) {
        gpu = candidate.get();
        break;
      }
    }
    gpu->busy = true;
  }
  ProfileResult result;
  result.device = gpu->info;
  const absl::Duration variant_deadline = VariantDeadline(task, options_.grace);
  const int count = task.variants_size();

  // A worker that hung, faulted or died is killed (SIGKILL also takes a
  // spinning kernel with it) and counted as replaced; the next one starts
  // when there is work for it.
  auto lose = [&] {
    gpu->process.Kill();
    ++replaced_;
    ++result.workers_replaced;
  };
  // False when a new worker cannot start.
  auto start = [&]() -> bool {
    absl::Status started = StartWorker(*gpu, gpu->info.ordinal());
    if (!started.ok()) {
      result.done = Failed(task, v1::FAULT, "restart",
                           absl::StrCat("cannot start a new worker: ", started.message()));
      return false;
    }
    return true;
  };

  // First the reference alone (a task with no variants): once it is known to
  // run, a worker that hangs or dies later is the variant's doing.
  int next = -1;  // -1: the reference check
  int send_failures = 0;
  while (true) {
    if (!gpu->process.running() && !start()) break;
    wv1::WorkerRequest request;
    wv1::ProfileTask* sub = request.mutable_profile();
    *sub = task;
    sub->clear_variants();
    for (int i = std::max(next, 0); next >= 0 && i < count; ++i) *sub->add_variants() = task.variants(i);
    absl::Status sent = gpu->process.Send(request);
    bool restarted = false;
    const absl::Time started = absl::Now();
    // The first answer also waits for the reference to run on every seed.
    absl::Time deadline = started + variant_deadline +
                          absl::Seconds(task.launch_timeout_s() * task.seeds());
    while (sent.ok()) {
      wv1::WorkerResponse response;
      absl::Status read = gpu->process.Receive(deadline, &response);
      if (read.ok() && response.has_variant() && next >= 0 && next < count &&
          response.variant().variant_id() == task.variants(next).id()) {
        wv1::VariantOutcome outcome = std::move(*response.mutable_variant());
        const bool lost_worker = outcome.status() == v1::TIMEOUT || outcome.status() == v1::FAULT;
        if (on_variant) on_variant(outcome);
        result.outcomes.push_back(std::move(outcome));
        ++next;
        deadline = absl::Now() + variant_deadline;
        if (lost_worker) {
          // The worker exits by itself; SIGKILL makes sure a spinning kernel
          // goes with it.
          restarted = true;
          break;
        }
        continue;
      }
      if (read.ok() && response.has_profile_done()) {
        wv1::ProfileDone done = std::move(*response.mutable_profile_done());
        if (done.status() != v1::OK) {
          // The reference failed or the problem does not fit: the whole
          // problem ends here.
          if (done.status() == v1::TIMEOUT || done.status() == v1::FAULT) lose();
          result.done = std::move(done);
          next = count + 1;
          break;
        }
        if (next < 0) {
          next = 0;  // the reference runs; now the variants
          if (count == 0) {
            result.done = std::move(done);
            next = count + 1;
          }
          break;
        }
        if (next < count) {
          // Answers for some variants are missing: a worker bug. Blame none.
          result.done = Failed(task, v1::FAULT, "protocol",
                               absl::StrCat("the worker ended the task after ", next, " of ",
                                            count, " variants"));
          next = count + 1;
          break;
        }
        result.done = std::move(done);
        next = count + 1;
        break;
      }
      // Nothing usable: a deadline, a dead worker, or a stray message.
      std::string why;
      v1::VariantStatus status = v1::FAULT;
      if (absl::IsDeadlineExceeded(read)) {
        status = v1::TIMEOUT;
        why = absl::StrCat("the worker did not answer within ",
                           absl::FormatDuration(absl::Now() - started),
                           "; it was killed (SIGKILL)");
        gpu->process.Kill();
      } else if (read.ok()) {
        why = "the worker sent an unexpected message";
      } else {
        why = absl::StrCat("the worker ", gpu->process.ExitReason(), " (", read.message(), ")");
      }
      spdlog::warn("profile {}: {}", task.context(), why);
      if (next < 0) {
        result.done = Failed(task, status, "reference", why);
        lose();
        next = count + 1;
        break;
      }
      if (next < count) {
        wv1::VariantOutcome outcome = Lost(task, task.variants(next), status, why);
        if (on_variant) on_variant(outcome);
        result.outcomes.push_back(std::move(outcome));
        ++next;
      }
      restarted = true;
      break;
    }
    if (!sent.ok()) {
      // The worker was gone before the task: start a new one and try once
      // more; a second failure ends the problem.
      if (++send_failures > 1) {
        result.done = Failed(task, v1::FAULT, "send",
                             absl::StrCat("cannot send the task to a new worker: ", sent.message()));
        break;
      }
      lose();
      continue;
    }
    send_failures = 0;
    if (next > count) break;
    if (restarted) {
      lose();
      if (next >= count) {
        result.done.set_task_id(task.task_id());
        result.done.set_status(v1::OK);
        break;
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    gpu->busy = false;
  }
  return result;
}

}  // namespace autotune::service
