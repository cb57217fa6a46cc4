#include "service/jobs/screen_phase.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "proto/problem.h"
#include "service/jobs/choice.h"
#include "service/jobs/job_text.h"
#include "service/jobs/phase_store.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

// Adds the stages of a variant measured now to `time`.
void AddStages(const wv1::VariantOutcome& outcome, v1::ScreenTime* time) {
  const wv1::VariantTimeline& stages = outcome.timeline();
  v1::ScreenTime one;
  one.set_variants(1);
  one.set_load_s(stages.load_s());
  one.set_validate_s(stages.validate_s());
  one.set_graph_s(stages.graph_s());
  one.set_warmup_s(stages.warmup_s());
  one.set_samples_s(stages.samples_s());
  one.set_gpu_s(outcome.gpu_seconds());
  AddScreenTime(one, time);
}

class ProblemScreen {
 public:
  ProblemScreen(const PlannedProblem& problem, const ScreenJob& job,
                const std::vector<int64_t>* only)
      : problem_(problem),
        job_(job),
        family_(problem.record->family),
        context_(ProblemContext(family_.name(), problem.problem)),
        device_info_(job.gpus->devices().front()),
        device_(DeviceOf(device_info_)),
        store_(job.record) {
    if (only != nullptr) {
      indices_ = *only;
    } else {
      for (size_t i = 0; i < problem.space.variants.size(); ++i) {
        indices_.push_back(static_cast<int64_t>(i));
      }
    }
  }

  ScreenResult Run() {
    const absl::Time start = absl::Now();
    ScreenResult result = Screen();
    result.time.set_wall_s(absl::ToDoubleSeconds(absl::Now() - start));
    return result;
  }

 private:
  ScreenResult Screen() {
    const absl::Time start = absl::Now();
    kernels::CompiledKernel reference;
    if (std::optional<ScreenResult> failed = LoadReference(&reference)) return *std::move(failed);
    std::vector<kernels::CompiledVariant> compiled;
    if (std::optional<ScreenResult> failed = LoadVariants(&compiled)) return *std::move(failed);
    absl::StatusOr<wv1::ProfileTask> task = kernels::MakeProfileTask(
        family_, problem_.problem, problem_.space, reference, compiled, job_.options->screen);
    if (!task.ok()) return Failed(absl::AbortedError(task.status().message()));
    task->set_task_id(absl::StrCat(job_.job_id, "/", context_));
    result_.task = *task;
    result_.device = device_info_;
    std::set<std::string> done;
    if (absl::Status earlier = TakeEarlierScreens(compiled, &done); !earlier.ok()) {
      return StoreFailed(earlier);
    }
    if (done.size() == compiled.size()) return Finish();
    // Only what has no screen yet goes to the GPU.
    wv1::ProfileTask to_measure = *task;
    to_measure.clear_variants();
    for (const wv1::KernelImage& image : task->variants()) {
      if (!done.contains(image.id())) *to_measure.add_variants() = image;
    }
    result_.time.set_cubins_s(absl::ToDoubleSeconds(absl::Now() - start));
    return Profile(to_measure, compiled, done);
  }

  // The reference's cubin; when it did not compile nothing can be validated,
  // and every variant ends with the reason (the result says so).
  std::optional<ScreenResult> LoadReference(kernels::CompiledKernel* reference) {
    std::string reference_sha;
    const CompileEnd reference_end = Load(problem_.reference_key, reference, &reference_sha);
    if (!reference_end.store_error.ok()) return StoreFailed(reference_end.store_error);
    if (reference_end.status != v1::OK) {
      const std::string why = absl::StrCat("the reference kernel '", problem_.space.reference_name,
                                           "' did not compile: ", LogExcerpt(reference_end.log));
      for (int64_t i : indices_) {
        const kernels::Variant& variant = problem_.space.variants[static_cast<size_t>(i)];
        v1::Measurement m = Base(variant.config);
        m.set_status(v1::UNSUPPORTED);
        m.set_phase(v1::SCREEN);
        m.set_detail(absl::StrCat(Label(variant.config), ": not run: ", why));
        Record(m);
      }
      if (!store_.error().ok()) return StoreFailed(store_.error());
      return Failed(absl::AbortedError(why));
    }
    if (!store_.error().ok()) return StoreFailed(store_.error());
    return std::nullopt;
  }

