#include "service/rpc/http_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <utility>

#include "CivetServer.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "civetweb.h"

namespace autotune::service {
namespace {

std::string UrlDecode(absl::string_view text) {
  std::string decoded(text.size() + 1, '\0');
  const int length = mg_url_decode(text.data(), static_cast<int>(text.size()), decoded.data(),
                                   static_cast<int>(decoded.size()), /*is_form_url_encoded=*/1);
  decoded.resize(length < 0 ? 0 : static_cast<size_t>(length));
  return decoded;
}

std::map<std::string, std::string> ParseQuery(const char* query) {
  std::map<std::string, std::string> values;
  if (query == nullptr) return values;
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t equals = pair.find('=');
    values[UrlDecode(pair.substr(0, equals))] =
        equals == absl::string_view::npos ? "" : UrlDecode(pair.substr(equals + 1));
  }
  return values;
}

const char* StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return status < 500 ? "Error" : "Internal Server Error";
  }
}

void Send(mg_connection* connection, const HttpResponse& response) {
  std::string head = absl::StrCat("HTTP/1.1 ", response.status, " ", StatusText(response.status),
                                  "\r\nContent-Type: ", response.content_type,
                                  "\r\nContent-Length: ", response.body.size(),
                                  "\r\nCache-Control: no-store"
                                  "\r\nX-Content-Type-Options: nosniff"
                                  "\r\nConnection: close\r\n");
  for (const auto& [name, value] : response.headers)
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  head += "\r\n";
  mg_write(connection, head.data(), head.size());
  mg_write(connection, response.body.data(), response.body.size());
}

HttpResponse Plain(int status, std::string text) {
  return {.status = status,
          .content_type = "text/plain; charset=utf-8",
          .body = std::move(text),
          .headers = {}};
}

// "host" of a Host header "host", "host:port", "[v6]" or "[v6]:port",
// lowercased.
std::string HostName(absl::string_view header) {
  header = absl::StripAsciiWhitespace(header);
  if (absl::StartsWith(header, "[")) {
    const size_t close = header.find(']');
    return absl::AsciiStrToLower(header.substr(1, close == header.npos ? header.npos : close - 1));
  }
  return absl::AsciiStrToLower(header.substr(0, header.find(':')));
}

// Why the socket of `address` ("host:port", "[v6]:port" or "port") cannot
// be bound, by binding it as civetweb would ("address already in use"); empty
// when it can be (civetweb failed for another reason) or the address does
// not resolve.
std::string WhyCannotBind(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  const std::string port = colon == std::string::npos ? address : address.substr(colon + 1);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return "";
  }
  std::string why;
  for (addrinfo* a = found; a != nullptr && why.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) why = absl::AsciiStrToLower(strerror(errno));
    close(fd);
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace

class HttpServer::Route : public CivetHandler {
 public:
  Route(std::vector<std::pair<std::string, HttpHandler>> routes, std::set<std::string> hosts)
      : routes_(std::move(routes)), hosts_(std::move(hosts)) {}

  bool handleGet(CivetServer*, mg_connection* connection) override { return Handle(connection); }
  bool handlePost(CivetServer*, mg_connection* connection) override { return Handle(connection); }

