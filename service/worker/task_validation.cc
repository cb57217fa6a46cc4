#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/gpu/cuda_driver.h"
#include "kernels/tensor_map.h"
#include "proto/problem.h"
#include "service/worker/task_run.h"

namespace autotune::kernel_worker::internal {

absl::StatusOr<std::vector<BufferVerdict>> TaskRun::CompareOutputs(
    const std::vector<CUdeviceptr>& checked, const std::vector<CUdeviceptr>& reference) {
  RETURN_IF_ERROR(gpu_.Record(kCompareBegin));
  RETURN_IF_ERROR(gpu_.driver->Check(
      gpu_.cu().memset_d8_async(results_.get(), 0, outputs_.size() * sizeof(DeviceCompareResult),
                                gpu_.stream.get()),
      "cuMemsetD8Async (comparison results)"));
  for (size_t j = 0; j < outputs_.size(); ++j) {
    RETURN_IF_ERROR(gpu_.Compare(checked[j], reference[j], buffers_[outputs_[j]], rtol_, atol_,
                                 results_.get() + j * sizeof(DeviceCompareResult)));
  }
  std::vector<DeviceCompareResult> host(outputs_.size());
  // Pageable memory: the copy is ordered in the stream all the same, and
  // the event after it says when the bytes have landed.
  RETURN_IF_ERROR(gpu_.driver->Check(
      gpu_.cu().memcpy_dtoh_async(host.data(), results_.get(),
                                  host.size() * sizeof(DeviceCompareResult), gpu_.stream.get()),
      "cuMemcpyDtoHAsync (comparison results)"));
  RETURN_IF_ERROR(gpu_.Record(kCompareEnd));
  RETURN_IF_ERROR(gpu_.Wait(kCompareEnd, kUtilityTimeoutS, "the comparison of the outputs"));
  ASSIGN_OR_RETURN(double seconds, gpu_.ElapsedSeconds(kCompareBegin, kCompareEnd));
  AddGpuTime(seconds);
  std::vector<BufferVerdict> verdicts(outputs_.size());
  for (size_t j = 0; j < outputs_.size(); ++j) {
    verdicts[j].buffer = &buffers_[outputs_[j]];
    verdicts[j].result = host[j];
  }
  return verdicts;
}

std::optional<std::string> TaskRun::CheckTensorMaps(
    const google::protobuf::RepeatedPtrField<v1::TensorMapLayout>& maps) const {
  for (int t = 0; t < maps.size(); ++t) {
    const v1::TensorMapLayout& layout = maps[t];
    const std::string which = absl::StrCat("tensor map ", t);
    if (layout.buffer() < 0 || static_cast<size_t>(layout.buffer()) >= buffers_.size()) {
      return absl::StrCat(which, " names buffer ", layout.buffer(), "; the task has ",
                          buffers_.size());
    }
    if (layout.argument() != static_cast<int>(buffers_.size()) + t) {
      return absl::StrCat(which, " is parameter ", layout.argument(),
                          "; tensor maps follow the buffers, so it must be ",
                          buffers_.size() + static_cast<size_t>(t));
    }
    const BufferSlot& buffer = buffers_[static_cast<size_t>(layout.buffer())];
    if (layout.dtype() != buffer.dtype) {
      return absl::StrCat(which, " is ", DTypeName(layout.dtype()), "; buffer '", buffer.name,
                          "' is ", DTypeName(buffer.dtype));
    }
    if (absl::Status status = kernels::CheckTensorMapLayout(layout); !status.ok()) {
      return absl::StrCat(which, " over '", buffer.name, "': ", status.message());
    }
    int64_t elements = 1;
    for (int64_t extent : layout.shape()) {
      if (__builtin_mul_overflow(elements, extent, &elements)) elements = INT64_MAX;
    }
    if (elements > buffer.elements) {
      return absl::StrCat(which, " covers ", elements, " elements; buffer '", buffer.name, "' has ",
                          buffer.elements);
    }
  }
  return std::nullopt;
}

std::optional<std::string> TaskRun::CheckParameters(CUfunction function, size_t tensor_maps) const {
  const auto get_info = gpu_.cu().func_get_param_info;
  if (get_info == nullptr) return std::nullopt;  // the driver cannot tell
  std::vector<size_t> expected;
  std::vector<std::string> what;
  for (const BufferSlot& buffer : buffers_) {
    expected.push_back(sizeof(CUdeviceptr));
    what.push_back(absl::StrCat("buffer '", buffer.name, "' (a pointer)"));
  }
  for (size_t t = 0; t < tensor_maps; ++t) {
    expected.push_back(sizeof(CUtensorMap));
    what.push_back(absl::StrCat("tensor map ", t));
  }
  for (int i = 0; i < task_.scalars_size(); ++i) {
    expected.push_back(scalar_sizes_[i]);
    what.push_back(absl::StrCat("scalar '", task_.scalars(i).name(), "' (",
                                DTypeName(task_.scalars(i).dtype()), ")"));
  }
  const std::string passes =
      absl::StrCat("the task passes ", expected.size(), " (", buffers_.size(), " buffers, ",
                   tensor_maps > 0 ? absl::StrCat(tensor_maps, " tensor maps, ") : "",
                   scalars_.size(), " scalars)");
  for (size_t i = 0; i <= expected.size(); ++i) {
    size_t offset = 0;
    size_t size = 0;
    const CUresult rc = get_info(function, i, &offset, &size);
    if (rc == CUDA_ERROR_INVALID_VALUE) {
      if (i == expected.size()) return std::nullopt;  // exactly as many
      return absl::StrCat("the kernel takes ", i, " parameters; ", passes);
    }
    if (rc != CUDA_SUCCESS) return std::nullopt;  // cannot tell; the launch will
    if (i == expected.size()) {
      return absl::StrCat("the kernel takes more than ", expected.size(), " parameters; ", passes);
    }
    if (size != expected[i]) {
      return absl::StrCat("parameter ", i, " of the kernel is ", size, " bytes; the task passes ",
                          what[i], " of ", expected[i], " bytes there");
    }
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::LoadKernel(const wv1::KernelImage& image,
                                           const std::string& load_phase,
                                           const std::string& check_phase, LoadedKernel* kernel) {
  if (image.cubin().empty()) return Failure{v1::UNSUPPORTED, load_phase, "the image is empty"};
  if (image.lowered_name().empty()) {
    return Failure{v1::UNSUPPORTED, load_phase, "the image names no kernel (lowered_name)"};
  }
  // The proto's bytes are a std::string: NUL-terminated, as the driver
  // wants a PTX image to be.
  absl::StatusOr<kernels::Module> module =
      kernels::Module::Load(*gpu_.driver, image.cubin().data());
  if (!module.ok()) return Fail(module.status(), Origin::kLoad, load_phase);
  kernel->module = *std::move(module);
  absl::StatusOr<CUfunction> function = kernel->module.Function(image.lowered_name());
  if (!function.ok()) return Fail(function.status(), Origin::kLoad, load_phase);
  kernel->function = *function;

  const kernels::CudaDriver::Api& cu = gpu_.cu();
  struct {
    CUfunction_attribute attribute;
    int* value;
    const char* name;
  } attributes[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, &kernel->registers, "NUM_REGS"},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &kernel->static_shared, "SHARED_SIZE_BYTES"},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &kernel->local_bytes, "LOCAL_SIZE_BYTES"},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &kernel->max_threads, "MAX_THREADS_PER_BLOCK"},
  };
  // With lazy loading (the default) this is where the function is really
  // loaded, so image errors can show here rather than at cuModuleLoadDataEx.
  for (const auto& entry : attributes) {
    absl::Status status =
        gpu_.driver->Check(cu.func_get_attribute(entry.value, entry.attribute, kernel->function),
                           absl::StrCat("cuFuncGetAttribute(", entry.name, ")"));
    if (!status.ok()) return Fail(status, Origin::kLoad, load_phase);
  }

  // Launch shape against the device and the function.
  const v1::LaunchDims& dims = image.launch();
  LaunchShape& shape = kernel->shape;
  auto unsupported = [&](std::string message) {
    return Failure{v1::UNSUPPORTED, check_phase, std::move(message)};
  };
  if (dims.grid_size() < 1 || dims.grid_size() > 3 || dims.block_size() < 1 ||
      dims.block_size() > 3) {
    return unsupported(absl::StrCat("the launch has ", dims.grid_size(), " grid and ",
                                    dims.block_size(), " block dimensions (1 to 3 each)"));
  }
  static constexpr const char* kAxis[] = {"x", "y", "z"};
  for (int d = 0; d < dims.grid_size(); ++d) {
    if (dims.grid(d) < 1 || dims.grid(d) > gpu_.limits.max_grid[d]) {
      return unsupported(absl::StrCat("grid ", kAxis[d], " = ", dims.grid(d),
                                      " is outside the device's range 1..",
                                      gpu_.limits.max_grid[d]));
    }
    shape.grid[d] = static_cast<unsigned>(dims.grid(d));
  }
  for (int d = 0; d < dims.block_size(); ++d) {
    if (dims.block(d) < 1 || dims.block(d) > gpu_.limits.max_block[d]) {
      return unsupported(absl::StrCat("block ", kAxis[d], " = ", dims.block(d),
                                      " is outside the device's range 1..",
                                      gpu_.limits.max_block[d]));
    }
    shape.block[d] = static_cast<unsigned>(dims.block(d));
  }
  if (shape.threads() > kernel->max_threads) {
    return unsupported(absl::StrCat(
        "block ", shape.BlockText(), " = ", shape.threads(), " threads; the kernel allows at most ",
        kernel->max_threads, " per block (it uses ", kernel->registers, " registers per thread)"));
  }
  const int64_t dynamic_shared = dims.dynamic_shared_bytes();
  if (dynamic_shared < 0 || kernel->static_shared + dynamic_shared > gpu_.limits.max_shared_optin) {
    return unsupported(absl::StrCat("shared memory: ", kernel->static_shared, " bytes static + ",
                                    dynamic_shared, " bytes dynamic exceeds the device's ",
                                    gpu_.limits.max_shared_optin, " bytes per block"));
  }
  shape.dynamic_shared = static_cast<unsigned>(dynamic_shared);
  if (std::optional<std::string> problem = CheckTensorMaps(dims.tensor_maps())) {
    return unsupported(*std::move(problem));
  }
  kernel->tensor_maps.assign(dims.tensor_maps().begin(), dims.tensor_maps().end());
  if (std::optional<std::string> problem =
          CheckParameters(kernel->function, kernel->tensor_maps.size())) {
    return unsupported(*std::move(problem));
  }
  if (dynamic_shared > 0) {
    // Above 48 KiB a kernel must opt in; asking only when the current limit
    // is too low leaves kernels that need nothing untouched.
    int allowed = 0;
    absl::Status status = gpu_.driver->Check(
        cu.func_get_attribute(&allowed, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              kernel->function),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    if (status.ok() && dynamic_shared > allowed) {
      status = gpu_.driver->Check(
          cu.func_set_attribute(kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(dynamic_shared)),
          absl::StrCat("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ", dynamic_shared, ")"));
    }
    if (!status.ok()) return Fail(status, Origin::kLoad, check_phase);
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::RunReference() {
  const wv1::KernelImage& image = task_.reference();
  LoadedKernel kernel;
  if (std::optional<Failure> failure =
          LoadKernel(image, "reference load", "reference check", &kernel)) {
    return failure;
  }
  for (int i = 0; i < seeds_; ++i) {
    const uint64_t seed = task_.base_seed() + static_cast<uint64_t>(i);
    const std::string phase = absl::StrCat("reference seed ", seed);
    absl::Status status = gpu_.Record(kSpanBegin);
    // The reference writes straight into this seed's slot: INOUT buffers
    // are filled there, OUT buffers poisoned there; IN buffers are set 0's,
    // and so is SCRATCH, zeroed when set 0 was allocated.
    for (size_t b = 0; b < buffers_.size() && status.ok(); ++b) {
      const BufferSlot& buffer = buffers_[b];
      if (buffer.role == v1::IN) {
        status = gpu_.Fill(SetPointer(0, buffer), buffer, seed, b);
      } else if (buffer.role == v1::INOUT) {
        status = gpu_.Fill(ReferencePointer(i, buffer), buffer, seed, b);
      } else if (buffer.role == v1::OUT) {
        status = gpu_.Poison(ReferencePointer(i, buffer), static_cast<size_t>(buffer.bytes));
      }
    }
    if (!status.ok()) return Fail(status, Origin::kSetup, phase);
    KernelArgs args = ArgsForReference(i);
    status = gpu_.Launch(kernel.function, kernel.shape, args.params(), "reference");
    if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
    if (status = gpu_.Record(kLaunchEnd); !status.ok()) return Fail(status, Origin::kSetup, phase);
    status = gpu_.Wait(kLaunchEnd, launch_timeout_s_, "the reference's launch");
    if (!status.ok()) return Fail(status, Origin::kWait, phase);
    absl::StatusOr<double> seconds = gpu_.ElapsedSeconds(kSpanBegin, kLaunchEnd);
    if (!seconds.ok()) return Fail(seconds.status(), Origin::kSetup, phase);
    AddGpuTime(*seconds);

    // A reference that leaves NaN would fail every variant ("NaN never
    // passes"): say so once, here.
    absl::StatusOr<std::vector<BufferVerdict>> verdicts =
        CompareOutputs(OutputsOfReference(i), OutputsOfReference(i));
    if (!verdicts.ok()) return Fail(verdicts.status(), Origin::kSetup, phase);
    for (const BufferVerdict& verdict : *verdicts) {
      if (verdict.result.nan_reference > 0) {
        return Failure{
            v1::WRONG_RESULT, phase,
            absl::StrCat("the reference left ", verdict.result.nan_reference, " of ",
                         verdict.buffer->elements, " elements of '", verdict.buffer->name,
                         "' NaN (unwritten or not a number), first at index ",
                         ~verdict.result.first_bad_inv)};
      }
    }
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::Validate(const LoadedKernel& kernel, wv1::VariantOutcome* outcome,
                                         double* estimate_us) {
  absl::StatusOr<KernelArgs> set_args = ArgsForSet(0, kernel);
  if (!set_args.ok()) {
    return Failure{v1::UNSUPPORTED, "validate", std::string(set_args.status().message())};
  }
  KernelArgs& args = *set_args;
  double max_error = 0;
  uint64_t worst_seed = task_.base_seed();
  double fastest_s = std::numeric_limits<double>::infinity();
  for (int i = 0; i < seeds_; ++i) {
    const uint64_t seed = task_.base_seed() + static_cast<uint64_t>(i);
    const std::string phase = absl::StrCat("validate seed ", seed);
    absl::Status status = gpu_.Record(kSpanBegin);
    if (status.ok()) status = FillSet(0, seed, /*poison_outputs=*/true);
    if (status.ok()) status = gpu_.Record(kLaunchBegin);
    if (!status.ok()) return Fail(status, Origin::kSetup, phase);
    status = gpu_.Launch(kernel.function, kernel.shape, args.params(), "variant");
    if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
    if (status = gpu_.Record(kLaunchEnd); !status.ok()) return Fail(status, Origin::kWait, phase);
    status = gpu_.Wait(kLaunchEnd, launch_timeout_s_, "the variant's launch");
    if (!status.ok()) return Fail(status, Origin::kWait, phase);
    absl::StatusOr<double> span = gpu_.ElapsedSeconds(kSpanBegin, kLaunchEnd);
    absl::StatusOr<double> launch = gpu_.ElapsedSeconds(kLaunchBegin, kLaunchEnd);
    if (!span.ok()) return Fail(span.status(), Origin::kSetup, phase);
    if (!launch.ok()) return Fail(launch.status(), Origin::kSetup, phase);
    AddGpuTime(*span);
    fastest_s = std::min(fastest_s, *launch);

    absl::StatusOr<std::vector<BufferVerdict>> verdicts =
        CompareOutputs(OutputsOfSet(0), OutputsOfReference(i));
    if (!verdicts.ok()) return Fail(verdicts.status(), Origin::kSetup, phase);
    outcome->set_seeds_checked(i + 1);
    const BufferVerdict* bad = nullptr;
    for (const BufferVerdict& verdict : *verdicts) {
      // NaN wins and stays: the worst error there can be.
      const double error = verdict.error();
      if (!std::isnan(max_error) && (std::isnan(error) || error > max_error)) {
        max_error = error;
        worst_seed = seed;
      }
      if (bad == nullptr && verdict.result.mismatches > 0) bad = &verdict;
    }
    outcome->set_max_error(max_error);
    outcome->set_worst_seed(worst_seed);
    if (bad == nullptr) continue;

    outcome->set_worst_seed(seed);
    const DeviceCompareResult& r = bad->result;
    const BufferSlot& buffer = *bad->buffer;
    const unsigned long long first = ~r.first_bad_inv;
    std::string message;
    if (r.nan_values == r.mismatches && r.nan_reference == 0) {
      message = absl::StrCat(r.nan_values, " of ", buffer.elements, " elements of '", buffer.name,
                             "' are NaN (unwritten or not a number), first at index ", first);
    } else {
      message = absl::StrCat(r.mismatches, " of ", buffer.elements, " elements of '", buffer.name,
                             "' differ beyond rtol ", Num(rtol_), " atol ", Num(atol_),
                             "; max |v - r| ", Num(bad->max_abs()), "; first at index ", first,
                             " (v=", Num(r.value), ", r=", Num(r.reference), ")");
      if (r.nan_values > 0) {
        absl::StrAppend(&message, "; ", r.nan_values, " of them NaN (unwritten or not a number)");
      }
      if (r.nan_reference > 0) {
        absl::StrAppend(&message, "; ", r.nan_reference, " NaN in the reference");
      }
    }
    return Failure{v1::WRONG_RESULT, phase, std::move(message)};
  }
  *estimate_us = fastest_s * 1e6;
  return std::nullopt;
}

}  // namespace autotune::kernel_worker::internal