  // The proposed variants' cubins; one that did not compile is stored as
  // its compile's outcome and left out.
  std::optional<ScreenResult> LoadVariants(std::vector<kernels::CompiledVariant>* compiled) {
    for (int64_t index : indices_) {
      const auto i = static_cast<size_t>(index);
      const kernels::Variant& variant = problem_.space.variants[i];
      kernels::CompiledVariant entry;
      entry.variant = &variant;
      entry.id = absl::StrCat(variant.index);
      std::string sha;
      const CompileEnd end = Load(problem_.variant_keys[i], &entry.kernel, &sha);
      if (!end.store_error.ok()) return StoreFailed(end.store_error);
      if (end.status != v1::OK) {
        v1::Measurement m = Base(variant.config);
        m.set_status(end.status == v1::VARIANT_STATUS_UNSPECIFIED ? v1::COMPILE_ERROR : end.status);
        m.set_phase(v1::COMPILE);
        m.set_detail(absl::StrCat(Label(variant.config), ": ", LogExcerpt(end.log)));
        Record(m);
        continue;
      }
      sha_by_id_[entry.id] = sha;
      variant_by_id_[entry.id] = &variant;
      compiled->push_back(std::move(entry));
    }
    if (!store_.error().ok()) return StoreFailed(store_.error());
    if (compiled->empty()) {
      result_.nothing_valid = true;
      return Failed(absl::AbortedError("no variant compiled"));
    }
    return std::nullopt;
  }

  // `to_measure` validated and timed on a GPU, each outcome stored as it
  // arrives. The screen only ranks: it runs whatever else is on the GPU,
  // and says what was.
  ScreenResult Profile(const wv1::ProfileTask& to_measure,
                       const std::vector<kernels::CompiledVariant>& compiled,
                       const std::set<std::string>& done) {
    std::vector<ScreenedVariant>& ok = result_.ok;
    v1::ScreenTime& time = result_.time;
    const absl::Time profiling = absl::Now();
    double variants_wall_s = 0;
    std::unique_ptr<ProfilePool::Reservation> gpu = job_.gpus->Reserve();
    if (absl::StatusOr<wv1::DeviceState> state = gpu->Probe();
        state.ok() && !state->foreign().empty()) {
      result_.contention = DescribeDeviceState(*state);
    }
    ProfileResult result = gpu->Profile(
        to_measure,
        [&](const wv1::VariantOutcome& outcome) {
          const absl::Time storing = absl::Now();
          v1::Measurement m = FromOutcome(outcome, to_measure.cache_state());
          Record(m);
          const kernels::Variant* variant = variant_by_id_[outcome.variant_id()];
          if (outcome.status() == v1::OK && variant != nullptr) ok.push_back({m, variant});
          AddStages(outcome, &time);
          variants_wall_s += outcome.wall_seconds();
          time.set_store_s(time.store_s() + absl::ToDoubleSeconds(absl::Now() - storing));
        },
        [&](const std::string& holder) {
          if (job_.progress) {
            job_.progress(
                absl::StrCat(context_, ": waiting for the lease of the GPU, held by ", holder));
          }
        });
    result_.device = result.device;
    time.set_worker_s(absl::ToDoubleSeconds(absl::Now() - profiling));
    time.set_setup_s(std::max(0.0, result.done.wall_seconds() - variants_wall_s));
    if (result.done.status() != v1::OK) {
      // The variants that never ran share the problem's fate.
      std::set<std::string> reported;
      for (const wv1::VariantOutcome& outcome : result.outcomes) {
        reported.insert(outcome.variant_id());
      }
      for (const kernels::CompiledVariant& entry : compiled) {
        if (reported.contains(entry.id) || done.contains(entry.id)) continue;
        v1::Measurement m = Base(entry.variant->config);
        m.set_status(result.done.status());
        m.set_phase(v1::SCREEN);
        m.set_binary_sha256(sha_by_id_[entry.id]);
        m.set_detail(absl::StrCat("not run: ", result.done.phase(), ": ", result.done.detail()));
        Record(m);
      }
      if (!store_.error().ok()) return StoreFailed(store_.error());
      return Failed(
          absl::AbortedError(absl::StrCat(result.done.phase(), ": ", result.done.detail())));
    }
    if (!store_.error().ok()) return StoreFailed(store_.error());
    return Finish();
  }

