#include "service/pools/profile_pool.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/gpu_lease.h"
#include "kernels/profile_task.h"
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
    return absl::FailedPreconditionError(absl::StrCat("profile worker ", hello.status().message()));
  }
  if (!hello->has_device()) {
    gpu.process.Kill();
    return absl::FailedPreconditionError(
        absl::StrCat("profile worker for device ", ordinal, " did not describe its device"));
  }
  absl::MutexLock lock(&mu_);  // devices() reads it from other threads
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
  std::vector<std::unique_ptr<Gpu>> gpus;
  gpus.push_back(std::move(gpu));
  for (size_t i = 1; i < ordinals.size(); ++i) {
    auto other = std::make_unique<Gpu>();
    // Not under mu_: StartWorker takes it to publish the device.
    if (absl::Status started = pool->StartWorker(*other, ordinals[i]); !started.ok()) {
      return started;
    }
    gpus.push_back(std::move(other));
  }
  absl::MutexLock lock(&pool->mu_);
  for (auto& started : gpus) pool->gpus_.push_back(std::move(started));
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
          gpu->info.name(), " (", gpu->info.sm_count(), " SMs); choose GPUs of one model"));
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

std::vector<GpuStatus> ProfilePool::Status() const {
  absl::MutexLock lock(&mu_);
  std::vector<GpuStatus> status;
  for (const auto& gpu : gpus_) {
    status.push_back({.info = gpu->info,
                      .busy = gpu->busy,
                      .last_probe = gpu->last_probe,
                      .probed_at = gpu->probed_at});
  }
  return status;
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
  absl::Duration deadline = absl::Seconds(launch * (seeds + 4) + budget * 4) + grace;
  if (task.has_serial()) {
    // After the last validation the rounds run before the next answer:
    // their GPU time cap, twice over for redone rounds and the host's share,
    // plus one launch's time per round.
    const double cap = kernels::ResolveSerialRule(task.serial()).max_seconds;
    deadline += absl::Seconds(2 * cap + launch * 4);
  }
  return deadline;
}

// One task dispatched to one GPU's worker (the worker side runs it as
// TaskRun, service/worker/task_run.h), in one request: the worker sets the
// problem up once and says when its reference has run (ReferenceDone);
// a worker that hangs or dies after that is the variant's doing. A worker
// lost to a variant is replaced and the variants not yet answered go to the
// new one.
class ProfilePool::TaskDispatch {
 public:
  TaskDispatch(ProfilePool& pool, Gpu& gpu, const wv1::ProfileTask& task,
               const OnVariant& on_variant)
      : pool_(pool),
        gpu_(gpu),
        task_(task),
        on_variant_(on_variant),
        variant_deadline_(VariantDeadline(task, pool.options_.grace)) {
    result_.device = gpu.info;
  }

  ProfileResult Run() && {
    int send_failures = 0;
    while (stage_ != Stage::kEnded) {
      if (!gpu_.process.running()) {
        absl::Status started = pool_.StartWorker(gpu_, gpu_.info.ordinal());
        if (!started.ok()) {
          End(Failed(task_, v1::FAULT, "restart",
                     absl::StrCat("cannot start a new worker: ", started.message())));
          break;
        }
      }
      absl::Status sent = gpu_.process.Send(Request());
      if (!sent.ok()) {
        // The worker was gone before the task: start a new one and try once
        // more; a second failure ends the problem.
        if (++send_failures > 1) {
          End(Failed(task_, v1::FAULT, "send",
                     absl::StrCat("cannot send the task to a new worker: ", sent.message())));
          break;
        }
        Lose();
        continue;
      }
      send_failures = 0;
      if (ReadAnswers() == WorkerAfter::kLost) {
        Lose();
        if (stage_ == Stage::kVariants && next_ >= task_.variants_size()) {
          if (task_.has_serial()) {
            // Lost in the rounds, after every validation: no timing came.
            End(Failed(task_, lost_status_, "serial rounds", lost_why_));
          } else {
            // The worker went after the last variant: every variant answered.
            result_.done.set_task_id(task_.task_id());
            result_.done.set_status(v1::OK);
            stage_ = Stage::kEnded;
          }
        }
      }
    }
    return std::move(result_);
  }

 private:
  enum class Stage { kReference, kVariants, kEnded };
  // Whether the worker can take the next request.
  enum class WorkerAfter { kUsable, kLost };

  // The task with the variants not yet answered. Its worker says when the
  // reference has run (ReferenceDone), so a worker lost before that lost
  // the reference, and one lost after it lost variant next_.
  wv1::WorkerRequest Request() const {
    wv1::WorkerRequest request;
    wv1::ProfileTask* sub = request.mutable_profile();
    *sub = task_;
    sub->clear_variants();
    for (int i = next_; i < task_.variants_size(); ++i) *sub->add_variants() = task_.variants(i);
    return request;
  }

