#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "kernels/gpu/cuda_driver.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/worker/scalar_encoding.h"
#include "service/worker/task_run.h"

namespace autotune::kernel_worker::internal {
namespace {

DeviceFill ResolveFill(const v1::Fill& fill) {
  switch (fill.kind()) {
    case v1::Fill::UNIFORM:
      return {kFillUniform, fill.low(), fill.high()};
    case v1::Fill::NORMAL:
      return {kFillNormal, fill.low(), fill.high()};
    case v1::Fill::ZERO:
      return {kFillConstant, 0, 0};
    case v1::Fill::ONE:
      return {kFillConstant, 1, 0};
    default:
      // KIND_UNSPECIFIED: uniform in [low, high), [-1, 1) when both are 0.
      if (fill.low() == 0 && fill.high() == 0) return {kFillUniform, -1, 1};
      return {kFillUniform, fill.low(), fill.high()};
  }
}

}  // namespace

absl::StatusOr<kernels::DeviceBuffer> TaskRun::Allocate(size_t bytes, const std::string& what) {
  absl::StatusOr<kernels::DeviceBuffer> buffer =
      kernels::DeviceBuffer::Allocate(*gpu_.driver, bytes);
  if (!buffer.ok()) {
    absl::Status status(
        buffer.status().code(),
        absl::StrCat("allocating ", Bytes(static_cast<int64_t>(bytes)), " for ", what, " (",
                     Bytes(allocated_bytes_), " already allocated by this task, budget ",
                     Bytes(budget_bytes_), "): ", buffer.status().message()));
    // Keeps the CUresult, which decides what the failure means.
    buffer.status().ForEachPayload([&status](absl::string_view url, const absl::Cord& payload) {
      status.SetPayload(url, payload);
    });
    return status;
  }
  allocated_bytes_ += static_cast<int64_t>(bytes);
  peak_bytes_ = std::max(peak_bytes_, allocated_bytes_);
  return buffer;
}

std::vector<CUdeviceptr> TaskRun::OutputsOfSet(size_t set) const {
  std::vector<CUdeviceptr> pointers;
  for (size_t index : outputs_) pointers.push_back(SetPointer(set, buffers_[index]));
  return pointers;
}

std::vector<CUdeviceptr> TaskRun::OutputsOfReference(size_t seed_index) const {
  std::vector<CUdeviceptr> pointers;
  for (size_t index : outputs_) pointers.push_back(ReferencePointer(seed_index, buffers_[index]));
  return pointers;
}

absl::StatusOr<KernelArgs> TaskRun::ArgsForSet(size_t set, const LoadedKernel& kernel) const {
  std::vector<CUdeviceptr> pointers;
  for (const BufferSlot& buffer : buffers_) pointers.push_back(SetPointer(set, buffer));
  std::vector<CUtensorMap> maps;
  for (const v1::TensorMapLayout& layout : kernel.tensor_maps) {
    absl::StatusOr<CUtensorMap> map = kernels::EncodeTensorMap(
        *gpu_.driver, layout, pointers[static_cast<size_t>(layout.buffer())]);
    if (!map.ok()) {
      return absl::Status(map.status().code(),
                          absl::StrCat("tensor map over '", buffers_[layout.buffer()].name,
                                       "': ", map.status().message()));
    }
    maps.push_back(*map);
  }
  return KernelArgs(std::move(pointers), std::move(maps), scalars_);
}

KernelArgs TaskRun::ArgsForReference(size_t seed_index) const {
  std::vector<CUdeviceptr> pointers;
  for (const BufferSlot& buffer : buffers_) {
    pointers.push_back(buffer.is_output() ? ReferencePointer(seed_index, buffer)
                                          : SetPointer(0, buffer));
  }
  return KernelArgs(std::move(pointers), {}, scalars_);
}

std::optional<Failure> TaskRun::Prepare() {
  auto invalid = [](std::string message) {
    return Failure{v1::UNSUPPORTED, "task", absl::StrCat("invalid task: ", message)};
  };
  if (task_.seeds() < kernels::kMinSeeds || !(task_.launch_timeout_s() > 0) ||
      !(task_.timing_budget_s() > 0) || task_.min_samples() <= 0) {
    return invalid(absl::StrCat("seeds (", task_.seeds(), ", at least ", kernels::kMinSeeds,
                                "), launch_timeout_s (", Num(task_.launch_timeout_s()),
                                "), timing_budget_s (", Num(task_.timing_budget_s()),
                                ") and min_samples (", task_.min_samples(), ") must be set"));
  }
  seeds_ = task_.seeds();
  launch_timeout_s_ = task_.launch_timeout_s();
  timing_budget_s_ = task_.timing_budget_s();
  min_samples_ = std::min(task_.min_samples(), kMaxSamples);
  if (task_.warmup_s() > 0 && std::isfinite(task_.warmup_s())) {
    warmup_us_ = std::min(task_.warmup_s(), 1.0) * 1e6;
  }
  cache_state_ = task_.cache_state() == v1::HOT ? v1::HOT : v1::COLD;
  rtol_ = task_.rtol();
  atol_ = task_.atol();
  if (!(rtol_ >= 0) || !(atol_ >= 0)) {
    return invalid(absl::StrCat("rtol ", Num(rtol_), " and atol ", Num(atol_),
                                " must be non-negative numbers"));
  }
  if (!std::isfinite(task_.launch_timeout_s()) || !std::isfinite(task_.timing_budget_s())) {
    return invalid("launch_timeout_s and timing_budget_s must be finite");
  }

  size_t offset = 0;
  for (int i = 0; i < task_.buffers_size(); ++i) {
    const wv1::BufferSpec& spec = task_.buffers(i);
    BufferSlot slot;
    slot.name = spec.name().empty() ? absl::StrCat("#", i) : spec.name();
    slot.dtype = spec.dtype();
    slot.role = spec.role();
    slot.elements = spec.elements();
    slot.fill = ResolveFill(spec.fill());
    const int64_t element_bytes = DTypeBytes(slot.dtype);
    if (element_bytes == 0) {
      return invalid(absl::StrCat("buffer '", slot.name, "' has no supported dtype (",
                                  DTypeName(slot.dtype), ")"));
    }
    if (!slot.is_input() && !slot.is_output() && !slot.is_scratch()) {
      return invalid(
          absl::StrCat("buffer '", slot.name, "' has no role (IN, OUT, INOUT or SCRATCH)"));
    }
    if (slot.elements <= 0 || slot.elements > (int64_t{1} << 50)) {
      return invalid(absl::StrCat("buffer '", slot.name, "' has ", slot.elements, " elements"));
    }
    slot.bytes = slot.elements * element_bytes;
    slot.offset = offset;
    offset += AlignUp(static_cast<size_t>(slot.bytes));
    if (slot.is_output()) {
      slot.output_offset = output_bytes_;
      output_bytes_ += AlignUp(static_cast<size_t>(slot.bytes));
      outputs_.push_back(buffers_.size());
    }
    buffers_.push_back(std::move(slot));
  }
  set_bytes_ = offset;
  if (outputs_.empty()) return invalid("no OUT or INOUT buffer to validate");

  for (int i = 0; i < task_.scalars_size(); ++i) {
    const wv1::ScalarSpec& spec = task_.scalars(i);
    absl::StatusOr<EncodedScalar> encoded = EncodeScalar(spec.dtype(), spec.value());
    if (!encoded.ok()) {
      return invalid(absl::StrCat("scalar '", spec.name(), "' (", DTypeName(spec.dtype()),
                                  "): ", encoded.status().message()));
    }
    scalars_.push_back(encoded->slot);
    scalar_sizes_.push_back(encoded->size);
  }
  if (task_.reference().cubin().empty() || task_.reference().lowered_name().empty()) {
    return invalid("the reference kernel has no cubin or no name");
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::AllocateProblem() {
  const std::string phase = "memory";
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (absl::Status status =
          gpu_.driver->Check(gpu_.cu().mem_get_info(&free_bytes, &total_bytes), "cuMemGetInfo");
      !status.ok()) {
    return Fail(status, Origin::kSetup, phase);
  }
  if (task_.max_memory_bytes() > 0) {
    budget_bytes_ = task_.max_memory_bytes();
    budget_origin_ = "the task's max_memory_bytes";
  } else {
    budget_bytes_ = static_cast<int64_t>(free_bytes / 4 * 3);
    budget_origin_ =
        absl::StrCat("3/4 of the ", Bytes(static_cast<int64_t>(free_bytes)), " free on the device");
  }
  const size_t results_bytes = AlignUp(outputs_.size() * sizeof(DeviceCompareResult));
  problem_bytes_ = static_cast<int64_t>(set_bytes_ + seeds_ * output_bytes_ + results_bytes);
  if (problem_bytes_ > budget_bytes_) {
    return Failure{
        v1::UNSUPPORTED, phase,
        absl::StrCat("the problem needs ", Bytes(problem_bytes_), ": one set of buffers of ",
                     Bytes(static_cast<int64_t>(set_bytes_)), " and the reference outputs of ",
                     seeds_, " seeds of ", Bytes(static_cast<int64_t>(output_bytes_)),
                     " each; the budget is ", Bytes(budget_bytes_), " (", budget_origin_, ")")};
  }
  absl::StatusOr<kernels::DeviceBuffer> set = Allocate(set_bytes_, "the problem's buffers");
  if (!set.ok()) return Fail(set.status(), Origin::kSetup, phase);
  sets_.push_back(*std::move(set));
  if (absl::Status zeroed = ZeroScratch(0); !zeroed.ok()) {
    return Fail(zeroed, Origin::kSetup, phase);
  }
  for (int i = 0; i < seeds_; ++i) {
    absl::StatusOr<kernels::DeviceBuffer> reference =
        Allocate(output_bytes_, absl::StrCat("the reference outputs of seed ",
                                             task_.base_seed() + static_cast<uint64_t>(i)));
    if (!reference.ok()) return Fail(reference.status(), Origin::kSetup, phase);
    references_.push_back(*std::move(reference));
  }
  absl::StatusOr<kernels::DeviceBuffer> results = Allocate(results_bytes, "comparison results");
  if (!results.ok()) return Fail(results.status(), Origin::kSetup, phase);
  results_ = *std::move(results);
  return std::nullopt;
}

absl::Status TaskRun::ZeroScratch(size_t set) {
  for (const BufferSlot& buffer : buffers_) {
    if (buffer.is_scratch()) {
      RETURN_IF_ERROR(gpu_.Zero(SetPointer(set, buffer), static_cast<size_t>(buffer.bytes)));
    }
  }
  return absl::OkStatus();
}

absl::Status TaskRun::FillSet(size_t set, uint64_t seed, bool poison_outputs) {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const BufferSlot& buffer = buffers_[i];
    if (buffer.is_input()) {
      RETURN_IF_ERROR(gpu_.Fill(SetPointer(set, buffer), buffer, seed, i));
    } else if (poison_outputs && buffer.is_output()) {
      RETURN_IF_ERROR(gpu_.Poison(SetPointer(set, buffer), static_cast<size_t>(buffer.bytes)));
    }
  }
  return absl::OkStatus();
}

}  // namespace autotune::kernel_worker::internal
