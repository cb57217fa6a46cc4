// Answers Lookup and BatchLookup from the cache: EXACT, NEAREST or MISS.
//
// Matching rules (the contract clients rely on):
// - The family must be known (NOT_FOUND otherwise). Without a family_hash the
//   family's current content hash is used, so entries tuned for an older
//   version of a family's source are never served for the new one.
// - The problem must pass ValidateProblem (proto/problem.h), the same check
//   a job's problems pass (INVALID_ARGUMENT naming the field otherwise).
// - Device: entries match on device name. An empty name means "any device"
//   and is answered only when one device matches (FAILED_PRECONDITION lists
//   the devices otherwise). A non-zero compute_capability or sm_count in the
//   request must equal the entry's when the entry records one.
// - NEAREST policy: only dimensions the family marks `bucketed` may differ;
//   every other dimension, the dtype, the device and the family hash must be
//   equal. Among those entries the one with the smallest
//   sum over bucketed dims of |log2(tuned / requested)| wins; on a tie the
//   entry tuned for larger values wins (a config tuned for batch 16 is a
//   safer stand-in for batch 12 than one tuned for batch 8), then the
//   smaller canonical dims key. The answer lists each differing dimension.
// - PREDICTED (with predictions, see the constructor): for a named device
//   with no EXACT or NEAREST entry, the config predictions.h ranks fastest
//   among the winners tuned there, resolved for the requested problem; never
//   for an exact-only request. `entry` is that winner's (its problem the one
//   it was tuned for), `launch` its config for the requested problem,
//   `prediction` what the model learned from, and default_config the
//   family's default as on a MISS (for a client that does not know the kind).
//   Where fewer problems than the model needs are tuned on the device, and
//   the request gives its compute capability, the device of that capability
//   with the most tuned problems predicts: `prediction.device` and the entry
//   name it (an entry of one device is never EXACT on another).
// - A MISS carries a typed miss_kind and a miss_reason for people: no entry,
//   only entries tuned on another device, only entries of older versions of
//   the family's source, or an exact-only request that refused a neighbour.
//   The counts that word the reason are best effort: a MISS is never turned
//   into an error by them.
// - With include_cubin, and in GetBinaries, the binary is read and checked
//   against its sha256; a corrupt binary fails the lookup (the call, in
//   GetBinaries) with DATA_LOSS and is never served. Checked binaries are
//   then kept in memory (CubinCache, up to kMaxCachedCubinBytes) and served
//   from there: a copy damaged on disk after it was read is found by the
//   next read from the store (export, a daemon restarted), while lookups and
//   GetBinaries go on serving the bytes that were checked. GetBinaries lists
//   as `missing` what neither memory nor the store holds: a binary garbage
//   collected from the store may still be sent while it is kept, its bytes
//   the same as ever (they are named by their sha256).
//
// - EXACT and NEAREST answers carry `launch`, the entry's config resolved for
//   the requested problem. A NEAREST entry whose config does not fit the
//   requested dims (a constraint or a launch limit fails) is a MISS
//   (MISS_NEAREST_UNFIT, with the entry and what failed).
// - With include_recipe (on the request, or the batch) the answer carries
//   the CompileRecipe of its config: the entry's, else on a MISS the
//   default config. Single lookups hold the source in the recipe; a batch
//   holds each source once in `sources`.
//
// - One state of the cache per answer: a Lookup, and a BatchLookup as a
//   whole, is answered from one committed state, never half before and half
//   after an import, an invalidation or a new entry. It is answered again
//   when a commit landed meanwhile (Store::entry_generation()), and after a
//   few such tries with those commits held off (Store::CommitHold).
//
// Thread-safe. What a lookup needs of a family (its current content hash,
// dimensions, dtypes and source) is kept in memory and read again
// when the store's family generation moves; entries found by exact key are
// kept until the store's entry generation moves (up to kMaxCachedEntries),
// so a repeated EXACT lookup reads nothing from SQLite.
#ifndef AUTOTUNE_SERVICE_LOOKUP_LOOKUP_RESOLVER_H_
#define AUTOTUNE_SERVICE_LOOKUP_LOOKUP_RESOLVER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "service/lookup/cubin_cache.h"

