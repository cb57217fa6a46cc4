#include "client/startup_lookup.h"

#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/sha256.h"
#include "base/timestamp.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

void AddNote(StartupAnswer& answer, absl::string_view note) {
  absl::StrAppend(&answer.note, answer.note.empty() ? "" : "; ", note);
}

// Runs fn(0..n-1) on a few threads: reading and hashing a thousand files
// takes tens of milliseconds on one core.
void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  const size_t threads =
      std::min<size_t>(n / 64 + 1, std::max(1u, std::min(4u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < n; i += threads) fn(i);
    });
  }
  for (size_t i = 0; i < n; i += threads) fn(i);
  for (std::thread& thread : pool) thread.join();
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

StartupLookup::~StartupLookup() { (void)FlushLocalCache(); }

absl::Status StartupLookup::FlushLocalCache() {
  std::thread writer;
  {
    absl::MutexLock lock(&writer_mu_);
    writer = std::move(writer_);
  }
  // Joined unlocked: the writer takes the lock to say how it did.
  if (writer.joinable()) writer.join();
  absl::MutexLock lock(&writer_mu_);
  return write_status_;
}

std::map<std::string, absl::StatusOr<std::shared_ptr<const std::string>>> StartupLookup::ReadCubins(
    const std::vector<std::string>& shas) const {
  std::map<std::string, absl::StatusOr<std::shared_ptr<const std::string>>> found;
  for (const std::string& sha : shas) found.emplace(sha, nullptr);
  std::vector<std::pair<const std::string*, absl::StatusOr<std::shared_ptr<const std::string>>*>>
      work;
  for (auto& [sha, result] : found) work.emplace_back(&sha, &result);
  ParallelFor(work.size(), [&](size_t i) {
    absl::StatusOr<std::optional<std::string>> cubin = local_->GetCubin(*work[i].first);
    if (!cubin.ok()) {
      *work[i].second = cubin.status();
    } else if (cubin->has_value()) {
      *work[i].second = std::make_shared<const std::string>(**std::move(cubin));
    }
  });
  return found;
}

std::vector<StartupAnswer> StartupLookup::LookupAll(
    const std::vector<v1::LookupRequest>& requests) {
  const absl::Time deadline = absl::Now() + options_.deadline;
  std::vector<StartupAnswer> answers(requests.size());
  v1::BatchLookupRequest batch;
  int kept_locally = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    v1::LookupRequest& request = answers[i].request;
    request = requests[i];
    request.clear_include_cubin();
    if (!request.has_device()) *request.mutable_device() = options_.device;
    if (request.driver_version().empty()) request.set_driver_version(options_.driver_version);
    *batch.add_lookups() = request;
  }
  if (requests.empty()) return answers;
  // A first start on this host (most answers not kept here, judged on up
  // to 16 of them): the cubins come with the answers, in one call.
  // Otherwise the answers alone, and the cubins the local cache lacks by
  // their sha256 (GetBinaries).
  const size_t step = std::max<size_t>(1, answers.size() / 16);
  int sampled = 0;
  for (size_t i = 0; local_ && i < answers.size(); i += step, ++sampled) {
    struct stat info;
    if (stat(local_->AnswerPath(answers[i].request).c_str(), &info) == 0) ++kept_locally;
  }
  const bool cubins_now = options_.cubins && 2 * kept_locally < sampled;
  batch.set_include_cubin(cubins_now);
  batch.set_include_recipe(options_.recipes);

  absl::StatusOr<v1::BatchLookupResponse> answered = client_->BatchLookup(batch, options_.deadline);
  if (answered.ok() && answered->results_size() != batch.lookups_size()) {
    answered = absl::InternalError(absl::StrCat("the service answered ", answered->results_size(),
                                                " of ", batch.lookups_size(), " lookups"));
  }
  if (!answered.ok()) {
    FromLocalCache(answered.status(), answers);
    return answers;
  }
  // The cubins sent with the answers, each checked once (null: refused)
  // and shared by its answers.
  std::map<std::string, std::shared_ptr<const std::string>> sent;
  if (cubins_now) {
    struct Check {
      const std::string* sha;
      std::string* bytes;
      std::shared_ptr<const std::string>* shared;
    };
    std::vector<Check> checks;
    for (auto& [sha, cubin] : *answered->mutable_binaries()) {
      checks.push_back({&sha, &cubin, &sent.emplace(sha, nullptr).first->second});
    }
    ParallelFor(checks.size(), [&](size_t i) {
      if (Sha256Hex(*checks[i].bytes) == *checks[i].sha) {
        *checks[i].shared = std::make_shared<const std::string>(std::move(*checks[i].bytes));
      }
    });
  }
  // The recipes' sources, each checked once and shared by its answers.
  std::map<std::string, std::shared_ptr<const std::string>> sources;
  for (auto& [sha, text] : *answered->mutable_sources()) {
    if (Sha256Hex(text) == sha) {
      sources[sha] = std::make_shared<const std::string>(std::move(text));
    }
  }
  std::vector<bool> fetched(answers.size(), false);
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
    if (answer.response.has_recipe()) {
      auto source = sources.find(answer.response.recipe().source_sha256());
      if (source != sources.end()) {
        answer.recipe_source = source->second;
      } else {
        AddNote(answer, "the service sent no valid source for its recipe");
      }
    }
    if (cubins_now && HasBinary(answer.response)) {
      const std::string& sha = answer.response.entry().binary_sha256();
      auto it = sent.find(sha);
      if (it == sent.end()) {
        AddNote(answer, "the service sent no cubin for it");
      } else if (it->second == nullptr) {
        AddNote(answer,
                absl::StrCat("the cubin the service sent does not match ", sha, "; refused"));
      } else {
        answer.cubin = it->second;
        fetched[i] = true;
      }
    }
  }
  if (options_.cubins && !cubins_now) AttachCubins(deadline, answers, fetched);
  if (options_.tune_on_miss) RequestTuning(deadline, answers);
  KeepInBackground(answers, fetched);
  return answers;
}

