// The HTTP API (service/rpc/admin_api.h) as a browser or a script may call
// it: the input is "METHOD TARGET\n" ("GET /api/entries?family=x"), header
// lines ("Content-Type: ...", "Authorization: ..."), an empty line, then
// the body; the request is parsed as http_server.cc does (path and query
// decoded) and answered by an AdminApi over a real store, the anonymous
// caller an admin so every route is reached.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cache/store.h"
#include "service/jobs/job_runner.h"
#include "service/lookup/cache_admin.h"
#include "service/rpc/admin_api.h"
#include "service/rpc/admission.h"
#include "service/rpc/auth.h"
#include "tests/reliability/fuzz/fuzz_store.h"

namespace {

struct Api {
  std::unique_ptr<autotune::cache::Store> store;
  std::unique_ptr<autotune::service::CacheAdmin> admin;
  std::unique_ptr<autotune::service::JobRunner> jobs;
  std::unique_ptr<autotune::service::Authenticator> auth;
  std::unique_ptr<autotune::service::Admission> admission;
  std::unique_ptr<autotune::service::AdminApi> api;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autotune;
  static Api* api = [] {
    auto* a = new Api;
    a->store = fuzz::OpenFuzzStore();
    a->admin = std::make_unique<service::CacheAdmin>(a->store.get());
    service::JobRunnerOptions no_workers;
    no_workers.profile_off_reason = "no GPU in a fuzzer";
    a->jobs = std::make_unique<service::JobRunner>(a->store.get(), nullptr, "no compile pool here",
                                                   no_workers);
    service::AuthOptions auth;
    auth.anonymous_role = "admin";
    absl::StatusOr<std::unique_ptr<service::Authenticator>> made =
        service::Authenticator::Create(auth);
    if (!made.ok()) std::abort();
    a->auth = *std::move(made);
    a->admission = std::make_unique<service::Admission>(a->auth.get());
    a->api = std::make_unique<service::AdminApi>(
        service::AdminApi::Sources{.admin = a->admin.get(),
                                   .jobs = a->jobs.get(),
                                   .admission = a->admission.get(),
                                   .audit = nullptr});
    return a;
  }();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t blank = input.find("\n\n");
  absl::string_view head(input.data(), blank == std::string::npos ? input.size() : blank);
  service::HttpRequest request;
  request.body = blank == std::string::npos ? "" : input.substr(blank + 2);
  request.peer = "ipv4:127.0.0.1:1";
  bool first = true;
  for (absl::string_view line : absl::StrSplit(head, '\n')) {
    if (first) {
      first = false;
      const size_t space = line.find(' ');
      request.method = std::string(line.substr(0, space));
      absl::string_view target = space == absl::string_view::npos ? "/" : line.substr(space + 1);
      const size_t question = target.find('?');
      request.path = std::string(target.substr(0, question));
      if (question != absl::string_view::npos) {
        for (absl::string_view pair : absl::StrSplit(target.substr(question + 1), '&')) {
          const size_t equals = pair.find('=');
          request.query[std::string(pair.substr(0, equals))] =
              equals == absl::string_view::npos ? "" : std::string(pair.substr(equals + 1));
        }
      }
      continue;
    }
    absl::string_view value = line;
    if (absl::ConsumePrefix(&value, "Content-Type: ")) request.content_type = std::string(value);
    if (absl::ConsumePrefix(&value, "Authorization: ")) request.authorization = std::string(value);
  }
  if (absl::StartsWith(request.path, "/api")) {
    api->api->Api(request);
  } else {
    api->api->Page(request);
  }
  return 0;
}