namespace autotune::service {

// Entries an EXACT-lookup cache holds before it starts over.
inline constexpr size_t kMaxCachedEntries = 200000;

// Most lookups one BatchLookup may carry.
inline constexpr int kMaxBatchLookups = 100000;
// The CPU time of the daemon's one BatchLookup may use (the thread that
// answers it, every try of Consistently's included). An EXACT answer costs
// microseconds, so a client's start-up batch is answered whole; a MISS
// resolves the family's default config for the problem (with expressions
// parsed once per family: ConfigResolverPool), tens of microseconds, so a
// batch of 100,000 distinct misses fits; a family whose expressions cost
// more stops at the budget. What is left when the budget is spent is answered item by item
// with RESOURCE_EXHAUSTED (see BatchLookup).
inline constexpr absl::Duration kBatchLookupCpuBudget = absl::Seconds(1);

struct LookupCounters {
  std::atomic<int64_t> exact{0};
  std::atomic<int64_t> nearest{0};
  std::atomic<int64_t> miss{0};
  std::atomic<int64_t> predicted{0};
};

// The NEAREST choice among `candidates` for `requested` dims of a family
// whose bucketed dimensions are `bucketed` (see the policy above). nullopt
// when no candidate agrees on every non-bucketed dimension.
struct NearestChoice {
  size_t index = 0;  // into candidates
  double log2_distance = 0;
  std::vector<v1::DimDistance> distance;
};
std::optional<NearestChoice> ChooseNearest(const v1::Problem& requested,
                                           const std::vector<std::string>& bucketed,
                                           const std::vector<v1::Entry>& candidates);

// Why a binary built by NVRTC `nvrtc_version` ("13.0") cannot run on a
// driver that supports CUDA `client_driver` ("12.8"); nullopt when it can,
// or when either version is not "major.minor".
std::optional<std::string> DriverTooOld(absl::string_view client_driver,
                                        absl::string_view nvrtc_version);

// kernels::ResolveConfig for one family, its expressions parsed once per
// target arch and kept: a resolver is taken for one call and put back, so
// concurrent lookups each have their own and a parse is paid only when
// every kept one is in use. Thread-safe; `family` must outlive it.
class ConfigResolverPool {
 public:
  explicit ConfigResolverPool(const v1::KernelFamily* family) : family_(family) {}
  absl::StatusOr<kernels::Variant> Resolve(const v1::Problem& problem, const v1::Config& config,
                                           const kernels::DeviceLimits& limits = {}) const;

 private:
  const v1::KernelFamily* family_;
  mutable absl::Mutex mu_;
  // By the limits' key (arch, threads, shared memory): the idle resolvers.
  mutable std::map<std::string, std::vector<kernels::FamilyConfigResolver>> idle_
      ABSL_GUARDED_BY(mu_);
};

// What a lookup needs of one family version.
struct FamilyView {
  std::string content_hash;
  v1::KernelFamily family;  // without `source`
  std::vector<std::string> bucketed;
  std::string source;  // family.source, kept apart for recipes
  std::string source_sha256;
  // The tuned kernel's parameter sizes for each of the family's dtypes
  // (LookupResponse.parameter_bytes).
  std::map<v1::DType, std::vector<int64_t>> parameter_bytes;
  ConfigResolverPool resolvers{&family};  // a view is never copied or moved
};

class Predictions;

class LookupResolver {
 public:
  // With `predictions` (outliving this), a lookup that would MISS for a
  // named device answers PREDICTED where a model of the family on that
  // device has been learned (predictions.h); the miss_reason of a MISS says
  // why there is none.
  explicit LookupResolver(const cache::Store* store, Predictions* predictions = nullptr)
      : store_(store), predictions_(predictions), cubins_(store, kMaxCachedCubinBytes) {}

  absl::StatusOr<v1::LookupResponse> Lookup(const v1::LookupRequest& request) const;

  // Each lookup is answered on its own: a bad or failing item gets its error
  // in its result and does not fail the batch. Binaries are returned once
  // each in `binaries` when include_cubin is set (on the batch or the item).
  // INVALID_ARGUMENT for more than kMaxBatchLookups items, before any is
  // read. Items are answered in order until `cpu_budget` of this thread's
  // CPU time is spent; each item after that gets error_code
  // RESOURCE_EXHAUSTED and "lookups[812]: not answered: this BatchLookup
  // used its 1s of the daemon's CPU on its first 811 items; send the rest
  // in another call", so a client answered in part asks again for exactly
  // the items that carry that code.
  absl::StatusOr<v1::BatchLookupResponse> BatchLookup(
      const v1::BatchLookupRequest& request,
      absl::Duration cpu_budget = kBatchLookupCpuBudget) const;

  // The stored cubins of `request.sha256`, each read once and checked
  // against its digest. INVALID_ARGUMENT for a digest that is not 64
  // lowercase hex digits ("sha256[3]: ...") or more than kMaxBatchLookups
  // of them; a digest not stored is listed in `missing`; a damaged binary
  // or a store error fails the call (DATA_LOSS, or the store's status).
  absl::StatusOr<v1::GetBinariesResponse> GetBinaries(const v1::GetBinariesRequest& request) const;