 private:
  bool Handle(mg_connection* connection) {
    const mg_request_info* info = mg_get_request_info(connection);
    if (const char* host = mg_get_header(connection, "Host");
        host != nullptr && !hosts_.contains(HostName(host))) {
      Send(connection,
           Plain(403, absl::StrCat("Host '", absl::CHexEscape(HostName(host).substr(0, 100)),
                                   "' is not served here (loopback names, the listen address "
                                   "and the daemon's --http-allow-host are)\n")));
      return true;
    }
    HttpRequest request;
    request.method = info->request_method != nullptr ? info->request_method : "";
    request.path = info->local_uri != nullptr ? info->local_uri : "/";
    request.query = ParseQuery(info->query_string);
    request.peer = absl::StrCat(
        absl::StrContains(info->remote_addr, ':') ? "ipv6:[" : "ipv4:", info->remote_addr,
        absl::StrContains(info->remote_addr, ':') ? "]" : "", ":", info->remote_port);
    if (const char* value = mg_get_header(connection, "Authorization")) {
      request.authorization = value;
    }
    if (const char* value = mg_get_header(connection, "Cookie")) request.cookie = value;
    if (const char* value = mg_get_header(connection, "X-Autotune-Request")) {
      request.page_request = value;
    }
    request.server_port = info->server_port;
    if (const char* value = mg_get_header(connection, "Content-Type")) {
      request.content_type = value;
    }
    if (info->content_length > static_cast<long long>(kMaxBodyBytes)) {
      Send(connection, Plain(413, absl::StrCat("the body is over ", kMaxBodyBytes, " bytes\n")));
      return true;
    }
    if (info->content_length > 0) {
      request.body.resize(static_cast<size_t>(info->content_length));
      size_t read = 0;
      while (read < request.body.size()) {
        const int got = mg_read(connection, request.body.data() + read, request.body.size() - read);
        if (got <= 0) break;
        read += static_cast<size_t>(got);
      }
      request.body.resize(read);
    }
    const HttpHandler* handler = nullptr;
    size_t matched = 0;
    for (const auto& [prefix, candidate] : routes_) {
      const bool under =
          request.path == prefix || (absl::StartsWith(request.path, prefix) &&
                                     (prefix.back() == '/' || request.path[prefix.size()] == '/'));
      if (under && prefix.size() >= matched) {
        handler = &candidate;
        matched = prefix.size();
      }
    }
    if (handler == nullptr) {
      Send(connection, Plain(404, absl::StrCat("no page at ", request.path, "\n")));
      return true;
    }
    HttpResponse response;
    try {
      response = (*handler)(request);
    } catch (const std::exception& e) {
      response = Plain(500, absl::StrCat("internal error: ", e.what(), "\n"));
    }
    Send(connection, response);
    return true;
  }

  const std::vector<std::pair<std::string, HttpHandler>> routes_;
  const std::set<std::string> hosts_;  // lowercased names a Host header may give
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, std::vector<std::pair<std::string, HttpHandler>> routes,
    std::vector<std::string> allowed_hosts) {
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  std::set<std::string> hosts = {"localhost", "127.0.0.1", "::1"};
  const size_t colon = address.rfind(':');
  const std::string listen_host =
      colon == std::string::npos ? "" : HostName(address.substr(0, colon));
  if (!listen_host.empty() && listen_host != "0.0.0.0" && listen_host != "::") {
    hosts.insert(listen_host);
  }
  for (const std::string& host : allowed_hosts) hosts.insert(HostName(host));
  server->routes_.push_back(std::make_unique<Route>(std::move(routes), std::move(hosts)));
  // civetweb answers CORS preflights and adds CORS headers unless these are
  // empty; none is wanted.
  const std::vector<std::string> options = {"listening_ports",
                                            address,
                                            "num_threads",
                                            absl::StrCat(kThreads),
                                            "connection_queue",
                                            absl::StrCat(kThreads),
                                            "listen_backlog",
                                            absl::StrCat(kListenBacklog),
                                            "request_timeout_ms",
                                            absl::StrCat(kRequestTimeoutMs),
                                            "enable_keep_alive",
                                            "no",
                                            "access_control_allow_origin",
                                            "",
                                            "access_control_allow_methods",
                                            "",
                                            "access_control_allow_headers",
                                            ""};
  try {
    server->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    // civetweb says only "null context when constructing CivetServer"; the
    // bind says why ("address already in use").
    const std::string why = WhyCannotBind(address);
    return absl::UnavailableError(
        absl::StrCat("--http-listen ", address, ": cannot listen",
                     why.empty() ? absl::StrCat(" (", e.what(), ")") : absl::StrCat(": ", why)));
  }
  server->server_->addHandler("/", server->routes_.front().get());
  const std::vector<int> ports = server->server_->getListeningPorts();
  server->address_ = ports.empty() || colon == std::string::npos
                         ? address
                         : absl::StrCat(address.substr(0, colon), ":", ports.front());
  return server;
}

HttpServer::~HttpServer() {
  if (server_ != nullptr) server_->close();
}

}  // namespace autotune::service
