#include "service/rpc/admin_api.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "google/protobuf/message.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/json.h"
#include "proto/problem.h"
#include "service/defaults.h"
#include "service/jobs/job_text.h"
#include "web/web_assets.h"

namespace autotune::service {
namespace {

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

HttpResponse ErrorResponse(const absl::Status& status) {
  google::protobuf::Struct error;
  (*error.mutable_fields())["code"].set_string_value(absl::StatusCodeToString(status.code()));
  (*error.mutable_fields())["message"].set_string_value(std::string(status.message()));
  return {.status = HttpStatusOf(status.code()),
          .body = MessageJson(error).value_or("{}"),
          .headers = {}};
}

std::string Param(const HttpRequest& request, const std::string& name) {
  const auto found = request.query.find(name);
  return found == request.query.end() ? "" : found->second;
}

absl::StatusOr<int32_t> IntParam(const HttpRequest& request, const std::string& name) {
  const std::string text = Param(request, name);
  int32_t value = 0;
  if (!text.empty() && (!absl::SimpleAtoi(text, &value) || value < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": '", text, "' is not a whole number of 0 or more"));
  }
  return value;
}

// The problem of `dims` and `dtype`, both given or neither (nullopt).
absl::StatusOr<std::optional<v1::Problem>> ProblemParams(const HttpRequest& request) {
  const std::string dims = Param(request, "dims");
  const std::string dtype = Param(request, "dtype");
  if (dims.empty() && dtype.empty()) return std::nullopt;
  if (dims.empty() || dtype.empty()) {
    return absl::InvalidArgumentError("dims and dtype go together");
  }
  v1::Problem problem;
  ASSIGN_OR_RETURN(const auto parsed, ParseDims(dims));
  for (const auto& [name, value] : parsed) (*problem.mutable_dims())[name] = value;
  // The page passes the enum's name ("BFLOAT16"), people the short one.
  v1::DType named = v1::DTYPE_UNSPECIFIED;
  if (v1::DType_Parse(dtype, &named) && named != v1::DTYPE_UNSPECIFIED) {
    problem.set_dtype(named);
  } else {
    ASSIGN_OR_RETURN(const v1::DType parsed_dtype, ParseDType(dtype));
    problem.set_dtype(parsed_dtype);
  }
  return problem;
}

std::string Rfc3339(absl::Time time) { return time == absl::Time() ? "" : Timestamp(time); }

// {"gpus": ..., "devices": [...]} of the snapshot.
google::protobuf::Struct DevicesMessage(const JobRunner::GpuSnapshot& snapshot) {
  google::protobuf::Struct answer;
  auto& fields = *answer.mutable_fields();
  fields["started"].set_bool_value(snapshot.started);
  fields["reason"].set_string_value(snapshot.reason);
  auto& devices = *fields["devices"].mutable_list_value();
  for (const GpuStatus& gpu : snapshot.devices) {
    auto& device = *devices.add_values()->mutable_struct_value()->mutable_fields();
    device["ordinal"].set_number_value(gpu.info.ordinal());
    device["name"].set_string_value(gpu.info.name());
    device["uuid"].set_string_value(gpu.info.uuid());
    device["compute_capability"].set_number_value(gpu.info.compute_capability());
    device["sm_count"].set_number_value(gpu.info.sm_count());
    device["driver_version"].set_string_value(gpu.info.driver_version());
    device["busy"].set_bool_value(gpu.busy);
    std::string contention;
    if (gpu.last_probe.has_value()) {
      contention = gpu.last_probe->foreign().empty() && gpu.last_probe->nvml_error().empty()
                       ? "none"
                       : DescribeDeviceState(*gpu.last_probe);
    }
    device["contention"].set_string_value(contention);
    device["contention_checked_at"].set_string_value(Rfc3339(gpu.probed_at));
  }
  return answer;
}

std::string SessionCookieName(const HttpRequest& request) {
  return absl::StrCat("autotune_session_", request.server_port);
}

// The value of this port's session cookie in the Cookie header, if any.
std::string SessionCookie(const HttpRequest& request) {
  const std::string name = SessionCookieName(request);
  for (absl::string_view pair : absl::StrSplit(request.cookie, ';')) {
    pair = absl::StripAsciiWhitespace(pair);
    if (absl::ConsumePrefix(&pair, name) && absl::ConsumePrefix(&pair, "=")) {
      return std::string(pair);
    }
  }
  return "";
}

// The call as auth.h sees it: on HTTP, with the session cookie.
CallInfo CallOf(const HttpRequest& request) {
  return {.authorization = request.authorization,
          .peer = request.peer,
          .cert_common_names = {},
          .transport = Transport::kHttp,
          .session = SessionCookie(request)};
}

// A request the session cookie would sign in must say it comes from the
// page (admin_api.h); requests with a bearer token or no cookie need not.
absl::Status CheckPageRequest(const HttpRequest& request, bool always) {
  if (!request.page_request.empty()) return absl::OkStatus();
  if (!always && (!request.authorization.empty() || SessionCookie(request).empty())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      request.path,
      ": a request signed in by the admin page's session must carry the X-Autotune-Request "
      "header (the page sends it; another site's page cannot)"));
}

