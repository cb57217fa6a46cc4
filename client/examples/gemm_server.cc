// gemm-server: plays an inference server for gemm_bf16 (the nn.Linear
// product C = alpha * A B^T, bf16). At start-up it asks for the tuned
// kernel of every M bucket it serves for one weight shape N x K in one
// start-up lookup (client/startup_lookup.h), loads them on the GPU
// (client/kernel_loader.h), runs each once on random inputs and checks 512
// sampled outputs against a host reference in double precision. Run it
// with the service up, then with it stopped: the second start is served
// from the local cache.
//
//   gemm-server --server unix:///run/autotune.sock --local-cache DIR
//       [--m 16,512,1024] [--n 4096] [--k 4096] [--expect-source service]
//
// The kernel's arguments (kernels/builtin/gemm_bf16.textproto): A [M, K],
// B [N, K], C [M, N] (bf16), the fp32 workspace (its tile counters zeroed
// once; split-K partial sums), alpha = 1/sqrt(K), M, N, K.
// Exit status: 0 when every bucket was answered, loaded and computed right;
// 1 otherwise; 2 on bad flags.
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "client/kernel_loader.h"
#include "client/startup_lookup.h"
#include "kernels/gpu/cuda_driver.h"
#include "proto/problem.h"

namespace {

namespace v1 = ::autotune::v1;
using autotune::client::AnswerSourceName;
using autotune::client::KernelLoader;
using autotune::client::KernelOrigin;
using autotune::client::LoadedKernel;
using autotune::client::StartupAnswer;
using autotune::client::StartupLookup;
using autotune::client::StartupOptions;
using autotune::kernels::CudaDriver;
using autotune::kernels::DeviceBuffer;

struct Flags {
  std::string server;
  std::string local_cache;
  std::vector<int64_t> ms = {16, 1024};
  int64_t n = 4096;
  int64_t k = 4096;
  std::string expect_source;  // "service" or "local cache"; empty = either
};

// bf16 is the upper half of an fp32; round to nearest even.
uint16_t ToBf16(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof(bits));
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float FromBf16(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

int64_t Param(const LoadedKernel& kernel, const std::string& name) {
  const auto& params = kernel.config().params();
  const auto it = params.find(name);
  return it == params.end() ? 0 : it->second;
}

// The workspace the family's descriptor gives the config: a tile counter
// per 16 x 32 tile of C (rounded up to 4), then SPLIT_K partial tiles.
int64_t WorkspaceFloats(const LoadedKernel& kernel, int64_t m, int64_t n) {
  const int64_t bm = Param(kernel, "BM");
  const int64_t split = Param(kernel, "SPLIT_K");
  int64_t counters = ((m + 15) / 16) * ((n + 31) / 32);
  counters = (counters + 3) / 4 * 4;
  return counters + (split > 1 ? split * ((m + bm - 1) / bm) * bm * n : 0);
}

// Runs the kernel once for M x N x K; the largest error of 512 sampled
// outputs against the double-precision product of the same bf16 inputs,
// relative to max(0.05, |ref|) (outputs have a standard deviation of 1/3).
absl::StatusOr<double> Multiply(const KernelLoader& gpu, const LoadedKernel& kernel, int64_t m,
                                int64_t n, int64_t k) {
  ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Load());
  std::mt19937 random(1234);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<uint16_t> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k));
  for (uint16_t& x : a) x = ToBf16(unit(random));
  for (uint16_t& x : b) x = ToBf16(unit(random));
  const int64_t workspace = WorkspaceFloats(kernel, m, n);
  ASSIGN_OR_RETURN(DeviceBuffer d_a, DeviceBuffer::Allocate(*cu, a.size() * 2));
  ASSIGN_OR_RETURN(DeviceBuffer d_b, DeviceBuffer::Allocate(*cu, b.size() * 2));
  ASSIGN_OR_RETURN(DeviceBuffer d_c, DeviceBuffer::Allocate(*cu, static_cast<size_t>(m * n) * 2));
  ASSIGN_OR_RETURN(DeviceBuffer d_w,
                   DeviceBuffer::Allocate(*cu, static_cast<size_t>(workspace) * sizeof(float)));
  const auto& api = cu->api();
  RETURN_IF_ERROR(cu->Check(api.memcpy_htod_async(d_a.get(), a.data(), a.size() * 2, nullptr),
                            "cuMemcpyHtoDAsync"));
  RETURN_IF_ERROR(cu->Check(api.memcpy_htod_async(d_b.get(), b.data(), b.size() * 2, nullptr),
                            "cuMemcpyHtoDAsync"));
  RETURN_IF_ERROR(cu->Check(
      api.memset_d8_async(d_w.get(), 0, static_cast<size_t>(workspace) * sizeof(float), nullptr),
      "cuMemsetD8Async"));
  CUdeviceptr p_a = d_a.get(), p_b = d_b.get(), p_c = d_c.get(), p_w = d_w.get();
  float alpha = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k)));
  int m32 = static_cast<int>(m), n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  void* args[] = {&p_a, &p_b, &p_c, &p_w, &alpha, &m32, &n32, &k32};
  RETURN_IF_ERROR(gpu.Launch(kernel, args));
  std::vector<uint16_t> c(static_cast<size_t>(m * n));
  // To pageable memory: returns once the copy, and the kernel, are done.
  RETURN_IF_ERROR(cu->Check(api.memcpy_dtoh_async(c.data(), d_c.get(), c.size() * 2, nullptr),
                            "cuMemcpyDtoHAsync"));
  std::uniform_int_distribution<int64_t> row(0, m - 1), column(0, n - 1);
  double worst = 0;
  for (int sample = 0; sample < 512; ++sample) {
    const int64_t i = row(random), j = column(random);
    double sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      sum += static_cast<double>(FromBf16(a[i * k + p])) * FromBf16(b[j * k + p]);
    }
    const double expected = sum * alpha;
    const double got = FromBf16(c[i * n + j]);
    worst = std::max(worst, std::abs(got - expected) / std::max(0.05, std::abs(expected)));
  }
  return worst;
}

