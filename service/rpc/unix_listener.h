// The daemon's Unix sockets, accepted here rather than by gRPC, so that
// each connection's peer (SO_PEERCRED: pid, uid, gid) is known before its
// first call: the connection is handed to the gRPC server as a file
// descriptor, whose calls then carry the peer string "fd:<fd>", and the
// credentials are given to `on_peer` under that descriptor first
// (service/rpc/auth.h maps them to a role).
//
//   ASSIGN_OR_RETURN(auto listener, UnixListener::Bind(path, 0600));
//   ... server = builder.BuildAndStart() ...
//   listener->Start(server.get(), [&](int fd, const PeerCredentials& peer) { ... });
//   listener->Stop();    // before the server's Shutdown
//
// Limit: a descriptor number is reused once gRPC closes a connection; a
// call of a closed connection still waiting to be authorized after a new
// connection got its number would be judged by the new peer. gRPC reads a
// call's metadata before it hands the call over, so that call would have to
// wait in the daemon's queue past its connection's end.
#ifndef AUTOTUNE_SERVICE_RPC_UNIX_LISTENER_H_
#define AUTOTUNE_SERVICE_RPC_UNIX_LISTENER_H_

#include <sys/un.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "service/rpc/auth.h"

namespace grpc {
class Server;
}

namespace autotune::service {

// The address of the Unix socket at `path`; INVALID_ARGUMENT when the path
// is too long for one.
absl::StatusOr<sockaddr_un> UnixSocketAddress(const std::string& path);

class UnixListener {
 public:
  // Binds `path` (a stale socket already removed), sets its mode and
  // listens. Errors name the path.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const std::string& path, unsigned mode);
  ~UnixListener();  // Stop()
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  using OnPeer = std::function<void(int fd, const PeerCredentials& peer)>;
  // Accepts on a thread of its own until Stop().
  void Start(grpc::Server* server, OnPeer on_peer);
  // Stops accepting; connections already handed over stay with the server.
  // Idempotent.
  void Stop();

 private:
  UnixListener(int fd, int wake_read, int wake_write)
      : fd_(fd), wake_read_(wake_read), wake_write_(wake_write) {}
  void Run(grpc::Server* server, const OnPeer& on_peer);
  int fd_;
  int wake_read_;
  int wake_write_;
  std::thread thread_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_UNIX_LISTENER_H_