bool IsJson(const HttpRequest& request) {
  // The media type exactly ("application/jsonfoo" is not JSON); a parameter
  // such as charset may follow.
  const absl::string_view media = absl::StripAsciiWhitespace(
      absl::string_view(request.content_type).substr(0, request.content_type.find(';')));
  return absl::EqualsIgnoreCase(media, "application/json");
}

}  // namespace

absl::StatusOr<Caller> AdminApi::Admit(const HttpRequest& request, absl::string_view method) const {
  return sources_.admission->Admit(CallOf(request), method);
}

HttpResponse AdminApi::Page(const HttpRequest& request) const {
  if (request.method != "GET") return ErrorResponse(absl::InvalidArgumentError("GET only"));
  // Everything the page runs is inline; it may only call back here.
  return {.content_type = "text/html; charset=utf-8",
          .body = std::string(web::AdminPage()),
          .headers = {{"Content-Security-Policy",
                       "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                       "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                       "frame-ancestors 'none'"},
                      {"X-Frame-Options", "DENY"},
                      {"Referrer-Policy", "no-referrer"}}};
}

HttpResponse AdminApi::Login(const HttpRequest& request) const {
  if (request.method != "POST") return ErrorResponse(absl::InvalidArgumentError("POST /api/login"));
  if (absl::Status page = CheckPageRequest(request, /*always=*/true); !page.ok()) {
    return ErrorResponse(page);
  }
  google::protobuf::Struct body;
  if (!IsJson(request) || !google::protobuf::util::JsonStringToMessage(request.body, &body).ok() ||
      !body.fields().contains("login") || !body.fields().at("login").has_string_value()) {
    return ErrorResponse(
        absl::InvalidArgumentError("the body of /api/login is {\"login\": \"<token of the link>\"} "
                                   "(Content-Type: application/json)"));
  }
  absl::StatusOr<LoginSession> session = sources_.auth->ExchangeLoginToken(
      body.fields().at("login").string_value(), kLoginSessionLifetime);
  if (sources_.audit != nullptr) {
    sources_.audit->Record(
        session.ok() ? session->caller : Caller{.role = Role::kNone, .id = "anonymous"}, "Login",
        "admin page session (HTTP)", session.status());
  }
  if (!session.ok()) return ErrorResponse(session.status());
  google::protobuf::Struct who;
  (*who.mutable_fields())["caller"].set_string_value(session->caller.id);
  (*who.mutable_fields())["role"].set_string_value(RoleName(session->caller.role));
  (*who.mutable_fields())["expires"].set_string_value(Rfc3339(session->expires));
  return {.body = MessageJson(who).value_or("{}"),
          .headers = {{"Set-Cookie", absl::StrCat(SessionCookieName(request), "=", session->secret,
                                                  "; Path=/; HttpOnly; SameSite=Strict; Max-Age=",
                                                  absl::ToInt64Seconds(kLoginSessionLifetime))}}};
}

HttpResponse AdminApi::Logout(const HttpRequest& request) const {
  if (request.method != "POST")
    return ErrorResponse(absl::InvalidArgumentError("POST /api/logout"));
  if (absl::Status page = CheckPageRequest(request, /*always=*/true); !page.ok()) {
    return ErrorResponse(page);
  }
  // A session that has ended already is signed out: the cookie goes anyway.
  int ended = 0;
  if (absl::StatusOr<Caller> caller = sources_.admission->Identify(CallOf(request)); caller.ok()) {
    ended = sources_.auth->EndSessions(*caller);
    if (ended > 0 && sources_.audit != nullptr) {
      sources_.audit->Record(*caller, "Logout", "admin page session (HTTP)", absl::OkStatus(),
                             absl::StrCat(ended, " sessions and links ended"));
    }
  }
  google::protobuf::Struct answer;
  (*answer.mutable_fields())["ended"].set_number_value(ended);
  return {
      .body = MessageJson(answer).value_or("{}"),
      .headers = {{"Set-Cookie", absl::StrCat(SessionCookieName(request),
                                              "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")}}};
}