  void End(wv1::ProfileDone done) {
    result_.done = std::move(done);
    stage_ = Stage::kEnded;
  }

  // A worker that hung, faulted or died is killed (SIGKILL also takes a
  // spinning kernel with it) and counted as replaced; the next one starts
  // when there is work for it.
  void Lose() {
    gpu_.process.Kill();
    ++pool_.replaced_;
    ++result_.workers_replaced;
  }

  void Report(wv1::VariantOutcome outcome) {
    if (on_variant_) on_variant_(outcome);
    result_.outcomes.push_back(std::move(outcome));
    ++next_;
  }

  // Reads what the worker says about the request just sent, until the
  // request is done or the worker is lost.
  WorkerAfter ReadAnswers() {
    const absl::Time started = absl::Now();
    // The first answer also waits for the reference to run on every seed.
    absl::Time deadline =
        started + variant_deadline_ + absl::Seconds(task_.launch_timeout_s() * task_.seeds());
    while (true) {
      wv1::WorkerResponse response;
      absl::Status read = gpu_.process.Receive(deadline, &response);
      if (read.ok() && response.has_reference_done() &&
          response.reference_done().task_id() == task_.task_id()) {
        // A replacement worker runs the reference again: the variants'
        // deadlines start now either way.
        stage_ = Stage::kVariants;
        deadline = absl::Now() + variant_deadline_;
        continue;
      }
      if (read.ok() && response.has_variant() && stage_ == Stage::kVariants &&
          next_ < task_.variants_size() &&
          response.variant().variant_id() == task_.variants(next_).id()) {
        const v1::VariantStatus status = response.variant().status();
        Report(std::move(*response.mutable_variant()));
        deadline = absl::Now() + variant_deadline_;
        // After a hang or a fault the worker exits by itself; SIGKILL makes
        // sure a spinning kernel goes with it.
        if (status == v1::TIMEOUT || status == v1::FAULT) return WorkerAfter::kLost;
        continue;
      }
      if (read.ok() && response.has_profile_done()) {
        return Done(std::move(*response.mutable_profile_done()));
      }
      // Nothing usable: a deadline, a dead worker, or a stray message.
      std::string why;
      v1::VariantStatus status = v1::FAULT;
      if (absl::IsDeadlineExceeded(read)) {
        status = v1::TIMEOUT;
        why =
            absl::StrCat("the worker did not answer within ",
                         absl::FormatDuration(absl::Now() - started), "; it was killed (SIGKILL)");
        gpu_.process.Kill();
      } else if (read.ok()) {
        why = "the worker sent an unexpected message";
      } else {
        why = absl::StrCat("the worker ", gpu_.process.ExitReason(), " (", read.message(), ")");
      }
      spdlog::warn("profile {}: {}", task_.context(), why);
      lost_status_ = status;
      lost_why_ = why;
      if (stage_ == Stage::kReference) {
        Lose();
        End(Failed(task_, status, "reference", why));
        return WorkerAfter::kUsable;  // lost already, and the task has ended
      }
      if (next_ < task_.variants_size()) {
        Report(Lost(task_, task_.variants(next_), status, why));
      }
      return WorkerAfter::kLost;
    }
  }

  // The worker says the request is done.
  WorkerAfter Done(wv1::ProfileDone done) {
    if (done.status() != v1::OK) {
      // The reference failed or the problem does not fit: the whole problem
      // ends here.
      if (done.status() == v1::TIMEOUT || done.status() == v1::FAULT) Lose();
      End(std::move(done));
      return WorkerAfter::kUsable;
    }
    if (stage_ == Stage::kReference && task_.variants_size() > 0) {
      End(Failed(task_, v1::FAULT, "protocol",
                 "the worker ended the task without saying that its reference ran"));
      return WorkerAfter::kUsable;
    }
    if (next_ < task_.variants_size()) {
      // Answers for some variants are missing: a worker bug. Blame none.
      End(Failed(task_, v1::FAULT, "protocol",
                 absl::StrCat("the worker ended the task after ", next_, " of ",
                              task_.variants_size(), " variants")));
      return WorkerAfter::kUsable;
    }
    End(std::move(done));
    return WorkerAfter::kUsable;
  }

