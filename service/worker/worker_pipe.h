// Length-delimited protobuf messages over a pipe, as the daemon and
// autotune-worker exchange them: a varint size, then the message bytes.
// Reads take a deadline, so a worker that hangs costs its deadline and no
// more.
#ifndef AUTOTUNE_SERVICE_WORKER_WORKER_PIPE_H_
#define AUTOTUNE_SERVICE_WORKER_WORKER_PIPE_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"

namespace autotune::kernel_worker {

// Largest message either side accepts (a cubin plus its log).
inline constexpr size_t kMaxWorkerMessageBytes = size_t{256} << 20;

// Writes `message` to `fd` (blocking). ABORTED when the reader is gone.
absl::Status WriteDelimited(int fd, const google::protobuf::MessageLite& message);

// Reads one message from `fd`, waiting until `deadline` at most.
// DEADLINE_EXCEEDED when time runs out (the stream is then unusable),
// ABORTED on end of stream, DATA_LOSS for a malformed message.
absl::Status ReadDelimited(int fd, absl::Time deadline, google::protobuf::MessageLite* message);

}  // namespace autotune::kernel_worker

#endif  // AUTOTUNE_SERVICE_WORKER_WORKER_PIPE_H_
