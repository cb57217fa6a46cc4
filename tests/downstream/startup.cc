// What an inference server does at start-up with autotune's installed
// client library: one start-up lookup for its shapes, then a try at the
// GPU. Prints one line per answer; exits 0 when every lookup was answered.
//
//   startup ADDRESS LOCAL_CACHE_DIR
#include <iostream>
#include <string>
#include <vector>

#include "client/kernel_loader.h"
#include "client/startup_lookup.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: startup ADDRESS LOCAL_CACHE_DIR\n";
    return 2;
  }
  autotune::client::StartupOptions options;
  options.client.address = argv[1];
  options.local_cache_dir = argv[2];
  options.deadline = absl::Seconds(5);
  // The GPU, if this machine has one, names the device and the driver.
  absl::StatusOr<std::unique_ptr<autotune::client::KernelLoader>> gpu =
      autotune::client::KernelLoader::Open(0);
  if (gpu.ok()) {
    options.device = (*gpu)->device();
    options.driver_version = (*gpu)->driver_version();
  } else {
    std::cout << "no GPU: " << gpu.status().message() << "\n";
  }
  absl::StatusOr<std::unique_ptr<autotune::client::StartupLookup>> lookup =
      autotune::client::StartupLookup::Create(options);
  if (!lookup.ok()) {
    std::cerr << lookup.status() << "\n";
    return 1;
  }
  std::vector<autotune::v1::LookupRequest> requests;
  for (int rows : {1, 64}) {
    autotune::v1::LookupRequest request;
    request.set_family("rmsnorm");
    (*request.mutable_problem()->mutable_dims())["rows"] = rows;
    (*request.mutable_problem()->mutable_dims())["hidden"] = 4096;
    request.mutable_problem()->set_dtype(autotune::v1::BFLOAT16);
    requests.push_back(request);
  }
  int failed = 0;
  for (const autotune::client::StartupAnswer& answer : (*lookup)->LookupAll(requests)) {
    if (!answer.error.ok()) {
      std::cout << "error: " << answer.error.message() << "\n";
      ++failed;
      continue;
    }
    std::cout << autotune::v1::MatchKind_Name(answer.response.match()) << " "
              << autotune::v1::MissKind_Name(answer.response.miss_kind()) << " from "
              << autotune::client::AnswerSourceName(answer.source) << "; default config "
              << answer.response.default_config().ShortDebugString() << "\n";
  }
  return failed == 0 ? 0 : 1;
}
