#include "client/startup_lookup.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

std::string Context(const v1::LookupRequest& request) {
  return absl::StrCat(request.family(), " ", FormatDims(request.problem().dims()), " ",
                      DTypeName(request.problem().dtype()));
}

std::string NowText() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

void AddNote(StartupAnswer& answer, absl::string_view note) {
  absl::StrAppend(&answer.note, answer.note.empty() ? "" : "; ", note);
}

bool HasBinary(const v1::LookupResponse& response) {
  return response.match() != v1::MISS && !response.entry().binary_sha256().empty();
}

}  // namespace

const char* AnswerSourceName(AnswerSource source) {
  return source == AnswerSource::kService ? "service" : "local cache";
}

absl::StatusOr<std::unique_ptr<StartupLookup>> StartupLookup::Create(
    const StartupOptions& options) {
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the start-up deadline must be positive");
  }
  ClientOptions client_options = options.client;
  client_options.timeout = options.deadline;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) return client.status();
  std::optional<LocalCache> local;
  if (options.local_cache_dir != "none") {
    const std::string dir =
        options.local_cache_dir.empty() ? LocalCache::DefaultDirectory() : options.local_cache_dir;
    absl::StatusOr<LocalCache> opened = LocalCache::Open(dir);
    if (!opened.ok()) {
      return absl::Status(opened.status().code(),
                          absl::StrCat("local cache: ", opened.status().message()));
    }
    local.emplace(*std::move(opened));
  }
  return std::unique_ptr<StartupLookup>(
      new StartupLookup(options, *std::move(client), std::move(local)));
}

StartupLookup::StartupLookup(StartupOptions options, std::unique_ptr<Client> client,
                             std::optional<LocalCache> local)
    : options_(std::move(options)), client_(std::move(client)), local_(std::move(local)) {}

std::vector<StartupAnswer> StartupLookup::LookupAll(
    const std::vector<v1::LookupRequest>& requests) {
  const absl::Time deadline = absl::Now() + options_.deadline;
  std::vector<StartupAnswer> answers(requests.size());
  v1::BatchLookupRequest batch;
  for (size_t i = 0; i < requests.size(); ++i) {
    v1::LookupRequest& request = answers[i].request;
    request = requests[i];
    request.clear_include_cubin();
    if (!request.has_device()) *request.mutable_device() = options_.device;
    if (request.driver_version().empty()) request.set_driver_version(options_.driver_version);
    *batch.add_lookups() = request;
  }
  if (requests.empty()) return answers;

  absl::StatusOr<v1::BatchLookupResponse> answered = client_->BatchLookup(batch, options_.deadline);
  if (answered.ok() && answered->results_size() != batch.lookups_size()) {
    answered = absl::InternalError(absl::StrCat("the service answered ", answered->results_size(),
                                                " of ", batch.lookups_size(), " lookups"));
  }
  if (!answered.ok()) {
    FromLocalCache(answered.status(), answers);
    return answers;
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    StartupAnswer& answer = answers[i];
    v1::BatchLookupResult& result = *answered->mutable_results(static_cast<int>(i));
    answer.source = AnswerSource::kService;
    if (result.error_code() != 0) {
      answer.error =
          absl::Status(static_cast<absl::StatusCode>(result.error_code()), result.error_message());
      continue;
    }
    answer.response = std::move(*result.mutable_response());
    answer.note = absl::StrCat("answered by ", client_->address());
  }
  if (options_.cubins) AttachCubins(deadline, answers);
  if (options_.tune_on_miss) RequestTuning(deadline, answers);
  for (StartupAnswer& answer : answers) {
    if (answer.error.ok()) Store(answer);
  }
  return answers;
}

void StartupLookup::AttachCubins(absl::Time deadline, std::vector<StartupAnswer>& answers) {
  v1::BatchLookupRequest fetch;
  fetch.set_include_cubin(true);
  std::vector<size_t> fetched;
  for (size_t i = 0; i < answers.size(); ++i) {
    StartupAnswer& answer = answers[i];
    if (!answer.error.ok() || !HasBinary(answer.response)) continue;
    const std::string& sha = answer.response.entry().binary_sha256();
    if (local_) {
      absl::StatusOr<std::optional<std::string>> cubin = local_->GetCubin(sha);
      if (cubin.ok() && cubin->has_value()) {
        answer.cubin = **std::move(cubin);
        continue;
      }
      if (!cubin.ok()) AddNote(answer, absl::StrCat(cubin.status().message(), "; fetched again"));
    }
    *fetch.add_lookups() = answer.request;
    fetched.push_back(i);
  }
  if (fetched.empty()) return;
  const absl::Duration left = deadline - absl::Now();
  absl::StatusOr<v1::BatchLookupResponse> binaries =
      left > absl::ZeroDuration()
          ? client_->BatchLookup(fetch, left)
          : absl::StatusOr<v1::BatchLookupResponse>(
                absl::DeadlineExceededError("no time was left for the cubins"));
  for (size_t i : fetched) {
    StartupAnswer& answer = answers[i];
    const std::string& sha = answer.response.entry().binary_sha256();
    if (!binaries.ok()) {
      AddNote(answer, absl::StrCat("its cubin was not fetched: ", binaries.status().message()));
      continue;
    }
    auto it = binaries->binaries().find(sha);
    if (it == binaries->binaries().end()) {
      AddNote(answer, "the service sent no cubin for it (the entry changed between the calls?)");
    } else if (Sha256Hex(it->second) != sha) {
      AddNote(answer, absl::StrCat("the cubin the service sent does not match ", sha, "; refused"));
    } else {
      answer.cubin = it->second;
    }
  }
}