HttpResponse AdminApi::Api(const HttpRequest& request) const {
  if (request.path == "/api/login") return Login(request);
  if (request.path == "/api/logout") return Logout(request);
  if (absl::Status page = CheckPageRequest(request, /*always=*/false); !page.ok()) {
    return ErrorResponse(page);
  }
  absl::StatusOr<std::string> answer = Answer(request);
  if (!answer.ok()) return ErrorResponse(answer.status());
  return {.body = *std::move(answer), .headers = {}};
}

absl::StatusOr<std::string> AdminApi::Answer(const HttpRequest& request) const {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  if (path == "/api/invalidate") {
    if (request.method != "POST") return absl::InvalidArgumentError("POST /api/invalidate");
    if (!IsJson(request)) {
      return absl::InvalidArgumentError(
          "the body of /api/invalidate is an InvalidateRequest as JSON "
          "(Content-Type: application/json)");
    }
    ASSIGN_OR_RETURN(const Caller caller, Admit(request, "Invalidate"));
    v1::InvalidateRequest invalidate;
    if (const auto parsed = google::protobuf::util::JsonStringToMessage(request.body, &invalidate);
        !parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the body is not an InvalidateRequest: ", parsed.message().ToString()));
    }
    ASSIGN_OR_RETURN(const v1::InvalidateResponse result,
                     InvalidateAudited(*sources_.admin, sources_.audit, caller, invalidate,
                                       /*via=*/" (HTTP)"));
    return MessageJson(result);
  }
  if (!get) return absl::InvalidArgumentError(absl::StrCat(path, " answers GET only"));
  if (path == "/api/whoami") {
    ASSIGN_OR_RETURN(const Caller caller, sources_.admission->Identify(CallOf(request)));
    google::protobuf::Struct who;
    (*who.mutable_fields())["caller"].set_string_value(caller.id);
    (*who.mutable_fields())["role"].set_string_value(RoleName(caller.role));
    return MessageJson(who);
  }
  if (path == "/api/entries") {
    RETURN_IF_ERROR(Admit(request, "ListEntries").status());
    v1::ListEntriesRequest list;
    list.mutable_filter()->set_family(Param(request, "family"));
    list.mutable_filter()->set_family_hash(Param(request, "hash"));
    list.mutable_filter()->set_device(Param(request, "device"));
    ASSIGN_OR_RETURN(const std::optional<v1::Problem> problem, ProblemParams(request));
    if (problem.has_value()) *list.mutable_filter()->mutable_problem() = *problem;
    ASSIGN_OR_RETURN(const int32_t limit, IntParam(request, "limit"));
    ASSIGN_OR_RETURN(const int32_t offset, IntParam(request, "offset"));
    list.set_limit(limit);
    list.set_offset(offset);
    ASSIGN_OR_RETURN(const v1::ListEntriesResponse entries, sources_.admin->ListEntries(list));
    return MessageJson(entries);
  }
  if (path == "/api/entry") {
    RETURN_IF_ERROR(Admit(request, "GetEntry").status());
    v1::GetEntryRequest entry;
    entry.set_family(Param(request, "family"));
    entry.set_family_hash(Param(request, "hash"));
    entry.mutable_device()->set_name(Param(request, "device"));
    ASSIGN_OR_RETURN(const std::optional<v1::Problem> problem, ProblemParams(request));
    if (!problem.has_value()) return absl::InvalidArgumentError("dims and dtype are needed");
    *entry.mutable_problem() = *problem;
    ASSIGN_OR_RETURN(const v1::GetEntryResponse answer, sources_.admin->GetEntry(entry));
    return MessageJson(answer);
  }
  if (path == "/api/jobs") {
    RETURN_IF_ERROR(Admit(request, "ListJobs").status());
    v1::ListJobsRequest list;
    ASSIGN_OR_RETURN(const int32_t limit, IntParam(request, "limit"));
    list.set_limit(limit);
    ASSIGN_OR_RETURN(const v1::ListJobsResponse jobs, sources_.admin->ListJobs(list));
    return MessageJson(jobs);
  }
  if (absl::StartsWith(path, "/api/jobs/")) {
    RETURN_IF_ERROR(Admit(request, "GetJob").status());
    v1::GetJobRequest job;
    job.set_id(path.substr(std::string("/api/jobs/").size()));
    ASSIGN_OR_RETURN(const v1::Job answer, sources_.admin->GetJob(job));
    return MessageJson(answer);
  }
  if (path == "/api/devices") {
    RETURN_IF_ERROR(Admit(request, "Stats").status());
    return MessageJson(DevicesMessage(sources_.jobs->Snapshot()));
  }
  return absl::NotFoundError(absl::StrCat("no API call at ", path));
}

}  // namespace autotune::service
