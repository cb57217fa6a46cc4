#include "service/rpc/listen_address.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace autotune::service {

bool IsLoopbackHost(absl::string_view host) {
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text, bool tls, bool insecure) {
  ListenAddress address;
  address.uri = std::string(text);
  if (absl::StartsWith(text, "unix:")) {
    absl::string_view path = text.substr(5);
    if (absl::StartsWith(path, "//")) path.remove_prefix(2);
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen ", text, ": a Unix socket needs an absolute path (unix:///path/to.sock)"));
    }
    address.kind = ListenAddress::Kind::kUnix;
    address.path = std::string(path);
    address.uri = absl::StrCat("unix://", path);
    address.loopback = true;
    return address;
  }
  if (absl::StrContains(text, "://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", text, ": unknown scheme; use unix:///path or host:port"));
  }
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", text, ": expected host:port or unix:///path"));
  }
  absl::string_view host = text.substr(0, colon);
  absl::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (absl::StrContains(host, ':')) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", text, ": write IPv6 addresses in brackets, [::1]:port"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", text, ": port '", port_text, "' is not in 0..65535"));
  }
  address.kind = ListenAddress::Kind::kTcp;
  address.host = std::string(host);
  address.port = port;
  address.loopback = IsLoopbackHost(host);
  if (!tls) {
    if (!insecure) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen ", text,
          ": TCP needs TLS (--tls-cert and --tls-key) or --insecure on a loopback address"));
    }
    if (!address.loopback) {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen ", text, ": refusing plaintext TCP on non-loopback host '", host,
                       "'; use --tls-cert/--tls-key, or listen on 127.0.0.1"));
    }
  }
  return address;
}

}  // namespace autotune::service
