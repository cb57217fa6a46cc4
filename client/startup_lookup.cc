#include "client/startup_lookup.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/parallel_for.h"
#include "base/sha256.h"
#include "base/timestamp.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

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

std::map<std::string, absl::StatusOr<SharedBytes>> StartupLookup::ReadCubins(
    const std::vector<std::string>& shas, const LocalCache::Pack* pack) const {
  std::map<std::string, absl::StatusOr<SharedBytes>> found;
  std::vector<std::pair<const std::string*, absl::StatusOr<SharedBytes>*>> work;
  for (const std::string& sha : shas) {
    auto [it, added] = found.emplace(sha, nullptr);
    if (!added) continue;
    if (pack != nullptr) {
      if (auto packed = pack->cubins.find(sha); packed != pack->cubins.end()) {
        it->second = packed->second;
        continue;
      }
    }
    work.emplace_back(&it->first, &it->second);
  }
  ParallelFor(work.size(), [&](size_t i) {
    absl::StatusOr<std::optional<std::string>> cubin = local_->GetCubin(*work[i].first);
    if (!cubin.ok()) {
      *work[i].second = cubin.status();
    } else if (cubin->has_value()) {
      *work[i].second = ShareBytes(**std::move(cubin));
    }
  });
  return found;
}

std::optional<LocalCache::Pack> StartupLookup::ReadPack(const std::string& pack_key,
                                                        std::string& note) const {
  if (!local_) return std::nullopt;
  absl::StatusOr<std::optional<LocalCache::Pack>> pack = local_->GetPack(pack_key);
  if (!pack.ok()) {
    note = absl::StrCat(pack.status().message(), "; read file by file");
    return std::nullopt;
  }
  return *std::move(pack);
}

std::vector<StartupAnswer> StartupLookup::LookupAll(
    const std::vector<v1::LookupRequest>& requests) {
  const absl::Time deadline = absl::Now() + options_.deadline;
  std::vector<StartupAnswer> answers(requests.size());
  if (requests.empty()) return answers;
  // The requests go into the batch, and move to the answers once it is
  // answered.
  v1::BatchLookupRequest batch;
  batch.mutable_lookups()->Reserve(static_cast<int>(requests.size()));
  for (const v1::LookupRequest& asked : requests) {
    v1::LookupRequest& request = *batch.add_lookups();
    request = asked;
    request.clear_include_cubin();
    if (!request.has_device()) *request.mutable_device() = options_.device;
    if (request.driver_version().empty()) request.set_driver_version(options_.driver_version);
  }
  // The batch's pack in the local cache (LocalCache::PackKey). It is read
  // when needed, not while the service is asked: on another thread, its
  // index would be parsed into memory that thread's malloc arena maps
  // afresh each time, which costs more than the overlap saves.
  std::string pack_key;
  int kept_locally = 0;
  int sampled = 0;
  if (local_) {
    pack_key = LocalCache::PackKey(batch.lookups());
    // A first start on this host (most answers not kept here, judged on
    // up to 16 of them): every cubin is fetched, without looking for it in
    // the local cache first. Otherwise only those the local cache lacks.
    const size_t step = std::max<size_t>(1, answers.size() / 16);
    for (size_t i = 0; i < answers.size(); i += step, ++sampled) {
      struct stat info;
      const std::string path = local_->AnswerPath(batch.lookups(static_cast<int>(i)));
      if (stat(path.c_str(), &info) == 0) ++kept_locally;
    }
  }
  const bool first_start = 2 * kept_locally < sampled;
  batch.set_include_recipe(options_.recipes);

  absl::StatusOr<v1::BatchLookupResponse> answered = client_->BatchLookup(batch, options_.deadline);
  if (answered.ok() && answered->results_size() != batch.lookups_size()) {
    answered = absl::InternalError(absl::StrCat("the service answered ", answered->results_size(),
                                                " of ", batch.lookups_size(), " lookups"));
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    answers[i].request = std::move(*batch.mutable_lookups(static_cast<int>(i)));
  }
  if (!answered.ok()) {
    std::string pack_note;
    std::optional<LocalCache::Pack> pack = ReadPack(pack_key, pack_note);
    FromLocalCache(answered.status(), pack ? &*pack : nullptr, pack_note, answers);
    return answers;
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
  }
  if (options_.cubins) {
    // A damaged pack only costs time: its cubins are read file by file.
    std::string ignored;
    std::optional<LocalCache::Pack> pack;
    if (!first_start) pack = ReadPack(pack_key, ignored);
    AttachCubins(deadline, pack ? &*pack : nullptr, !first_start, answers, fetched);
  }
  if (options_.tune_on_miss) RequestTuning(deadline, answers);
  KeepInBackground(answers, fetched, pack_key);
  return answers;
}

