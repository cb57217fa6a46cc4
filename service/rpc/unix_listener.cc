#include "service/rpc/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"
#include "spdlog/spdlog.h"

namespace autotune::service {

absl::StatusOr<sockaddr_un> UnixSocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path,
                                                                 unsigned mode) {
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return PosixError("socket()", errno);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int error = errno;
    close(fd);
    return PosixError(absl::StrCat("cannot bind unix://", path), error);
  }
  if (chmod(path.c_str(), mode) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    close(fd);
    unlink(path.c_str());
    return PosixError(absl::StrCat("cannot listen on unix://", path), error);
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    const int error = errno;
    close(fd);
    unlink(path.c_str());
    return PosixError("pipe2", error);
  }
  return std::unique_ptr<UnixListener>(new UnixListener(fd, wake[0], wake[1]));
}

UnixListener::~UnixListener() {
  Stop();
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

void UnixListener::Start(grpc::Server* server, OnPeer on_peer) {
  thread_ = std::thread([this, server, on_peer = std::move(on_peer)] { Run(server, on_peer); });
}

void UnixListener::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

void UnixListener::Run(grpc::Server* server, const OnPeer& on_peer) {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("unix listener: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int connection = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        spdlog::warn("unix listener: accept: {}", std::strerror(errno));
      }
      continue;
    }
    ucred credentials{};
    socklen_t length = sizeof(credentials);
    if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
      spdlog::warn("unix listener: SO_PEERCRED: {}; connection closed", std::strerror(errno));
      close(connection);
      continue;
    }
    on_peer(connection, PeerCredentials{credentials.pid, credentials.uid, credentials.gid});
    grpc::AddInsecureChannelFromFd(server, connection);
  }
}

}  // namespace autotune::service
