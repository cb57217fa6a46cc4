#include "client/cubin_check.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cubin.h"
#include "kernels/tensor_map.h"

namespace autotune::client {
namespace {

constexpr size_t kElf64HeaderBytes = 64;
constexpr int kEmCuda = 190;

template <typename T>
T Read(absl::string_view bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));  // little-endian host
  return value;
}

absl::Status NotACubin(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not a cubin: ", why));
}

// A table of `count` entries of `entry` bytes at `offset` lies within `size`.
bool TableFits(uint64_t offset, uint64_t count, uint64_t entry, uint64_t size) {
  if (count == 0) return true;
  if (offset > size || entry == 0) return false;
  return count <= (size - offset) / entry;
}

}  // namespace

absl::StatusOr<int> CubinArch(absl::string_view cubin) {
  if (cubin.size() < kElf64HeaderBytes) {
    return NotACubin(absl::StrCat(cubin.size(), " bytes, shorter than an ELF64 header"));
  }
  if (cubin.substr(0, 4) !=
      "\x7f"
      "ELF") {
    return NotACubin("no ELF magic");
  }
  if (cubin[4] != 2) return NotACubin(absl::StrCat("EI_CLASS is ", int{cubin[4]}, ", not ELF64"));
  if (cubin[5] != 1) {
    return NotACubin(absl::StrCat("EI_DATA is ", int{cubin[5]}, ", not little-endian"));
  }
  const auto machine = Read<uint16_t>(cubin, 18);
  if (machine != kEmCuda) {
    return NotACubin(absl::StrCat("e_machine is ", machine, ", not EM_CUDA (", kEmCuda, ")"));
  }
  const auto phoff = Read<uint64_t>(cubin, 32);
  const auto shoff = Read<uint64_t>(cubin, 40);
  const auto phentsize = Read<uint16_t>(cubin, 54);
  const auto phnum = Read<uint16_t>(cubin, 56);
  const auto shentsize = Read<uint16_t>(cubin, 58);
  const auto shnum = Read<uint16_t>(cubin, 60);
  if (!TableFits(shoff, shnum, shentsize, cubin.size())) {
    return NotACubin(absl::StrCat("its ", shnum, " section headers at offset ", shoff,
                                  " reach past its ", cubin.size(), " bytes"));
  }
  if (!TableFits(phoff, phnum, phentsize, cubin.size())) {
    return NotACubin(absl::StrCat("its ", phnum, " program headers at offset ", phoff,
                                  " reach past its ", cubin.size(), " bytes"));
  }
  const auto flags = Read<uint32_t>(cubin, 48);
  const int abi_version = static_cast<unsigned char>(cubin[8]);
  return static_cast<int>(abi_version >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
}

absl::Status CheckCubinHeader(absl::string_view cubin, int compute_capability) {
  ASSIGN_OR_RETURN(const int sm, CubinArch(cubin));
  if (sm / 10 != compute_capability / 10 || sm > compute_capability) {
    return absl::InvalidArgumentError(
        absl::StrCat("built for sm_", sm, ", which a device of compute capability ",
                     compute_capability / 10, ".", compute_capability % 10, " does not run"));
  }
  return absl::OkStatus();
}

absl::Status CheckParameters(absl::string_view cubin, absl::string_view function_name,
                             const google::protobuf::RepeatedField<int64_t>& expected) {
  if (expected.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<int64_t>> sizes = kernels::KernelParameterSizes(cubin, function_name);
  if (!sizes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("its parameters cannot be read: ", sizes.status().message()));
  }
  if (sizes->size() != static_cast<size_t>(expected.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the kernel '", function_name, "' takes ", sizes->size(), " parameters (",
                     absl::StrJoin(*sizes, ", "), " bytes); the answer's family passes ",
                     expected.size(), " (", absl::StrJoin(expected, ", "), " bytes)"));
  }
  for (int i = 0; i < expected.size(); ++i) {
    if ((*sizes)[i] != expected[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", i, " of kernel '", function_name, "' is ", (*sizes)[i],
                       " bytes; the answer's family passes ", expected[i], " there"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLaunch(const v1::LaunchDims& launch, const DeviceLimits& limits) {
  if (launch.grid_size() < 1 || launch.grid_size() > 3 || launch.block_size() < 1 ||
      launch.block_size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat("the launch has ", launch.grid_size(),
                                                   " grid and ", launch.block_size(),
                                                   " block values, 1 to 3 each expected"));
  }
  for (int i = 0; i < launch.grid_size(); ++i) {
    if (launch.grid(i) < 1 || launch.grid(i) > limits.max_grid[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grid[", i, "] = ", launch.grid(i), ", outside the device's 1 to ", limits.max_grid[i]));
    }
  }
  int64_t threads = 1;
  for (int i = 0; i < launch.block_size(); ++i) {
    if (launch.block(i) < 1 || launch.block(i) > limits.max_block[i]) {
      return absl::InvalidArgumentError(absl::StrCat("block[", i, "] = ", launch.block(i),
                                                     ", outside the device's 1 to ",
                                                     limits.max_block[i]));
    }
    threads *= launch.block(i);  // each at most a device limit: no overflow
  }
  if (threads > limits.max_threads_per_block) {
    return absl::InvalidArgumentError(absl::StrCat("the block's ", threads,
                                                   " threads are more than the device's ",
                                                   limits.max_threads_per_block));
  }
  if (launch.dynamic_shared_bytes() < 0 ||
      launch.dynamic_shared_bytes() > limits.max_dynamic_shared_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic_shared_bytes = ", launch.dynamic_shared_bytes(), ", outside the device's 0 to ",
        limits.max_dynamic_shared_bytes, " (the opt-in maximum)"));
  }
  if (launch.tensor_maps_size() > kernels::kMaxTensorMaps) {
    return absl::InvalidArgumentError(absl::StrCat(launch.tensor_maps_size(),
                                                   " tensor maps, more than the limit of ",
                                                   kernels::kMaxTensorMaps));
  }
  for (int t = 0; t < launch.tensor_maps_size(); ++t) {
    const v1::TensorMapLayout& layout = launch.tensor_maps(t);
    if (layout.buffer() < 0 || layout.buffer() >= layout.argument()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor map ", t, " is parameter ", layout.argument(), " over buffer ",
                       layout.buffer(), ": its buffer must come before it"));
    }
    if (absl::Status rules = kernels::CheckTensorMapLayout(layout); !rules.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor map ", t, ": ", rules.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace autotune::client