void StartupLookup::KeepInBackground(const std::vector<StartupAnswer>& answers,
                                     const std::vector<bool>& fetched,
                                     const std::string& pack_key) {
  if (!local_) return;
  struct Kept {
    size_t position;  // in the batch
    v1::LocalAnswer answer;
    SharedBytes cubin;                          // the answer's, for the pack
    bool fetched = false;                       // the cubin came from the service now: to write
    std::shared_ptr<const std::string> source;  // the recipe's, from the service
  };
  auto kept = std::make_shared<std::vector<Kept>>();
  const std::string now = Timestamp();
  for (size_t i = 0; i < answers.size(); ++i) {
    const StartupAnswer& answer = answers[i];
    if (!answer.error.ok()) continue;
    Kept k;
    k.position = i;
    k.cubin = answer.cubin;
    k.fetched = fetched[i];
    *k.answer.mutable_request() = answer.request;
    *k.answer.mutable_response() = answer.response;
    k.answer.set_server(client_->address());
    k.answer.set_stored_at(now);
    if (answer.source == AnswerSource::kService) k.source = answer.recipe_source;
    kept->push_back(std::move(k));
  }
  absl::MutexLock lock(&writer_mu_);
  // One writer at a time: the new one waits for the one before it (calls
  // from several threads chain their writers, never overwrite one).
  writer_ = std::thread(
      [this, kept, pack_key, lookups = answers.size(), previous = std::move(writer_)]() mutable {
        if (previous.joinable()) previous.join();
        absl::Status first;
        int failed = 0;
        std::set<std::string> cubins_written;
        std::set<std::string> sources_written;
        // The pack: each answer as its file holds it now, and the cubins.
        std::vector<LocalCache::PackedAnswer> packed(lookups);
        std::map<std::string, SharedBytes> cubins;
        for (const Kept& k : *kept) {
          // An answer the cache holds already is not written again.
          FileStamp stamp;
          absl::StatusOr<std::optional<v1::LocalAnswer>> there =
              local_->GetAnswer(k.answer.request(), &stamp);
          const auto holds_it = [&] {
            return there.ok() && there->has_value() &&
                   google::protobuf::util::MessageDifferencer::Equals((*there)->response(),
                                                                      k.answer.response());
          };
          absl::Status stored;
          if (!holds_it()) {
            stored = local_->PutAnswer(k.answer);
            // Read back for the pack: the file may be another writer's by now.
            if (stored.ok()) there = local_->GetAnswer(k.answer.request(), &stamp);
          }
          if (stored.ok() && holds_it()) {
            packed[k.position] = {.key = LocalCache::AnswerKey(k.answer.request()),
                                  .answer = **std::move(there),
                                  .stamp = stamp};
          }
          const std::string& sha = k.answer.response().entry().binary_sha256();
          if (stored.ok() && k.cubin != nullptr) {
            cubins.emplace(sha, k.cubin);
            if (k.fetched && cubins_written.insert(sha).second) {
              stored = local_->PutCubin(sha, *k.cubin);
            }
          }
          const std::string& source_sha = k.answer.response().recipe().source_sha256();
          if (stored.ok() && k.source != nullptr && sources_written.insert(source_sha).second) {
            stored = local_->PutSource(source_sha, *k.source);
          }
          if (!stored.ok() && failed++ == 0) first = stored;
        }
        absl::Status pack =
            kept->empty() ? absl::OkStatus() : local_->PutPack(pack_key, packed, cubins);
        absl::MutexLock lock(&writer_mu_);
        write_status_ =
            failed == 0
                ? pack
                : absl::Status(first.code(),
                               absl::StrCat(failed, " answers not kept in the local cache; first: ",
                                            first.message()));
      });
}