void StartupLookup::KeepInBackground(const std::vector<StartupAnswer>& answers,
                                     const std::vector<bool>& fetched) {
  if (!local_) return;
  struct Kept {
    v1::LocalAnswer answer;
    // Fetched from the service now; null = not to write.
    std::shared_ptr<const std::string> cubin;
    std::shared_ptr<const std::string> source;  // the recipe's, from the service
  };
  auto kept = std::make_shared<std::vector<Kept>>();
  const std::string now = Timestamp();
  for (size_t i = 0; i < answers.size(); ++i) {
    const StartupAnswer& answer = answers[i];
    if (!answer.error.ok()) continue;
    Kept k;
    *k.answer.mutable_request() = answer.request;
    *k.answer.mutable_response() = answer.response;
    k.answer.set_server(client_->address());
    k.answer.set_stored_at(now);
    if (fetched[i]) k.cubin = answer.cubin;
    if (answer.source == AnswerSource::kService) k.source = answer.recipe_source;
    kept->push_back(std::move(k));
  }
  absl::MutexLock lock(&writer_mu_);
  // One writer at a time: the new one waits for the one before it (calls
  // from several threads chain their writers, never overwrite one).
  writer_ = std::thread([this, kept, previous = std::move(writer_)]() mutable {
    if (previous.joinable()) previous.join();
    absl::Status first;
    int failed = 0;
    std::set<std::string> cubins_written;
    std::set<std::string> sources_written;
    for (const Kept& k : *kept) {
      // An answer the cache holds already is not written again.
      absl::StatusOr<std::optional<v1::LocalAnswer>> there = local_->GetAnswer(k.answer.request());
      absl::Status stored;
      if (!there.ok() || !there->has_value() ||
          !google::protobuf::util::MessageDifferencer::Equals((*there)->response(),
                                                              k.answer.response())) {
        stored = local_->PutAnswer(k.answer);
      }
      const std::string& sha = k.answer.response().entry().binary_sha256();
      if (stored.ok() && k.cubin != nullptr && cubins_written.insert(sha).second) {
        stored = local_->PutCubin(sha, *k.cubin);
      }
      const std::string& source_sha = k.answer.response().recipe().source_sha256();
      if (stored.ok() && k.source != nullptr && sources_written.insert(source_sha).second) {
        stored = local_->PutSource(source_sha, *k.source);
      }
      if (!stored.ok() && failed++ == 0) first = stored;
    }
    absl::MutexLock lock(&writer_mu_);
    write_status_ =
        failed == 0
            ? absl::OkStatus()
            : absl::Status(first.code(),
                           absl::StrCat(failed, " answers not kept in the local cache; first: ",
                                        first.message()));
  });
}