int Run(const Flags& flags) {
  absl::StatusOr<std::unique_ptr<KernelLoader>> gpu = KernelLoader::Open(0);
  if (!gpu.ok()) {
    std::cerr << "gemm-server: " << gpu.status().message() << "\n";
    return 1;
  }
  StartupOptions options;
  options.client.address = flags.server;
  options.local_cache_dir = flags.local_cache;
  options.device = (*gpu)->device();
  options.driver_version = (*gpu)->driver_version();
  absl::StatusOr<std::unique_ptr<StartupLookup>> lookup = StartupLookup::Create(options);
  if (!lookup.ok()) {
    std::cerr << "gemm-server: " << lookup.status().message() << "\n";
    return 1;
  }
  std::vector<v1::LookupRequest> requests;
  for (int64_t m : flags.ms) {
    v1::LookupRequest request;
    request.set_family("gemm_bf16");
    auto& dims = *request.mutable_problem()->mutable_dims();
    dims["M"] = m;
    dims["N"] = flags.n;
    dims["K"] = flags.k;
    request.mutable_problem()->set_dtype(v1::BFLOAT16);
    requests.push_back(request);
  }
  const absl::Time start = absl::Now();
  const std::vector<StartupAnswer> answers = (*lookup)->LookupAll(requests);
  std::vector<LoadedKernel> kernels;
  int failed = 0;
  for (const StartupAnswer& answer : answers) {
    absl::StatusOr<LoadedKernel> kernel = (*gpu)->Load(answer, "gemm_bf16");
    if (!kernel.ok()) {
      std::cout << "FAILED " << kernel.status().message() << "\n";
      ++failed;
      continue;
    }
    kernels.push_back(*std::move(kernel));
  }
  const double startup_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  std::cout << absl::StrFormat(
      "start-up: %d M buckets looked up and %d loaded on %s (CUDA %s) in %.1f ms\n", answers.size(),
      kernels.size(), (*gpu)->device().name(), (*gpu)->driver_version(), startup_ms);
  if (failed > 0) return 1;
  for (size_t i = 0; i < answers.size(); ++i) {
    const StartupAnswer& answer = answers[i];
    const auto& dims = answer.request.problem().dims();
    const std::string source = AnswerSourceName(answer.source);
    absl::StatusOr<double> error =
        Multiply(**gpu, kernels[i], dims.at("M"), dims.at("N"), dims.at("K"));
    // One bf16 rounding of C: 2^-8 relative, with room for the order of the sums.
    const bool right = error.ok() && *error <= 1.6e-2;
    const bool from_expected = flags.expect_source.empty() || flags.expect_source == source;
    std::string kernel_origin =
        kernels[i].origin() == KernelOrigin::kCompiledHere ? " (compiled here)" : "";
    if (answer.response.match() == v1::MISS) {  // why the tuned kernel was not served
      absl::StrAppend(&kernel_origin, " [", v1::MissKind_Name(answer.response.miss_kind()), ": ",
                      answer.response.miss_reason(), "]");
    }
    std::cout << absl::StrFormat("%-5s %s: %s from %s, %s%s; max error %s\n",
                                 right && from_expected ? "OK" : "WRONG",
                                 autotune::ProblemContext("gemm_bf16", answer.request.problem()),
                                 v1::MatchKind_Name(answer.response.match()), source,
                                 autotune::FormatDims(kernels[i].config().params()), kernel_origin,
                                 error.ok() ? absl::StrFormat("%.2g (at most 1.6e-2)", *error)
                                            : std::string(error.status().message()));
    if (!right || !from_expected) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"An inference server for gemm_bf16: tuned GEMMs at start-up, checked outputs"};
  app.add_option("--server", flags.server, "autotuned address")->required();
  app.add_option("--local-cache", flags.local_cache, "local cache directory")->required();
  app.add_option("--m", flags.ms, "M buckets (tokens)")->delimiter(',');
  app.add_option("--n", flags.n, "N (output features)");
  app.add_option("--k", flags.k, "K (input features)");
  app.add_option("--expect-source", flags.expect_source,
                 "fail unless every answer came from here ('service' or 'local cache')");
  CLI11_PARSE(app, argc, argv);
  return Run(flags);
}