  ScreenResult Finish() {
    if (result_.ok.empty()) {
      result_.nothing_valid = true;
      return Failed(absl::AbortedError(absl::StrCat("none of ", result_.task.variants_size(),
                                                    " variants validated and timed OK")));
    }
    std::stable_sort(result_.ok.begin(), result_.ok.end(),
                     [](const ScreenedVariant& a, const ScreenedVariant& b) {
                       return a.measurement.timing().median_us() <
                              b.measurement.timing().median_us();
                     });
    return std::move(result_);
  }

  // Screens that need not be made again, added to the result and to `done`
  // by variant id: this job's own from before a restart
  // (ScreenJob.reuse_stored), then those an older family version that
  // differs only in its search space made of the same binary on this GPU
  // model and driver (PlannedProblem.screens_from_hash), copied as carried.
  absl::Status TakeEarlierScreens(const std::vector<kernels::CompiledVariant>& compiled,
                                  std::set<std::string>* done) {
    cache::EntryKey key{.family = family_.name(),
                        .family_hash = problem_.record->content_hash,
                        .problem = problem_.problem,
                        .device = device_info_.name()};
    if (job_.reuse_stored) {
      ASSIGN_OR_RETURN(std::vector<v1::Measurement> stored, ReadMeasurements(key));
      for (const kernels::CompiledVariant& entry : compiled) {
        const v1::Measurement* found = nullptr;
        for (const v1::Measurement& m : stored) {
          if (m.job_id() == job_.job_id && m.phase() == v1::SCREEN &&
              SameConfig(m.config(), entry.variant->config)) {
            found = &m;
          }
        }
        if (found == nullptr) continue;
        done->insert(entry.id);
        ++result_.status_counts[v1::VariantStatus_Name(found->status())];
        if (found->status() == v1::OK) result_.ok.push_back({*found, entry.variant});
      }
      result_.reused = done->size() == compiled.size();
    }
    if (problem_.screens_from_hash.empty() || done->size() == compiled.size()) {
      return absl::OkStatus();
    }
    key.family_hash = problem_.screens_from_hash;
    ASSIGN_OR_RETURN(std::vector<v1::Measurement> older, ReadMeasurements(key));
    // A fault or a timeout may have come from the GPU's state then: those
    // are measured again.
    std::vector<const v1::Measurement*> definite;
    for (const v1::Measurement& m : older) {
      const bool final_status =
          m.status() == v1::OK || m.status() == v1::WRONG_RESULT || m.status() == v1::UNSUPPORTED;
      if (m.phase() == v1::SCREEN && final_status && !m.binary_sha256().empty() &&
          m.driver_version() == device_info_.driver_version() &&
          m.cache_state() == result_.task.cache_state()) {
        definite.push_back(&m);
      }
    }
    for (const kernels::CompiledVariant& entry : compiled) {
      if (done->contains(entry.id)) continue;
      // The latest screen of the same binary and config.
      const v1::Measurement* latest = nullptr;
      for (const v1::Measurement* m : definite) {
        if (m->binary_sha256() == sha_by_id_[entry.id] &&
            SameConfig(m->config(), entry.variant->config) &&
            (latest == nullptr || m->measured_at() >= latest->measured_at())) {
          latest = m;
        }
      }
      if (latest == nullptr) continue;
      v1::Measurement m = *latest;
      m.set_family_hash(problem_.record->content_hash);
      *m.mutable_config() = entry.variant->config;
      m.set_carried(true);
      m.set_detail(absl::StrCat("carried from the screen of job ", m.job_id(), " (family version ",
                                problem_.screens_from_hash.substr(0, 12),
                                ", the same binary): ", m.detail()));
      m.set_job_id(job_.job_id);
      Record(m);
      done->insert(entry.id);
      ++result_.carried;
      if (m.status() == v1::OK) result_.ok.push_back({m, entry.variant});
    }
    if (result_.carried > 0) result_.carried_from = problem_.screens_from_hash;
    return store_.error();
  }