void StartupLookup::AttachCubins(absl::Time deadline, std::vector<StartupAnswer>& answers,
                                 std::vector<bool>& fetched) {
  std::vector<std::string> wanted;
  for (const StartupAnswer& answer : answers) {
    if (answer.error.ok() && HasBinary(answer.response)) {
      wanted.push_back(answer.response.entry().binary_sha256());
    }
  }
  std::map<std::string, absl::StatusOr<std::shared_ptr<const std::string>>> local;
  if (local_) local = ReadCubins(wanted);
  v1::GetBinariesRequest fetch;
  std::vector<size_t> to_fetch;
  for (size_t i = 0; i < answers.size(); ++i) {
    StartupAnswer& answer = answers[i];
    if (!answer.error.ok() || !HasBinary(answer.response)) continue;
    auto it = local.find(answer.response.entry().binary_sha256());
    if (it != local.end() && it->second.ok() && *it->second != nullptr) {
      answer.cubin = *it->second;
      continue;
    }
    if (it != local.end() && !it->second.ok()) {
      AddNote(answer, absl::StrCat(it->second.status().message(), "; fetched again"));
    }
    fetch.add_sha256(answer.response.entry().binary_sha256());
    to_fetch.push_back(i);
  }
  if (to_fetch.empty()) return;
  const absl::Duration left = deadline - absl::Now();
  absl::StatusOr<v1::GetBinariesResponse> binaries =
      left > absl::ZeroDuration()
          ? client_->GetBinaries(fetch, left)
          : absl::StatusOr<v1::GetBinariesResponse>(
                absl::DeadlineExceededError("no time was left for the cubins"));
  // Each fetched cubin checked once and shared by its answers.
  std::map<std::string, std::shared_ptr<const std::string>> checked;
  for (size_t i : to_fetch) {
    StartupAnswer& answer = answers[i];
    const std::string& sha = answer.response.entry().binary_sha256();
    if (!binaries.ok()) {
      AddNote(answer, absl::StrCat("its cubin was not fetched: ", binaries.status().message()));
      continue;
    }
    auto done = checked.find(sha);
    if (done == checked.end()) {
      auto it = binaries->mutable_binaries()->find(sha);
      std::shared_ptr<const std::string> cubin;
      if (it != binaries->mutable_binaries()->end() && Sha256Hex(it->second) == sha) {
        cubin = std::make_shared<const std::string>(std::move(it->second));
      } else if (it != binaries->mutable_binaries()->end()) {
        it->second.clear();  // refused: its bytes are of no use
      }
      done = checked.emplace(sha, std::move(cubin)).first;
    }
    if (done->second != nullptr) {
      answer.cubin = done->second;
      fetched[i] = true;
    } else if (binaries->binaries().contains(sha)) {
      AddNote(answer, absl::StrCat("the cubin the service sent does not match ", sha, "; refused"));
    } else {
      AddNote(answer, "the service no longer stores its cubin (removed since it answered)");
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

void StartupLookup::AttachLocalSources(std::vector<StartupAnswer>& answers) const {
  std::map<std::string, absl::StatusOr<std::shared_ptr<const std::string>>> sources;
  for (StartupAnswer& answer : answers) {
    if (!answer.error.ok() || !answer.response.has_recipe()) continue;
    const std::string& sha = answer.response.recipe().source_sha256();
    auto it = sources.find(sha);
    if (it == sources.end()) {
      absl::StatusOr<std::optional<std::string>> text = local_->GetSource(sha);
      absl::StatusOr<std::shared_ptr<const std::string>> shared = nullptr;
      if (!text.ok()) {
        shared = text.status();
      } else if (text->has_value()) {
        shared = std::make_shared<const std::string>(**std::move(text));
      }
      it = sources.emplace(sha, std::move(shared)).first;
    }
    if (!it->second.ok()) {
      AddNote(answer, it->second.status().message());
    } else if (*it->second == nullptr) {
      AddNote(answer, "its recipe's source is not in the local cache");
    } else {
      answer.recipe_source = *it->second;
    }
  }
}

void StartupLookup::FromLocalCache(const absl::Status& why,
                                   std::vector<StartupAnswer>& answers) const {
  const std::string service = absl::StrCat("the service did not answer (", why.message(), ")");
  std::vector<absl::StatusOr<std::optional<v1::LocalAnswer>>> stored(answers.size(), std::nullopt);
  if (local_) {
    ParallelFor(answers.size(),
                [&](size_t i) { stored[i] = local_->GetAnswer(answers[i].request); });
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    StartupAnswer& answer = answers[i];
    answer.source = AnswerSource::kLocalCache;
    if (!local_) {
      answer.error = absl::Status(
          why.code(),
          absl::StrCat(ProblemContext(answer.request.family(), answer.request.problem()), ": ",
                       service, " and there is no local cache"));
      continue;
    }
    absl::StatusOr<std::optional<v1::LocalAnswer>>& local = stored[i];
    if (!local.ok() || !local->has_value()) {
      answer.error = absl::Status(
          local.ok() ? why.code() : local.status().code(),
          absl::StrCat(
              ProblemContext(answer.request.family(), answer.request.problem()), ": ", service,
              " and the local cache ", local_->directory(),
              local.ok() ? " has no answer for it" : absl::StrCat(": ", local.status().message())));
      continue;
    }
    answer.response = std::move(*(*local)->mutable_response());
    answer.note = absl::StrCat(service, "; answer stored ", (*local)->stored_at(), " by ",
                               (*local)->server());
  }
  if (local_) AttachLocalSources(answers);
  if (!local_ || !options_.cubins) return;
  std::vector<std::string> wanted;
  for (const StartupAnswer& answer : answers) {
    if (answer.error.ok() && HasBinary(answer.response)) {
      wanted.push_back(answer.response.entry().binary_sha256());
    }
  }
  const std::map<std::string, absl::StatusOr<std::shared_ptr<const std::string>>> cubins =
      ReadCubins(wanted);
  for (StartupAnswer& answer : answers) {
    if (!answer.error.ok() || !HasBinary(answer.response)) continue;
    const absl::StatusOr<std::shared_ptr<const std::string>>& cubin =
        cubins.at(answer.response.entry().binary_sha256());
    if (!cubin.ok()) {
      AddNote(answer, cubin.status().message());
    } else if (*cubin == nullptr) {
      AddNote(answer, "its cubin is not in the local cache");
    } else {
      answer.cubin = *cubin;
    }
  }
}

}  // namespace autotune::client
