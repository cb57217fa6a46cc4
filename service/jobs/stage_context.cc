#include "service/jobs/stage_context.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "spdlog/spdlog.h"

namespace autotune::service {

absl::Status StageContext::Record(const v1::Measurement& measurement, bool count) const {
  absl::Status stored = store->AddMeasurement(measurement);
  if (count) job->CountMeasurement(measurement);
  publish(&measurement, "");
  return stored;
}

void StageContext::FailProblem(const absl::Status& why, bool store_error) const {
  job->FailProblem(why.message(), store_error);
  spdlog::warn("job {}: {}", job->id, std::string(why.message()));
}

ScreenJob StageContext::Screening() const {
  ScreenJob screen;
  screen.job_id = job->id;
  screen.arch = work->plan.arch;
  screen.nvrtc_version = work->nvrtc_version;
  screen.options = &work->options;
  screen.compiled = &work->compiled;
  screen.store = store;
  screen.gpus = gpus;
  screen.reuse_stored = work->resumed;
  screen.progress = [this](const std::string& message) { Announce(message); };
  screen.record = [this](const v1::Measurement& m, bool count) { return Record(m, count); };
  return screen;
}

SerialJob StageContext::Serial() const {
  SerialJob serial;
  serial.job_id = job->id;
  serial.arch = work->plan.arch;
  serial.nvrtc_version = work->nvrtc_version;
  serial.store = store;
  serial.gpus = gpus;
  serial.options = &work->options;
  serial.record = [this](const v1::Measurement& m, bool count) { return Record(m, count); };
  serial.progress = [this](const std::string& message) { Announce(message); };
  serial.cancel = &job->cancel;
  return serial;
}

void OnGpus(const std::atomic<bool>& cancel, size_t gpus, const std::vector<size_t>& indices,
            const std::function<void(size_t)>& each) {
  std::atomic<size_t> next{0};
  auto loop = [&] {
    while (!cancel) {
      const size_t k = next.fetch_add(1);
      if (k >= indices.size()) return;
      each(indices[k]);
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < gpus; ++i) threads.emplace_back(loop);
  for (std::thread& thread : threads) thread.join();
}

}  // namespace autotune::service
