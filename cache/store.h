// The persistent config cache: one SQLite file holding kernel families,
// compiled binaries (content-addressed by sha256), best entries,
// measurements and jobs.
//
//   ASSIGN_OR_RETURN(auto store, Store::Open({.path = "/var/lib/autotune/cache.db"}));
//   RETURN_IF_ERROR(store->Import(bundle, /*replace=*/false).status());
//   ASSIGN_OR_RETURN(std::optional<v1::Entry> entry, store->FindEntry(key));
//
// Concurrency: a Store is thread-safe. Writes go through one connection (one
// writer, serialised by a mutex); reads use a pool of connections in WAL
// mode, so readers never wait for a writer and see committed data only.
// Every write is one transaction: a failed call changes nothing.
//
// Ownership: one process owns a database file. Open() takes an exclusive
// flock on "<path>.lock" and fails with FAILED_PRECONDITION naming the
// holder's pid when another process has it.
//
// Errors: INVALID_ARGUMENT names the field ("entries[2].binary_sha256: ..."),
// NOT_FOUND for unknown families / binaries / jobs, DATA_LOSS when stored
// bytes do not match their sha256 (never served), FAILED_PRECONDITION for a
// database written by a newer schema, UNAVAILABLE / INTERNAL for SQLite
// errors, with the SQLite message and the file path.
#ifndef AUTOTUNE_CACHE_STORE_H_
#define AUTOTUNE_CACHE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/autotune.pb.h"

namespace autotune::cache {

// The schema this build writes. Databases with a smaller user_version are
// migrated forward on open; larger ones are refused.
inline constexpr int kSchemaVersion = 2;

struct StoreOptions {
  std::string path;              // the SQLite file; its directory must exist
  int readers = 4;               // pooled read connections
  absl::Duration busy_timeout = absl::Seconds(5);
  bool exclusive = true;         // take the "<path>.lock" flock
  // Testing only: stop migrating at this version (0 = kSchemaVersion).
  int migrate_to = 0;
};

// A family as stored: the descriptor and its content hash.
struct FamilyRecord {
  v1::KernelFamily family;
  std::string content_hash;
  bool builtin = false;
  std::string registered_at;  // RFC 3339
};

// Identifies one best entry.
struct EntryKey {
  std::string family;
  std::string family_hash;
  v1::Problem problem;
  std::string device;  // device name
};

struct InvalidateResult {
  std::vector<v1::Entry> removed;
  int64_t measurements_removed = 0;
};

struct GarbageCollectResult {
  int64_t binaries_removed = 0;
  int64_t bytes_freed = 0;
};

struct StoreStats {
  int64_t families = 0;        // distinct names
  int64_t entries = 0;
  int64_t binaries = 0;
  int64_t binary_bytes = 0;
  int64_t measurements = 0;
  int64_t jobs = 0;
  int64_t database_bytes = 0;  // main file + WAL
  int schema_version = 0;
};

class Store {
 public:
  // Opens (creating if missing, with mode 0600) and migrates the database.
  // Fails with a one-line reason: unreadable file, not a database, newer
  // schema, held by another process.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);

  // Checkpoints the WAL and closes every connection.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const;
  // The schema version of the open database (kSchemaVersion unless
  // migrate_to was set).
  int schema_version() const;

  // ---- Families -----------------------------------------------------------
  // Stores `family` under its content hash and makes that hash the current
  // one for its name. Earlier hashes stay, so entries tuned for them remain
  // addressable by hash. `changed` tells whether the current hash moved.
  absl::StatusOr<FamilyRecord> PutFamily(const v1::KernelFamily& family,
                                         bool builtin, bool* changed = nullptr);
  // The current version of `name`. NOT_FOUND: "unknown family 'name'".
  absl::StatusOr<FamilyRecord> GetFamily(std::string_view name) const;
  // A specific version. NOT_FOUND when that hash was never stored.
  absl::StatusOr<FamilyRecord> GetFamilyVersion(std::string_view name,
                                                std::string_view hash) const;
  // Current version of every family, by name, with entry counts.
  absl::StatusOr<std::vector<v1::KernelSummary>> ListFamilies() const;

  // ---- Binaries -----------------------------------------------------------
  // Stores a cubin under sha256(cubin); returns the hex digest. If
  // `binary.sha256` is set it must match (INVALID_ARGUMENT otherwise).
  absl::StatusOr<std::string> PutBinary(const v1::Binary& binary);
  // Reads a binary and checks its bytes against the key: DATA_LOSS when they
  // differ (the blob is never returned), NOT_FOUND when absent.
  absl::StatusOr<v1::Binary> GetBinary(std::string_view sha256) const;

  // ---- Best entries -------------------------------------------------------
  // Inserts or replaces the entry for its key. The family version and the
  // binary (when binary_sha256 is set) must already be stored.
  absl::Status PutEntry(const v1::Entry& entry);
  // The entry for exactly this key, or nullopt.
  absl::StatusOr<std::optional<v1::Entry>> FindEntry(const EntryKey& key) const;
  // Every entry of `family` at `family_hash` for `dtype`, on `device` (empty:
  // any device). The candidates a NEAREST lookup chooses from.
  absl::StatusOr<std::vector<v1::Entry>> ListCandidates(std::string_view family,
                                                        std::string_view family_hash,
                                                        v1::DType dtype,
                                                        std::string_view device) const;
  // Entries matching `filter` (every set field narrows), ordered by family,
  // dims, dtype, device. `total` receives the count before limit/offset.
  absl::StatusOr<std::vector<v1::Entry>> ListEntries(const v1::EntryFilter& filter,
                                                     int limit, int offset,
                                                     int64_t* total = nullptr) const;
  // Removes entries matching `filter` and the measurements of the same
  // scope. An empty filter matches everything (callers decide whether to
  // allow that). With dry_run, reports and changes nothing.
  absl::StatusOr<InvalidateResult> Invalidate(const v1::EntryFilter& filter, bool dry_run);

  // ---- Measurements -------------------------------------------------------
  absl::Status AddMeasurement(const v1::Measurement& measurement);
  // Every measurement of one family version x problem x device, oldest first.
  absl::StatusOr<std::vector<v1::Measurement>> ListMeasurements(const EntryKey& key) const;

  // ---- Jobs ---------------------------------------------------------------
  // Creates a QUEUED job and returns it with its new id.
  absl::StatusOr<v1::Job> CreateJob(const v1::JobSpec& spec);
  // Replaces the stored job with `job` (matched by id); NOT_FOUND if absent.
  absl::Status UpdateJob(const v1::Job& job);
  absl::StatusOr<v1::Job> GetJob(std::string_view id) const;
  // Newest first.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(int limit) const;

  // ---- Bundles and maintenance --------------------------------------------
  // Applies a whole bundle in one transaction after checking all of it:
  // format_version, every family hash, every binary digest, that each entry's
  // family version and binary are in the bundle or already stored. The first
  // problem found fails the call and nothing is written. Existing entries are
  // kept unless `replace` (counted as entries_skipped).
  absl::StatusOr<v1::ImportResponse> Import(const v1::CacheBundle& bundle, bool replace);
  // Entries matching `filter` with the family versions and binaries they
  // use (and their measurements when asked).
  absl::StatusOr<v1::CacheBundle> Export(const v1::EntryFilter& filter,
                                         bool include_measurements) const;
  // Removes binaries that no entry or measurement references.
  absl::StatusOr<GarbageCollectResult> GarbageCollect(bool dry_run);
  absl::StatusOr<StoreStats> Stats() const;

 private:
  class Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autotune::cache

#endif  // AUTOTUNE_CACHE_STORE_H_
