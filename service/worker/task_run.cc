#include "service/worker/task_run.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/worker.pb.h"
#include "service/worker/driver_failure.h"

namespace autotune::kernel_worker::internal {

Failure TaskRun::Fail(const absl::Status& status, Origin origin, const std::string& phase) {
  const DriverFailure classified = ClassifyDriverFailure(status, origin);
  Failure failure{classified.status, phase, std::string(status.message())};
  if (classified.context_lost && *usable_) {
    *usable_ = false;
    // From here on freeing memory or unloading a module could wait for a
    // hung kernel: leak everything, the process exits.
    gpu_.driver->Abandon();
  }
  return failure;
}

wv1::VariantOutcome TaskRun::NewOutcome(const wv1::KernelImage& image) const {
  wv1::VariantOutcome outcome;
  outcome.set_task_id(task_.task_id());
  outcome.set_variant_id(image.id());
  outcome.set_rtol(rtol_);
  outcome.set_atol(atol_);
  return outcome;
}

wv1::VariantOutcome TaskRun::RunVariant(const wv1::KernelImage& image) {
  const Clock::time_point start = Clock::now();
  variant_gpu_s_ = 0;
  timeline_.Clear();
  wv1::VariantOutcome outcome = NewOutcome(image);
  const std::string label = image.label().empty() ? image.id() : image.label();
  std::string summary;
  std::optional<Failure> failure;
  {
    // The module is unloaded at the end of this scope, after all its work
    // finished (or, when the context is lost, never: see Fail()).
    LoadedKernel kernel;
    Clock::time_point stage = Clock::now();
    failure = LoadKernel(image, "load", "check", &kernel);
    timeline_.set_load_s(SecondsSince(stage));
    outcome.set_registers(kernel.registers);
    outcome.set_static_shared_bytes(kernel.static_shared);
    double estimate_us = 0;
    if (!failure) {
      stage = Clock::now();
      failure = Validate(kernel, &outcome, &estimate_us);
      timeline_.set_validate_s(SecondsSince(stage));
    }
    if (!failure) {
      summary = absl::StrCat("valid over ", seeds_, " seeds (max |v - r| ",
                             Num(outcome.max_error()), ")");
      outcome.set_phase("validate");
    }
    if (!failure && !task_.validate_only()) {
      std::string timing;
      failure = Time(kernel, image, estimate_us, &outcome, &timing);
      absl::StrAppend(&summary, "; ", timing);
    }
  }
  if (failure) {
    outcome.set_status(failure->status);
    outcome.set_phase(failure->phase);
    outcome.set_detail(Detail(label, failure->phase, failure->message));
    outcome.clear_timing();
  } else {
    outcome.set_status(v1::OK);
    outcome.set_detail(Detail(label, outcome.phase(), summary));
  }
  outcome.set_gpu_seconds(variant_gpu_s_);
  outcome.set_wall_seconds(SecondsSince(start));
  *outcome.mutable_timeline() = timeline_;
  return outcome;
}

wv1::ProfileDone TaskRun::Execute() {
  const Clock::time_point start = Clock::now();
  wv1::ProfileDone done;
  done.set_task_id(task_.task_id());
  auto finish = [&](const std::optional<Failure>& failure, const std::string& summary) {
    if (failure) {
      done.set_status(failure->status);
      done.set_phase(failure->phase);
      done.set_detail(absl::StrCat(Prefix(), ": ", failure->phase, ": ", failure->message));
    } else {
      done.set_status(v1::OK);
      done.set_detail(absl::StrCat(Prefix(), ": ", summary));
    }
    done.set_gpu_seconds(task_gpu_s_);
    done.set_wall_seconds(SecondsSince(start));
    done.set_peak_memory_bytes(peak_bytes_);
    done.set_pool_sets(max_pool_sets_);
    done.set_pool_bytes(max_pool_bytes_);
    if (!failure && task_.has_serial()) *done.mutable_serial() = serial_report_;
    return done;
  };

  if (!*usable_) {
    return finish(
        Failure{v1::FAULT, "task", "the GPU context is unusable after an earlier fault or timeout"},
        "");
  }
  if (std::optional<Failure> failure = Prepare()) return finish(failure, "");
  if (absl::Status status = gpu_.context.MakeCurrent(); !status.ok()) {
    return finish(Fail(status, Origin::kSetup, "task"), "");
  }
  if (std::optional<Failure> failure = AllocateProblem()) return finish(failure, "");
  if (std::optional<Failure> failure = RunReference()) return finish(failure, "");
  if (reference_done_) reference_done_();
  if (!task_.validate_only()) {
    if (std::optional<Failure> failure = AllocatePool()) return finish(failure, "");
  }

  if (task_.has_serial() && !task_.validate_only()) return RunSerial(finish);

  std::map<std::string, int> counts;
  const int variants = task_.variants_size();
  for (int i = 0; i < variants; ++i) {
    const wv1::VariantOutcome outcome = RunVariant(task_.variants(i));
    emit_(outcome);
    ++counts[v1::VariantStatus_Name(outcome.status())];
    if (!*usable_) {
      return finish(
          Failure{outcome.status(), absl::StrCat("variant ", outcome.variant_id()),
                  absl::StrCat("variant '", outcome.variant_id(), "' ended in ",
                               v1::VariantStatus_Name(outcome.status()), " at ", outcome.phase(),
                               " and left the GPU context unusable; ", variants - i - 1,
                               " variants not run (a new worker must run them)")},
          "");
    }
  }
  // A launch the driver refused may leave fills of ours in the stream;
  // nothing may be freed under them.
  absl::Status status = gpu_.Record(kSpanBegin);
  if (status.ok()) status = gpu_.Wait(kSpanBegin, kUtilityTimeoutS, "the end of the task");
  if (!status.ok()) return finish(Fail(status, Origin::kSetup, "task end"), "");

  std::vector<std::string> tally;
  for (const auto& [name, count] : counts) tally.push_back(absl::StrCat(count, " ", name));
  return finish(std::nullopt, absl::StrCat(variants, " variants", tally.empty() ? "" : ": ",
                                           absl::StrJoin(tally, ", ")));
}

}  // namespace autotune::kernel_worker::internal