  const LookupCounters& counters() const { return counters_; }

 private:
  // Lookup and BatchLookup, each read as it goes.
  absl::StatusOr<v1::LookupResponse> LookupOnce(const v1::LookupRequest& request) const;
  // Stops answering at `cpu_deadline`, this thread's CPU clock.
  absl::StatusOr<v1::BatchLookupResponse> BatchLookupOnce(const v1::BatchLookupRequest& request,
                                                          absl::Duration cpu_deadline,
                                                          absl::Duration cpu_budget) const;
  // Adds a final answer to counters_.
  void Count(const v1::LookupResponse& response) const;

  // Resolves without reading the cubin: the entry (ResolveEntry), then the
  // client's driver checked against it, and a MISS given the family's
  // default config.
  absl::StatusOr<v1::LookupResponse> Resolve(const v1::LookupRequest& request,
                                             absl::string_view field, bool include_recipe) const;
  // `family` is set to the family version the answer was read for (read
  // once per answer).
  absl::StatusOr<v1::LookupResponse> ResolveEntry(const v1::LookupRequest& request,
                                                  absl::string_view field,
                                                  std::shared_ptr<const FamilyView>* family) const;

  // The family version a request names: its family_hash, or the current one.
  absl::StatusOr<std::shared_ptr<const FamilyView>> Family(const std::string& name,
                                                           const std::string& hash) const;

  const cache::Store* store_;
  Predictions* const predictions_;  // null: no PREDICTED answers
  const CubinCache cubins_;         // for include_cubin
  mutable LookupCounters counters_;
  mutable absl::Mutex cache_mu_;
  mutable int64_t cached_generation_ ABSL_GUARDED_BY(cache_mu_) = -1;
  // Family name -> current content hash, valid for cached_generation_.
  mutable absl::flat_hash_map<std::string, std::string> current_ ABSL_GUARDED_BY(cache_mu_);
  // "name/hash" -> view; versions never change once stored.
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const FamilyView>> versions_
      ABSL_GUARDED_BY(cache_mu_);
  // Entries looked up by exact key, valid for cached_entry_generation_;
  // null: the store has none (a miss asks SQLite once per generation).
  mutable int64_t cached_entry_generation_ ABSL_GUARDED_BY(cache_mu_) = -1;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const v1::Entry>> entries_
      ABSL_GUARDED_BY(cache_mu_);
  // Candidate lists and entry counts, valid for cached_entry_generation_ too;
  // candidate_entries_ counts the entries the lists hold.
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const std::vector<v1::Entry>>>
      candidates_ ABSL_GUARDED_BY(cache_mu_);
  mutable size_t candidate_entries_ ABSL_GUARDED_BY(cache_mu_) = 0;
  mutable absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> counts_
      ABSL_GUARDED_BY(cache_mu_);

  // Store::ListCandidates, kept like entries_ (a MISS and a NEAREST read
  // every entry of the family's dtype; a batch of misses would read them
  // once per item).
  absl::StatusOr<std::shared_ptr<const std::vector<v1::Entry>>> Candidates(
      const std::string& family, const std::string& family_hash, v1::DType dtype,
      const std::string& device) const;
  // Entries of `family` in all its versions, and in version `family_hash`,
  // kept the same way: they word a MISS's reason.
  absl::StatusOr<std::pair<int64_t, int64_t>> EntryCounts(const std::string& family,
                                                          const std::string& family_hash) const;

  // The caches' protocol, written once for the family caches (current_,
  // versions_) and the entry caches (entries_, candidates_, counts_). Read
  // the store's generation before the store, so that a write landing in
  // between leaves that answer uncached; serve from the cache only when it
  // is valid for the generation just read (CachedAt); keep an answer read
  // from the store (KeepAt) only if no commit was in flight (an even
  // generation) and, when the caches are older or `full`, only if the store
  // is still at that generation, after emptying them and making them valid
  // for it (a write that landed after ours was read may already be in the
  // answer, but an older cache must not survive it).
  enum class Caches { kFamilies, kEntries };
  int64_t StoreGeneration(Caches caches) const;
  bool CachedAt(Caches caches, int64_t generation) const ABSL_SHARED_LOCKS_REQUIRED(cache_mu_);
  bool KeepAt(Caches caches, int64_t generation, bool full = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);

  // The entry stored under exactly this key, or nullopt.
  absl::StatusOr<std::optional<v1::Entry>> FindExact(const cache::EntryKey& key) const;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_LOOKUP_LOOKUP_RESOLVER_H_