  ProfilePool& pool_;
  Gpu& gpu_;
  const wv1::ProfileTask& task_;
  const OnVariant& on_variant_;
  const absl::Duration variant_deadline_;
  Stage stage_ = Stage::kReference;
  int next_ = 0;                               // the first variant not yet answered (kVariants)
  v1::VariantStatus lost_status_ = v1::FAULT;  // why the last worker was lost
  std::string lost_why_;
  ProfileResult result_;
};

ProfileResult ProfilePool::RunOn(Gpu& gpu, const wv1::ProfileTask& task,
                                 const OnVariant& on_variant, const OnLeaseWait& on_lease_wait) {
  std::optional<GpuLease> lease;
  if (!options_.lease_dir.empty()) {
    absl::StatusOr<GpuLease> taken = GpuLease::Acquire(
        options_.lease_dir, gpu.info.uuid(), absl::StrCat("autotuned task ", task.task_id()),
        options_.lease_wait, [&](const std::string& holder) {
          if (on_lease_wait) on_lease_wait(holder);
          return true;
        });
    if (!taken.ok()) {
      ProfileResult result;
      result.device = gpu.info;
      result.done = Failed(task, v1::FAULT, "lease",
                           absl::StrCat("GPU ", gpu.info.ordinal(), " (", gpu.info.uuid(),
                                        "): no lease: ", taken.status().message()));
      return result;
    }
    lease.emplace(*std::move(taken));
  }
  return TaskDispatch(*this, gpu, task, on_variant).Run();
}

ProfilePool::Reservation::~Reservation() {
  absl::MutexLock lock(&pool_.mu_);
  gpu_.busy = false;
}

wv1::DeviceInfo ProfilePool::Reservation::device() const {
  absl::MutexLock lock(&pool_.mu_);
  return gpu_.info;
}

absl::StatusOr<wv1::DeviceState> ProfilePool::Reservation::Probe() {
  if (!gpu_.process.running()) {
    if (absl::Status started = pool_.StartWorker(gpu_, gpu_.info.ordinal()); !started.ok()) {
      return absl::UnavailableError(started.message());
    }
  }
  wv1::WorkerRequest request;
  request.mutable_probe();
  if (absl::Status sent = gpu_.process.Send(request); !sent.ok()) {
    gpu_.process.Kill();
    return absl::UnavailableError(absl::StrCat("probe: ", sent.message()));
  }
  wv1::WorkerResponse response;
  absl::Status read = gpu_.process.Receive(absl::Now() + absl::Seconds(30), &response);
  if (!read.ok() || !response.has_device_state()) {
    gpu_.process.Kill();
    return absl::UnavailableError(
        absl::StrCat("probe: the worker did not answer with its device state",
                     read.ok() ? "" : absl::StrCat(" (", read.message(), ")")));
  }
  absl::MutexLock lock(&pool_.mu_);
  gpu_.last_probe = response.device_state();
  gpu_.probed_at = absl::Now();
  return std::move(*response.mutable_device_state());
}

absl::Status ProfilePool::Reservation::Renew() {
  gpu_.process.Stop();
  if (absl::Status started = pool_.StartWorker(gpu_, gpu_.info.ordinal()); !started.ok()) {
    return absl::UnavailableError(started.message());
  }
  return absl::OkStatus();
}

ProfileResult ProfilePool::Reservation::Profile(const wv1::ProfileTask& task,
                                                const OnVariant& on_variant,
                                                const OnLeaseWait& on_lease_wait) {
  return pool_.RunOn(gpu_, task, on_variant, on_lease_wait);
}

int ProfilePool::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size());
}

std::unique_ptr<ProfilePool::Reservation> ProfilePool::Reserve() {
  absl::MutexLock lock(&mu_);
  // First come, first served: a free GPU goes to the oldest waiter, so the
  // problems of several jobs take turns instead of racing for the lock.
  const int64_t ticket = next_ticket_++;
  waiting_.insert(ticket);
  auto my_turn = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return *waiting_.begin() == ticket &&
           std::any_of(gpus_.begin(), gpus_.end(), [](const auto& g) { return !g->busy; });
  };
  mu_.Await(absl::Condition(&my_turn));
  waiting_.erase(ticket);
  for (auto& candidate : gpus_) {
    if (!candidate->busy) {
      candidate->busy = true;
      return std::unique_ptr<Reservation>(new Reservation(*this, *candidate));
    }
  }
  return nullptr;  // unreachable: the condition holds under mu_
}

ProfileResult ProfilePool::Profile(const wv1::ProfileTask& task, const OnVariant& on_variant,
                                   const OnLeaseWait& on_lease_wait) {
  std::unique_ptr<Reservation> reservation = Reserve();
  return reservation->Profile(task, on_variant, on_lease_wait);
}

}  // namespace autotune::service