  absl::StatusOr<std::vector<v1::Measurement>> ReadMeasurements(const cache::EntryKey& key) {
    absl::StatusOr<std::vector<v1::Measurement>> stored = job_.store->ListMeasurements(key);
    if (!stored.ok()) {
      return absl::Status(stored.status().code(), absl::StrCat("cannot read the measurements: ",
                                                               stored.status().message()));
    }
    return stored;
  }

  ScreenResult Failed(const absl::Status& why, bool store_failed = false) {
    result_.ok.clear();
    result_.error = absl::Status(why.code(), absl::StrCat(context_, ": ", why.message()));
    result_.store_failed = store_failed;
    return std::move(result_);
  }
  ScreenResult StoreFailed(const absl::Status& why) { return Failed(why, true); }

  std::string Label(const v1::Config& config) const {
    return absl::StrCat(context_, " [", kernels::ConfigLabel(family_, config), "]");
  }

  v1::Measurement Base(const v1::Config& config) const {
    v1::Measurement m;
    m.set_family(family_.name());
    m.set_family_hash(problem_.record->content_hash);
    *m.mutable_problem() = problem_.problem;
    *m.mutable_device() = device_;
    *m.mutable_config() = config;
    m.set_driver_version(device_info_.driver_version());
    m.set_job_id(job_.job_id);
    m.set_measured_at(Timestamp());
    return m;
  }

  // Stores `m`; a store error ends the screen at the next check.
  void Record(const v1::Measurement& m) {
    ++result_.status_counts[v1::VariantStatus_Name(m.status())];
    store_.Record(m, /*count=*/true);
  }

  // The compiled kernel of `key`: from the compile phase, its image read
  // from the store when this job did not compile it.
  CompileEnd Load(const std::string& key, kernels::CompiledKernel* kernel, std::string* sha256) {
    auto it = job_.compiled->find(key);
    if (it == job_.compiled->end()) {
      CompileEnd missing;
      missing.status = v1::COMPILE_ERROR;
      missing.log = "not compiled (the job was cancelled)";
      return missing;
    }
    const CompileEnd& end = it->second;
    if (!end.store_error.ok() || end.status != v1::OK) return end;
    kernel->lowered_name = end.lowered_name;
    *sha256 = end.binary_sha256;
    if (!end.cubin.empty()) {
      kernel->cubin = end.cubin;
      return end;
    }
    absl::StatusOr<v1::Binary> binary = job_.store->GetBinary(end.binary_sha256);
    if (!binary.ok()) {
      CompileEnd failed;
      failed.store_error = absl::Status(
          binary.status().code(),
          absl::StrCat("cannot read binary ", end.binary_sha256, ": ", binary.status().message()));
      return failed;
    }
    kernel->cubin = std::move(*binary->mutable_cubin());
    return end;
  }

  v1::Measurement FromOutcome(const wv1::VariantOutcome& outcome, v1::CacheState cache_state) {
    const kernels::Variant* variant = variant_by_id_[outcome.variant_id()];
    v1::Measurement m = Base(variant != nullptr ? variant->config : v1::Config());
    m.set_status(outcome.status());
    m.set_phase(v1::SCREEN);
    *m.mutable_timing() = outcome.timing();
    m.set_max_error(outcome.max_error());
    m.set_binary_sha256(sha_by_id_[outcome.variant_id()]);
    m.set_cache_state(cache_state);
    std::string detail = outcome.detail();
    if (outcome.status() == v1::OK) {
      absl::StrAppend(&detail, detail.empty() ? "" : "; ", "validated on ", outcome.seeds_checked(),
                      " seeds (max |v - r| ", outcome.max_error(), " at seed ",
                      outcome.worst_seed(), "; rtol ", outcome.rtol(), ", atol ", outcome.atol(),
                      ")");
      if (outcome.pool_sets() > 0) {
        absl::StrAppend(&detail, "; timed over ", outcome.pool_sets(), " input sets (",
                        outcome.pool_bytes() >> 20, " MiB touched per pass), ",
                        outcome.timing().samples(), " samples of ", outcome.launches_per_sample(),
                        " launches");
      }
    }
    m.set_detail(detail);
    return m;
  }

