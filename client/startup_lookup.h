// Start-up lookups for inference servers: every (family, problem) a server
// will run, asked in one batch with one deadline, answered by the service
// when it answers in time, else from the local cache (client/local_cache.h).
//
//   StartupOptions options;             // the daemon's default address, 2 s
//   options.device.set_name("NVIDIA H200");
//   options.driver_version = "13.0";    // cuDriverGetVersion, as "major.minor"
//   ASSIGN_OR_RETURN(std::unique_ptr<StartupLookup> lookup, StartupLookup::Create(options));
//   for (const StartupAnswer& answer : lookup->LookupAll(requests)) {
//     if (!answer.error.ok()) ...nothing to go on: answer.error says why...
//     answer.source             // SERVICE or LOCAL_CACHE
//     answer.response.match()   // EXACT / NEAREST / MISS (miss_kind, default_config)
//     answer.cubin              // the entry's binary, sha256 checked, when at hand
//     answer.response.launch()  // the grid and block for the requested problem
//   }
//
// Cost: at most `deadline` waiting on the service, whatever it does (absent,
// slow, hung). One BatchLookup without cubins, then GetBinaries calls, by
// sha256, for the cubins the local cache lacks or holds damaged (a damaged
// cubin is refused and fetched again), or for all of them on a first start
// (the local cache lacks most answers). The cubins come in calls of about a
// MB, two at a time, into shared blocks of memory
// (Client::GetBinariesReceivingCubins). Local answers and cubins
// come from the batch's pack (one mapped file, see local_cache.h) when the
// cache has one for these lookups, else file by file, read and checked on
// several threads. The answers the service gave, and the cubins it sent,
// are written to the local cache by a background thread after LookupAll
// returns (answers the cache holds already are not written again), and
// then the batch's pack (rewritten only when something in it changed), so
// the next start finds them when the service is down; FlushLocalCache()
// waits for that and says what failed, and the destructor waits too.
//
// Per item: an error from the service for one lookup (unknown family, bad
// dims) is that answer's error; the service is not asked again and the
// local cache not read for it. When the service cannot answer, an item with
// no usable local answer gets an error naming the service's failure and the
// local cache's. Thread-safe.
#ifndef AUTOTUNE_CLIENT_STARTUP_LOOKUP_H_
#define AUTOTUNE_CLIENT_STARTUP_LOOKUP_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/local_cache.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

struct StartupOptions {
  // The service; its `timeout` is replaced by `deadline`.
  ClientOptions client;
  // Everything the service may cost, both calls together.
  absl::Duration deadline = absl::Seconds(2);
  // The local cache: empty = LocalCache::DefaultDirectory(); "none" = none.
  std::string local_cache_dir;
  // Set on every request that leaves them empty: the device the server
  // runs on and the CUDA version its driver supports (LookupRequest).
  v1::Device device;
  std::string driver_version;
  // Fetch the entries' cubins (false: configs only).
  bool cubins = true;
  // Ask for each answer's compile recipe (LookupResponse.recipe) and keep
  // its source, so that the kernel loader can compile the config here when
  // no binary loads (or on a MISS with a default config).
  bool recipes = true;
  // Tune-on-miss: ask the service, within the deadline, to tune the
  // problems it answered MISS (all kinds but MISS_DRIVER_TOO_OLD, which
  // tuning does not mend) or PREDICTED (a config never measured there), so
  // that the next start finds them tuned.
  bool tune_on_miss = false;
};

enum class AnswerSource { kService, kLocalCache };
const char* AnswerSourceName(AnswerSource source);  // "service", "local cache"

struct StartupAnswer {
  v1::LookupRequest request;    // as sent (device and driver filled in)
  v1::LookupResponse response;  // cubin cleared: see `cubin`
  AnswerSource source = AnswerSource::kService;
  // The entry's binary when at hand (EXACT, NEAREST), else null:
  // cubin->data(), cubin->size(). Answers that share a binary share its
  // bytes, and nothing is copied on the way: they are the bytes received,
  // or a view into the local cache's mapped pack, kept alive by the answers.
  SharedBytes cubin;
  // The source text of response.recipe when at hand (sha256 checked);
  // answers of one family share it.
  std::shared_ptr<const std::string> recipe_source;
  // Where the answer came from and what went wrong on the way, for people:
  // "the service did not answer (...); answer stored 2026-12-01T10:00:00Z
  // by unix:///run/autotune.sock".
  std::string note;
  absl::Status error;  // no answer (the response is then empty)
  // Tune-on-miss: what the service did with this MISS (queued, already
  // queued, rate limited, ...); unset when not asked or not answered.
  std::optional<v1::TuningRequestResult> tuning;
};

class StartupLookup {
 public:
  // INVALID_ARGUMENT for bad client options; a local cache that cannot be
  // opened is an error too, naming its directory.
  static absl::StatusOr<std::unique_ptr<StartupLookup>> Create(const StartupOptions& options);

  // One answer per request, in order. Never fails as a whole.
  std::vector<StartupAnswer> LookupAll(const std::vector<v1::LookupRequest>& requests);

  // Waits for the local cache writes of the last LookupAll; the first
  // failure, if any (a start is served anyway).
  absl::Status FlushLocalCache();
  ~StartupLookup();

  const LocalCache* local_cache() const { return local_ ? &*local_ : nullptr; }

 private:
  StartupLookup(StartupOptions options, std::unique_ptr<Client> client,
                std::optional<LocalCache> local);
  // The answers from the local cache when the service failed with `why`;
  // `pack` is the batch's pack (null: none), whose answers are taken;
  // `pack_note` says what was wrong with it, if anything.
  void FromLocalCache(const absl::Status& why, LocalCache::Pack* pack, const std::string& pack_note,
                      std::vector<StartupAnswer>& answers) const;
  // The pack `pack_key`, when there is a local cache and it has a sound
  // one; else nullopt, and `note` says what was wrong with it, if anything.
  std::optional<LocalCache::Pack> ReadPack(const std::string& pack_key, std::string& note) const;
  // Fills `recipe_source` of the answers with a recipe from the local cache.
  void AttachLocalSources(std::vector<StartupAnswer>& answers) const;
  // Fills `answers[i].cubin` from the local cache when `read_local` (`pack`
  // first, when not null) or, for those it lacks, from the service before
  // `deadline` (marking them `fetched`).
  void AttachCubins(absl::Time deadline, const LocalCache::Pack* pack, bool read_local,
                    std::vector<StartupAnswer>& answers, std::vector<bool>& fetched);
  // The local cubins `shas`: from `pack` when it has them, the others read
  // and checked on a few threads (null when absent).
  std::map<std::string, absl::StatusOr<SharedBytes>> ReadCubins(
      const std::vector<std::string>& shas, const LocalCache::Pack* pack) const;
  // Writes the answers, and the cubins `fetched` from the service, to the
  // local cache on the writer thread, then the batch's pack `pack_key`.
  void KeepInBackground(const std::vector<StartupAnswer>& answers, const std::vector<bool>& fetched,
                        const std::string& pack_key);
  // Asks the service to tune the misses, before `deadline`.
  void RequestTuning(absl::Time deadline, std::vector<StartupAnswer>& answers);

  const StartupOptions options_;
  std::unique_ptr<Client> client_;
  std::optional<LocalCache> local_;
  absl::Mutex writer_mu_;
  std::thread writer_ ABSL_GUARDED_BY(writer_mu_);
  absl::Status write_status_ ABSL_GUARDED_BY(writer_mu_);
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_STARTUP_LOOKUP_H_
