// gla-decode-server: plays an inference server for gla_decode. At start-up
// it asks for the tuned kernel of every shape it serves in one start-up
// lookup (client/startup_lookup.h), loads them on the GPU
// (client/kernel_loader.h), then runs a few decode steps of each shape and
// checks every output against a host reference in double precision. Run it
// once with the service up and once with it stopped: the second start is
// served from the local cache.
//
//   gla-decode-server --server unix:///run/autotune.sock --local-cache DIR
//       [--batch 1,8] [--dim 64,128] [--heads 32] [--steps 4] [--expect-source service]
//
// fp32 only, so the host reference needs no half-precision arithmetic.
// Exit status: 0 when every shape was answered, loaded and computed right;
// 1 otherwise; 2 on bad flags.
#include <cuda.h>

#include <cmath>
#include <cstdint>
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
  std::vector<int64_t> batches = {1, 8};
  std::vector<int64_t> dims = {64, 128};
  int64_t heads = 32;
  int steps = 4;
  std::string expect_source;  // "service" or "local cache"; empty = either
};

// One decode step on the host, in double precision: the kernel's contract
// (kernels/builtin/gla_decode.cu).
void ReferenceStep(int64_t heads_total, int64_t dim, std::vector<double>& state,
                   const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<float>& g,
                   std::vector<double>& o) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (int64_t h = 0; h < heads_total; ++h) {
    double* s = &state[h * dim * dim];
    for (int64_t i = 0; i < dim; ++i) {
      const double decay = std::exp(static_cast<double>(g[h * dim + i]));
      for (int64_t j = 0; j < dim; ++j) {
        s[i * dim + j] =
            decay * s[i * dim + j] + static_cast<double>(k[h * dim + i]) * v[h * dim + j];
      }
    }
    for (int64_t j = 0; j < dim; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += scale * q[h * dim + i] * s[i * dim + j];
      o[h * dim + j] = sum;
    }
  }
}

absl::Status Upload(const CudaDriver& cu, const DeviceBuffer& buffer,
                    const std::vector<float>& host) {
  return cu.Check(
      cu.api().memcpy_htod_async(buffer.get(), host.data(), host.size() * sizeof(float), nullptr),
      "cuMemcpyHtoDAsync");
}