void StartupLookup::RequestTuning(absl::Time deadline, std::vector<StartupAnswer>& answers) {
  v1::RequestTuningRequest request;
  std::vector<size_t> asked;
  for (size_t i = 0; i < answers.size(); ++i) {
    const StartupAnswer& answer = answers[i];
    if (answer.error.ok() && answer.response.match() == v1::MISS &&
        answer.response.miss_kind() != v1::MISS_DRIVER_TOO_OLD) {
      *request.add_lookups() = answer.request;
      asked.push_back(i);
    }
  }
  if (asked.empty()) return;
  const absl::Duration left = deadline - absl::Now();
  absl::StatusOr<v1::RequestTuningResponse> response =
      left > absl::ZeroDuration() ? client_->RequestTuning(request, left)
                                  : absl::StatusOr<v1::RequestTuningResponse>(
                                        absl::DeadlineExceededError("no time was left to ask"));
  if (response.ok() && response->results_size() != request.lookups_size()) {
    response = absl::InternalError("the service answered another number of tuning requests");
  }
  for (size_t k = 0; k < asked.size(); ++k) {
    StartupAnswer& answer = answers[asked[k]];
    if (!response.ok()) {
      AddNote(answer, absl::StrCat("tune-on-miss not asked: ", response.status().message()));
      continue;
    }
    const v1::TuningRequestResult& result = response->results(static_cast<int>(k));
    answer.tuning = result;
    AddNote(answer, absl::StrCat("tune-on-miss: ", v1::TuningRequestState_Name(result.state()),
                                 ": ", result.message()));
  }
}

void StartupLookup::Store(StartupAnswer& answer) const {
  if (!local_) return;
  v1::LocalAnswer local;
  *local.mutable_request() = answer.request;
  *local.mutable_response() = answer.response;
  local.set_server(client_->address());
  local.set_stored_at(NowText());
  absl::Status stored = local_->PutAnswer(local);
  if (stored.ok() && !answer.cubin.empty()) {
    stored = local_->PutCubin(answer.response.entry().binary_sha256(), answer.cubin);
  }
  if (!stored.ok()) {
    // Serving this start is what matters; the next start asks the service.
    AddNote(answer, absl::StrCat("not kept in the local cache: ", stored.message()));
  }
}

void StartupLookup::FromLocalCache(const absl::Status& why,
                                   std::vector<StartupAnswer>& answers) const {
  const std::string service = absl::StrCat("the service did not answer (", why.message(), ")");
  for (StartupAnswer& answer : answers) {
    answer.source = AnswerSource::kLocalCache;
    if (!local_) {
      answer.error = absl::Status(why.code(), absl::StrCat(Context(answer.request), ": ", service,
                                                           " and there is no local cache"));
      continue;
    }
    absl::StatusOr<std::optional<v1::LocalAnswer>> local = local_->GetAnswer(answer.request);
    if (!local.ok() || !local->has_value()) {
      answer.error = absl::Status(
          local.ok() ? why.code() : local.status().code(),
          absl::StrCat(
              Context(answer.request), ": ", service, " and the local cache ", local_->directory(),
              local.ok() ? " has no answer for it" : absl::StrCat(": ", local.status().message())));
      continue;
    }
    answer.response = std::move(*(*local)->mutable_response());
    answer.note = absl::StrCat(service, "; answer stored ", (*local)->stored_at(), " by ",
                               (*local)->server());
    if (!options_.cubins || !HasBinary(answer.response)) continue;
    absl::StatusOr<std::optional<std::string>> cubin =
        local_->GetCubin(answer.response.entry().binary_sha256());
    if (!cubin.ok()) {
      AddNote(answer, cubin.status().message());
    } else if (!cubin->has_value()) {
      AddNote(answer, "its cubin is not in the local cache");
    } else {
      answer.cubin = **std::move(cubin);
    }
  }
}

}  // namespace autotune::client
