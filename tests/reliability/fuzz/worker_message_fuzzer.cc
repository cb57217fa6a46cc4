// The daemon <-> worker framing (service/worker/worker_pipe.h): bytes as a worker
// (or a daemon) might write them, read back as each side reads.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>

#include "absl/time/clock.h"
#include "proto/worker.pb.h"
#include "service/worker/worker_pipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 60000) return 0;  // what one pipe buffer holds without a reader
  for (int side = 0; side < 2; ++side) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return 0;
    if (write(fds[1], data, size) != static_cast<ssize_t>(size)) {
      close(fds[0]);
      close(fds[1]);
      return 0;
    }
    close(fds[1]);
    const absl::Time deadline = absl::Now() + absl::Seconds(1);
    while (true) {  // every message the bytes hold, until an error or the end
      absl::Status read;
      if (side == 0) {
        autotune::worker::v1::WorkerResponse response;
        read = autotune::kernel_worker::ReadDelimited(fds[0], deadline, &response);
      } else {
        autotune::worker::v1::WorkerRequest request;
        read = autotune::kernel_worker::ReadDelimited(fds[0], deadline, &request);
      }
      if (!read.ok()) break;
    }
    close(fds[0]);
  }
  return 0;
}
