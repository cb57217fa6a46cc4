// Addresses autotuned listens on, and the safety rules for them.
//
//   "unix:///run/autotune.sock"  a Unix socket (absolute path), mode 0600
//   "127.0.0.1:7700", "[::1]:7700", "localhost:7700"  TCP
//
// TCP is served only with TLS, or without it when the operator passed
// --insecure and the host is a loopback address: a cache that hands out
// binaries to be loaded into GPU processes must not be open to the network.
#ifndef AUTOTUNE_SERVICE_RPC_LISTEN_ADDRESS_H_
#define AUTOTUNE_SERVICE_RPC_LISTEN_ADDRESS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune::service {

struct ListenAddress {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string uri;   // as given to gRPC
  std::string path;  // kUnix: the socket file
  std::string host;  // kTcp: without brackets
  int port = 0;      // kTcp; 0 = pick a free port
  bool loopback = false;
};

// Parses and checks one --listen value. INVALID_ARGUMENT names the value and
// what is wrong with it (relative socket path, missing port, port out of
// range, plaintext TCP on a non-loopback host, plaintext without --insecure).
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text, bool tls, bool insecure);

// Whether `host` is a loopback name or address (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(absl::string_view host);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_LISTEN_ADDRESS_H_
