// The daemon's HTTP port (`--http-listen host:port`), served by civetweb:
// each request is handed, as an HttpRequest, to the handler of the longest
// route that is its path or a folder above it, and answered with the
// HttpResponse it returns.
//
//   ASSIGN_OR_RETURN(auto http, HttpServer::Start("127.0.0.1:0", {
//       {"/metrics", [&](const HttpRequest&) { return HttpResponse{...}; }}}));
//   http->address();   // "127.0.0.1:41234"
//
// A request for no route is 404; a body over kMaxBodyBytes is 413 and never
// reaches a handler. Every response says `Cache-Control: no-store` and
// `X-Content-Type-Options: nosniff`, plus the headers a handler adds.
//
// What a web page in a browser could otherwise do with the port:
// - A Host header that names none of the hosts served (loopback names, the
//   listen address's host, `allowed_hosts`) is 403, so a DNS name an
//   attacker rebinds to 127.0.0.1 reaches no handler. A request without a
//   Host header (HTTP/1.0 tools) is served: browsers always send one.
// - No CORS header is ever sent and preflights are not answered, so no
//   other origin may read an answer or send a JSON POST.
// - Idle connections (a flood of them, reopened as they close) must not
//   hold up a request: civetweb gives each connection a thread of its own
//   while it reads the request, so there are kThreads of them, more than
//   such a flood from one host, and a connection that sends no request
//   within kRequestTimeoutMs is closed. N idle connections past kThreads
//   delay a request by about (N - kThreads) / kThreads * kRequestTimeoutMs.
//   No keep-alive: a connection serves one request. The listen backlog
//   (kListenBacklog) holds a burst while threads free up.
//
// Thread-safe: handlers run on the server's threads, several at once.
// The destructor stops listening and waits for the requests in flight.
#ifndef AUTOTUNE_SERVICE_RPC_HTTP_SERVER_H_
#define AUTOTUNE_SERVICE_RPC_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

class CivetServer;

namespace autotune::service {

struct HttpRequest {
  std::string method;                        // "GET", "POST"...
  std::string path;                          // "/api/entries", decoded
  std::map<std::string, std::string> query;  // decoded; a name given twice keeps the last
  std::string authorization;                 // the Authorization header, if any
  std::string cookie;                        // the Cookie header, if any
  std::string page_request;                  // the X-Autotune-Request header, if any
  std::string content_type;
  std::string body;
  std::string peer;     // "ipv4:127.0.0.1:51234", as gRPC writes peers
  int server_port = 0;  // the port the request came to
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more headers
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  static constexpr size_t kMaxBodyBytes = 1 << 20;
  static constexpr int kThreads = 1024;
  static constexpr int kRequestTimeoutMs = 2000;
  static constexpr int kListenBacklog = 1024;

  // Listens on `address` ("127.0.0.1:9464", "[::1]:9464"; port 0 picks a
  // free one). UNAVAILABLE naming the address when it cannot be bound.
  // `allowed_hosts`: more names a Host header may give (the daemon's
  // --http-allow-host), besides localhost, 127.0.0.1, ::1 and the host of
  // `address` (unless it is a wildcard such as 0.0.0.0).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, std::vector<std::pair<std::string, HttpHandler>> routes,
      std::vector<std::string> allowed_hosts = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `address` with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  class Route;
  HttpServer() = default;
  std::vector<std::unique_ptr<Route>> routes_;
  std::unique_ptr<CivetServer> server_;
  std::string address_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RPC_HTTP_SERVER_H_
