#include "service/worker/worker_pipe.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace autotune::kernel_worker {
namespace {

// Reads exactly `size` bytes into `out` before `deadline`.
absl::Status ReadExactly(int fd, absl::Time deadline, char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0 && deadline != absl::InfiniteFuture()) {
      return absl::DeadlineExceededError("no answer from the worker before the deadline");
    }
    pollfd pfd{fd, POLLIN, 0};
    const int timeout_ms = deadline == absl::InfiniteFuture()
                               ? -1
                               : static_cast<int>(std::min<int64_t>(left_ms, 1000));
    const int ready = poll(&pfd, 1, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return PosixError("poll", errno);
    }
    if (ready == 0) continue;
    const ssize_t n = read(fd, out + done, size - done);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      // ABORTED whatever the errno (worker_pipe.h): the worker is gone.
      return absl::AbortedError(PosixError("reading from the worker", errno).message());
    }
    if (n == 0) return absl::AbortedError("the worker closed its output (it exited)");
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteDelimited(int fd, const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteVarint32(static_cast<uint32_t>(message.ByteSizeLong()));
    if (!message.SerializeToCodedStream(&coded)) {
      return absl::InternalError("cannot serialize a worker message");
    }
  }
  size_t done = 0;
  while (done < bytes.size()) {
    // send() with MSG_NOSIGNAL: a worker that died must not SIGPIPE us.
    ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::AbortedError(PosixError("writing to the worker", errno).message());
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadDelimited(int fd, absl::Time deadline, google::protobuf::MessageLite* message) {
  uint64_t size = 0;
  for (int shift = 0;; shift += 7) {
    if (shift > 35) return absl::DataLossError("malformed size prefix from the worker");
    char byte = 0;
    absl::Status read = ReadExactly(fd, deadline, &byte, 1);
    if (!read.ok()) return read;
    size |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  if (size > kMaxWorkerMessageBytes) {
    return absl::DataLossError(absl::StrCat("worker message of ", size, " bytes is too large"));
  }
  std::string body(size, '\0');
  absl::Status read = ReadExactly(fd, deadline, body.data(), body.size());
  if (!read.ok()) return read;
  if (!message->ParseFromString(body)) {
    return absl::DataLossError("malformed message from the worker");
  }
  return absl::OkStatus();
}

}  // namespace autotune::kernel_worker