  const PlannedProblem& problem_;
  const ScreenJob& job_;
  const v1::KernelFamily& family_;
  const std::string context_;
  const wv1::DeviceInfo device_info_;
  const v1::Device device_;
  std::vector<int64_t> indices_;  // of the variants to screen, into space.variants
  std::map<std::string, std::string> sha_by_id_;
  std::map<std::string, const kernels::Variant*> variant_by_id_;
  PhaseStore store_;
  ScreenResult result_;
};

}  // namespace

ScreenResult ScreenProblem(const PlannedProblem& problem, const ScreenJob& job,
                           const std::vector<int64_t>* only) {
  return ProblemScreen(problem, job, only).Run();
}

void AddScreenTime(const v1::ScreenTime& more, v1::ScreenTime* time) {
  time->set_variants(time->variants() + more.variants());
  time->set_wall_s(time->wall_s() + more.wall_s());
  time->set_cubins_s(time->cubins_s() + more.cubins_s());
  time->set_worker_s(time->worker_s() + more.worker_s());
  time->set_setup_s(time->setup_s() + more.setup_s());
  time->set_load_s(time->load_s() + more.load_s());
  time->set_validate_s(time->validate_s() + more.validate_s());
  time->set_graph_s(time->graph_s() + more.graph_s());
  time->set_warmup_s(time->warmup_s() + more.warmup_s());
  time->set_samples_s(time->samples_s() + more.samples_s());
  time->set_gpu_s(time->gpu_s() + more.gpu_s());
  time->set_store_s(time->store_s() + more.store_s());
}

void AddScreens(ScreenResult batch, ScreenResult* all) {
  const bool first = all->task.variants().empty() && all->status_counts.empty();
  AddScreenTime(batch.time, &all->time);
  for (const auto& [status, n] : batch.status_counts) all->status_counts[status] += n;
  all->reused = first ? batch.reused : all->reused && batch.reused;
  all->carried += batch.carried;
  if (!batch.carried_from.empty()) all->carried_from = batch.carried_from;
  if (all->contention.empty()) all->contention = batch.contention;
  if (batch.device.name().empty() == false) all->device = batch.device;
  if (!batch.error.ok() && !batch.nothing_valid) {
    all->error = batch.error;
    all->store_failed = batch.store_failed;
    all->nothing_valid = false;
  }
  if (!all->error.ok()) {
    all->ok.clear();
    return;
  }
  if (batch.task.variants().empty()) return;
  if (all->task.variants().empty()) {
    all->task = std::move(batch.task);
  } else {
    for (worker::v1::KernelImage& image : *batch.task.mutable_variants()) {
      *all->task.add_variants() = std::move(image);
    }
  }
  for (ScreenedVariant& variant : batch.ok) all->ok.push_back(std::move(variant));
  std::stable_sort(all->ok.begin(), all->ok.end(),
                   [](const ScreenedVariant& a, const ScreenedVariant& b) {
                     return a.measurement.timing().median_us() < b.measurement.timing().median_us();
                   });
}

void FinishScreens(const std::string& context, ScreenResult* all) {
  if (!all->error.ok() || !all->ok.empty()) return;
  all->nothing_valid = true;
  all->error = absl::AbortedError(
      all->task.variants().empty() ? absl::StrCat(context, ": no variant compiled")
                                   : absl::StrCat(context, ": none of ", all->task.variants_size(),
                                                  " variants validated and timed OK"));
}

}  // namespace autotune::service