void StartupLookup::AttachCubins(absl::Time deadline, const LocalCache::Pack* pack, bool read_local,
                                 std::vector<StartupAnswer>& answers, std::vector<bool>& fetched) {
  std::vector<std::string> wanted;
  for (const StartupAnswer& answer : answers) {
    if (answer.error.ok() && HasBinary(answer.response)) {
      wanted.push_back(answer.response.entry().binary_sha256());
    }
  }
  std::map<std::string, absl::StatusOr<SharedBytes>> local;
  if (local_ && read_local) local = ReadCubins(wanted, pack);
  std::vector<std::string> fetch;  // each sha256 once, in the answers' order
  std::set<std::string> asked;
  std::vector<size_t> to_fetch;
  for (size_t i = 0; i < answers.size(); ++i) {
    StartupAnswer& answer = answers[i];
    if (!answer.error.ok() || !HasBinary(answer.response)) continue;
    const std::string& sha = answer.response.entry().binary_sha256();
    auto it = local.find(sha);
    if (it != local.end() && it->second.ok() && *it->second != nullptr) {
      answer.cubin = *it->second;
      continue;
    }
    if (it != local.end() && !it->second.ok()) {
      AddNote(answer, absl::StrCat(it->second.status().message(), "; fetched again"));
    }
    if (asked.insert(sha).second) fetch.push_back(sha);
    to_fetch.push_back(i);
  }
  if (to_fetch.empty()) return;
  const absl::Duration left = deadline - absl::Now();
  absl::StatusOr<ReceivedBinaries> binaries =
      left > absl::ZeroDuration() ? client_->GetBinariesReceivingCubins(fetch, left)
                                  : absl::StatusOr<ReceivedBinaries>(absl::DeadlineExceededError(
                                        "no time was left for the cubins"));
  // Each cubin received checked once (null: refused), then shared by its
  // answers.
  if (binaries.ok()) {
    std::vector<std::pair<const std::string*, SharedBytes*>> checks;
    for (auto& [sha, cubin] : binaries->binaries) checks.emplace_back(&sha, &cubin);
    ParallelFor(checks.size(), [&](size_t i) {
      SharedBytes& cubin = *checks[i].second;
      if (cubin != nullptr && Sha256Hex(*cubin) != *checks[i].first) cubin = nullptr;
    });
  }
  for (size_t i : to_fetch) {
    StartupAnswer& answer = answers[i];
    const std::string& sha = answer.response.entry().binary_sha256();
    if (!binaries.ok()) {
      AddNote(answer, absl::StrCat("its cubin was not fetched: ", binaries.status().message()));
      continue;
    }
    if (auto failure = binaries->failed.find(sha); failure != binaries->failed.end()) {
      AddNote(answer, absl::StrCat("its cubin was not fetched: ", failure->second.message()));
      continue;
    }
    auto it = binaries->binaries.find(sha);
    if (it == binaries->binaries.end()) {
      AddNote(answer, "the service no longer stores its cubin (removed since it answered)");
    } else if (it->second == nullptr) {
      AddNote(answer, absl::StrCat("the cubin the service sent does not match ", sha, "; refused"));
    } else {
      answer.cubin = it->second;
      fetched[i] = true;
    }
  }
}

void StartupLookup::RequestTuning(absl::Time deadline, std::vector<StartupAnswer>& answers) {
  v1::RequestTuningRequest request;
  std::vector<size_t> asked;
  for (size_t i = 0; i < answers.size(); ++i) {
    const StartupAnswer& answer = answers[i];
    // A PREDICTED config was never measured here: tuning measures it.
    if (answer.error.ok() && ((answer.response.match() == v1::MISS &&
                               answer.response.miss_kind() != v1::MISS_DRIVER_TOO_OLD) ||
                              answer.response.match() == v1::PREDICTED)) {
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

void StartupLookup::FromLocalCache(const absl::Status& why, LocalCache::Pack* pack,
                                   const std::string& pack_note,
                                   std::vector<StartupAnswer>& answers) const {
  const std::string service = absl::StrCat("the service did not answer (", why.message(), ")");
  std::vector<absl::StatusOr<std::optional<v1::LocalAnswer>>> stored(answers.size(), std::nullopt);
  // The batch's pack first; the answers it lacks (or holds older than
  // answers/ does) are read file by file.
  if (local_) {
    std::vector<size_t> unpacked;
    const bool packed = pack != nullptr && pack->answers.size() == answers.size();
    for (size_t i = 0; i < answers.size(); ++i) {
      if (packed && pack->answers[i].has_value()) {
        stored[i] = std::move(pack->answers[i]);
      } else {
        unpacked.push_back(i);
      }
    }
    ParallelFor(unpacked.size(), [&](size_t k) {
      stored[unpacked[k]] = local_->GetAnswer(answers[unpacked[k]].request);
    });
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
    if (!pack_note.empty()) AddNote(answer, pack_note);
  }
  if (local_) AttachLocalSources(answers);
  if (!local_ || !options_.cubins) return;
  std::vector<std::string> wanted;
  for (const StartupAnswer& answer : answers) {
    if (answer.error.ok() && HasBinary(answer.response)) {
      wanted.push_back(answer.response.entry().binary_sha256());
    }
  }
  const std::map<std::string, absl::StatusOr<SharedBytes>> cubins = ReadCubins(wanted, pack);
  for (StartupAnswer& answer : answers) {
    if (!answer.error.ok() || !HasBinary(answer.response)) continue;
    const absl::StatusOr<SharedBytes>& cubin = cubins.at(answer.response.entry().binary_sha256());
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