// Runs `steps` decode steps of one shape with the loaded kernel; the
// largest error of o against the reference, relative to max(1, |ref|).
absl::StatusOr<double> Decode(const KernelLoader& gpu, const LoadedKernel& kernel, int64_t batch,
                              int64_t heads, int64_t dim, int steps) {
  ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Load());
  const int64_t heads_total = batch * heads;
  const size_t vec = static_cast<size_t>(heads_total * dim);
  const size_t mat = vec * static_cast<size_t>(dim);
  std::mt19937 random(1234);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> decay(-1.0f, 0.0f);
  std::vector<float> state(mat);
  for (float& x : state) x = unit(random);
  std::vector<double> reference(state.begin(), state.end());
  ASSIGN_OR_RETURN(DeviceBuffer d_state, DeviceBuffer::Allocate(*cu, mat * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_q, DeviceBuffer::Allocate(*cu, vec * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_k, DeviceBuffer::Allocate(*cu, vec * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_v, DeviceBuffer::Allocate(*cu, vec * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_g, DeviceBuffer::Allocate(*cu, vec * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer d_o, DeviceBuffer::Allocate(*cu, vec * sizeof(float)));
  RETURN_IF_ERROR(Upload(*cu, d_state, state));
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> q(vec), k(vec), v(vec), g(vec);
    for (size_t i = 0; i < vec; ++i) {
      q[i] = unit(random);
      k[i] = unit(random);
      v[i] = unit(random);
      g[i] = decay(random);
    }
    RETURN_IF_ERROR(Upload(*cu, d_q, q));
    RETURN_IF_ERROR(Upload(*cu, d_k, k));
    RETURN_IF_ERROR(Upload(*cu, d_v, v));
    RETURN_IF_ERROR(Upload(*cu, d_g, g));
    CUdeviceptr p_state = d_state.get(), p_q = d_q.get(), p_k = d_k.get(), p_v = d_v.get(),
                p_g = d_g.get(), p_o = d_o.get();
    float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
    int head_dim = static_cast<int>(dim);
    void* args[] = {&p_state, &p_q, &p_k, &p_v, &p_g, &p_o, &scale, &head_dim};
    RETURN_IF_ERROR(gpu.Launch(kernel, args));
    std::vector<float> o(vec);
    // To pageable memory: returns once the copy, and the kernel, are done.
    RETURN_IF_ERROR(
        cu->Check(cu->api().memcpy_dtoh_async(o.data(), d_o.get(), vec * sizeof(float), nullptr),
                  "cuMemcpyDtoHAsync"));
    std::vector<double> expected(vec);
    ReferenceStep(heads_total, dim, reference, q, k, v, g, expected);
    for (size_t i = 0; i < vec; ++i) {
      worst = std::max(worst, std::abs(o[i] - expected[i]) / std::max(1.0, std::abs(expected[i])));
    }
  }
  return worst;
}

int Run(const Flags& flags) {
  absl::StatusOr<std::unique_ptr<KernelLoader>> gpu = KernelLoader::Open(0);
  if (!gpu.ok()) {
    std::cerr << "gla-decode-server: " << gpu.status().message() << "\n";
    return 1;
  }
  StartupOptions options;
  options.client.address = flags.server;
  options.local_cache_dir = flags.local_cache;
  options.device = (*gpu)->device();
  options.driver_version = (*gpu)->driver_version();
  absl::StatusOr<std::unique_ptr<StartupLookup>> lookup = StartupLookup::Create(options);
  if (!lookup.ok()) {
    std::cerr << "gla-decode-server: " << lookup.status().message() << "\n";
    return 1;
  }
  std::vector<v1::LookupRequest> requests;
  for (int64_t batch : flags.batches) {
    for (int64_t dim : flags.dims) {
      v1::LookupRequest request;
      request.set_family("gla_decode");
      auto& dims = *request.mutable_problem()->mutable_dims();
      dims["batch"] = batch;
      dims["heads"] = flags.heads;
      dims["dim"] = dim;
      request.mutable_problem()->set_dtype(v1::FLOAT32);
      requests.push_back(request);
    }
  }
  const absl::Time start = absl::Now();
  const std::vector<StartupAnswer> answers = (*lookup)->LookupAll(requests);
  std::vector<LoadedKernel> kernels;
  int failed = 0;
  for (const StartupAnswer& answer : answers) {
    absl::StatusOr<LoadedKernel> kernel = (*gpu)->Load(answer, "gla_decode");
    if (!kernel.ok()) {
      std::cout << "FAILED " << kernel.status().message() << "\n";
      ++failed;
      continue;
    }
    kernels.push_back(*std::move(kernel));
  }
  const double startup_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  std::cout << absl::StrFormat(
      "start-up: %d shapes looked up and %d loaded on %s (CUDA %s) in %.1f ms\n", answers.size(),
      kernels.size(), (*gpu)->device().name(), (*gpu)->driver_version(), startup_ms);
  if (failed > 0) return 1;
  for (size_t i = 0; i < answers.size(); ++i) {
    const StartupAnswer& answer = answers[i];
    const auto& dims = answer.request.problem().dims();
    const std::string source = AnswerSourceName(answer.source);
    absl::StatusOr<double> error =
        Decode(**gpu, kernels[i], dims.at("batch"), dims.at("heads"), dims.at("dim"), flags.steps);
    const bool right = error.ok() && *error <= 1e-4;
    const bool from_expected = flags.expect_source.empty() || flags.expect_source == source;
    const std::string kernel_origin =
        kernels[i].origin() == KernelOrigin::kCompiledHere ? " (compiled here)" : "";
    std::cout << absl::StrFormat("%-5s %s: %s from %s, %s%s; %d steps, max error %s\n",
                                 right && from_expected ? "OK" : "WRONG",
                                 autotune::ProblemContext("gla_decode", answer.request.problem()),
                                 v1::MatchKind_Name(answer.response.match()), source,
                                 autotune::FormatDims(kernels[i].config().params()), kernel_origin,
                                 flags.steps,
                                 error.ok() ? absl::StrFormat("%.2g (at most 1e-4)", *error)
                                            : std::string(error.status().message()));
    if (!right || !from_expected) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{
      "An inference server for gla_decode: tuned kernels at start-up, checked decode steps"};
  app.add_option("--server", flags.server, "autotuned address")->required();
  app.add_option("--local-cache", flags.local_cache, "local cache directory")->required();
  app.add_option("--batch", flags.batches, "batch sizes")->delimiter(',');
  app.add_option("--dim", flags.dims, "head dims")->delimiter(',');
  app.add_option("--heads", flags.heads, "heads");
  app.add_option("--steps", flags.steps, "decode steps per shape");
  app.add_option("--expect-source", flags.expect_source,
                 "fail unless every answer came from here ('service' or 'local cache')");
  CLI11_PARSE(app, argc, argv);
  return Run(flags);
}
