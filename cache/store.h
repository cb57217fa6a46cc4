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
// database written by a newer schema, and for SQLite errors the SQLite
// message with the file path ("database /x/cache.db: <context>: <sqlite
// message>"): a busy database ABORTED (retry), I/O errors INTERNAL, a full
// disk RESOURCE_EXHAUSTED, corruption DATA_LOSS. Never UNAVAILABLE once open:
// to a gRPC client that code means the server could not be reached.
//
// Family versions: an empty `family_hash` in an EntryKey or in
// ListCandidates() means the family's current hash.
#ifndef AUTOTUNE_CACHE_STORE_H_
#define AUTOTUNE_CACHE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/autotune.pb.h"

namespace autotune::cache {

// The schema this build writes. Databases with a smaller user_version are
// migrated forward on open; larger ones are refused.
inline constexpr int kSchemaVersion = 3;

// Pooled read connections: lookups of a few concurrent callers never wait
// for one, and each holds only a page cache.
inline constexpr int kDefaultReaders = 4;

struct StoreOptions {
  std::string path;               // the SQLite file; its directory must exist
  int readers = kDefaultReaders;  // pooled read connections
  absl::Duration busy_timeout = absl::Seconds(5);
  bool exclusive = true;  // take the "<path>.lock" flock
  // Testing only: stop migrating at this version (0 = kSchemaVersion).
  // Never downgrades: a database already past it stays at its version.
  int migrate_to = 0;
  // The folder Backup() writes into (the daemon's --backup-dir); empty = no
  // backups.
  std::string backup_dir = "";
  // Told, when Open tightens the database or its -wal/-shm file to 0600, of
  // the file and its mode before (the daemon logs it); may be empty.
  std::function<void(const std::string&)> warn = nullptr;
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

// What compiling one variant gave, by its compile key (kernels/compile_request.h).
// Only definite outcomes are kept: OK (with its binary) and COMPILE_ERROR
// (with the log). A timeout is not, since a longer deadline may pass.
struct CompileRecord {
  std::string compile_key;
  v1::VariantStatus status = v1::VARIANT_STATUS_UNSPECIFIED;
  std::string binary_sha256;  // OK only
  std::string lowered_name;   // OK only
  std::string log;
  std::string nvrtc_version;
  std::string arch;
  std::string family;
  std::string family_hash;
  std::string created_at;  // RFC 3339; filled by PutCompile when empty
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
  int64_t families = 0;  // distinct names
  int64_t entries = 0;
  int64_t binaries = 0;
  int64_t binary_bytes = 0;
  int64_t measurements = 0;
  int64_t jobs = 0;
  int64_t database_bytes = 0;  // main file + WAL
  int schema_version = 0;
  // Jobs by v1::JobState and measurements by v1::VariantStatus (the enum
  // numbers), each state or status that has any.
  std::map<int, int64_t> jobs_by_state;
  std::map<int, int64_t> measurements_by_status;
};

// Whether entry `a` was measured better than `b` for the same key: a clean
// measurement beats a contended one; then the lower timing median (an entry
// with no median loses to one with). False when neither is better.
bool MeasuredBetter(const v1::Entry& a, const v1::Entry& b);

// The shortest prefix of a family's content hash that names a version.
inline constexpr size_t kMinHashPrefix = 4;

class Store {
 public:
  // Opens (creating if missing, with mode 0600) and migrates the database.
  // Fails with a one-line reason: unreadable file, not a database, newer
  // schema, held by another process.
  //
  //   "cannot open database <path>: <strerror>"  PosixError's code (base/
  //       posix_error.h): NOT_FOUND (missing directory), PERMISSION_DENIED
  //       (EACCES/EPERM/EROFS), FAILED_PRECONDITION (a directory, or a path
  //       under a file)
  //   "<path> is not an autotune database: file is not a database"
  //   "<path> is not an autotune database: it holds tables but no autotune
  //       schema" / ": its application_id is N, not M"   FAILED_PRECONDITION
  //   "database <path> has schema version 7, newer than this build supports
  //       (2); upgrade autotune"                           FAILED_PRECONDITION
  //   "database <path> is in use by another process (pid N)"
  //                                                        FAILED_PRECONDITION
  //   options.path empty, readers < 1, migrate_to outside 0..kSchemaVersion:
  //                                                        INVALID_ARGUMENT
  //   "database <path> is a symbolic link: refused ..." / "... belongs to
  //       uid N, not to this process's uid M: refused ..."  FAILED_PRECONDITION
  //       (base/private_file.h; the -wal and -shm files alike). A database
  //       of ours open to group or others is tightened to 0600 (options.warn).
  // A file that is refused is left byte-for-byte as it was: every check runs
  // before the first write (switching to WAL rewrites the header).
  // Each migration runs in its own transaction. The "<path>.lock" file
  // (mode 0600, holding the owner's pid) is left in place on close.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);

  // Checkpoints the WAL and closes every connection.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const;
  // The schema version of the open database (kSchemaVersion unless
  // migrate_to was set).
  int schema_version() const;
  // Changes with every write that may move a family's current version
  // (PutFamily, Import with families). Callers that cache what GetFamily
  // returned compare it to know when to read again. Versions themselves
  // (name + content hash) never change once stored.
  int64_t family_generation() const;
  // The same for what a lookup answers: changes with every PutEntry,
  // Invalidate, Import with entries and GarbageCollect that removes
  // binaries. Another process writing the file (which the lock file rules
  // out for daemons) is not seen.
  //
  // Both are bumped just before such a commit and just after it, so they are
  // odd while it is in flight: reads made between two loads that return the
  // same even value saw one committed state (no such commit landed between).
  int64_t entry_generation() const;

  // While alive, the commits that move either generation wait, so reads made
  // meanwhile see one committed state. For readers whose optimistic check
  // (above) keeps failing; hold it for one answer only, since writers wait.
  // Take it with no Store write in flight on this thread.
  class ABSL_SCOPED_LOCKABLE CommitHold {
   public:
    explicit CommitHold(const Store& store) ABSL_SHARED_LOCK_FUNCTION(store.commit_gate());
    ~CommitHold() ABSL_UNLOCK_FUNCTION();
    CommitHold(const CommitHold&) = delete;
    CommitHold& operator=(const CommitHold&) = delete;

   private:
    absl::Mutex* gate_;
  };

  // ---- Families -----------------------------------------------------------
  // Stores `family` under its content hash and makes that hash the current
  // one for its name. Earlier hashes stay, so entries tuned for them remain
  // addressable by hash. `changed` tells whether the current hash moved (true
  // for a new name). The name must match [a-z][a-z0-9_]* (INVALID_ARGUMENT
  // "family.name ..."). Storing an existing version keeps its registered_at;
  // `builtin` is sticky: once a version is marked built-in it stays so.
  absl::StatusOr<FamilyRecord> PutFamily(const v1::KernelFamily& family, bool builtin,
                                         bool* changed = nullptr);
  // The current version of `name`. NOT_FOUND: "unknown family 'name'".
  absl::StatusOr<FamilyRecord> GetFamily(std::string_view name) const;
  // A specific version, by its content hash or a prefix of it (at least
  // kMinHashPrefix hex digits; `autotune kernels` prints 12): NOT_FOUND
  // "family 'gemm' has no version abc123" when no version's hash is or
  // starts with it; INVALID_ARGUMENT naming the versions when a prefix
  // fits several.
  absl::StatusOr<FamilyRecord> GetFamilyVersion(std::string_view name, std::string_view hash) const;
  // Removes every version of family `name`, with its entries, measurements
  // and compile-cache rows when `with_entries` (their cubins are left to
  // GarbageCollect). NOT_FOUND "unknown family 'name'"; FAILED_PRECONDITION
  // naming the counts when entries or measurements exist and `with_entries`
  // is false, and for a built-in family (the daemon registers those again
  // at every start). The counts say what went.
  struct RemovedFamily {
    int64_t versions = 0;
    int64_t entries = 0;
    int64_t measurements = 0;
  };
  absl::StatusOr<RemovedFamily> RemoveFamily(std::string_view name, bool with_entries);
  // Current version of every family, by name, with entry counts (entries of
  // the current hash only). config_count is the product of the parameters'
  // value counts, before constraints.
  absl::StatusOr<std::vector<v1::KernelSummary>> ListFamilies() const;

  // ---- Binaries -----------------------------------------------------------
  // Stores a cubin under sha256(cubin); returns the hex digest. If
  // `binary.sha256` is set it must match (INVALID_ARGUMENT otherwise); an
  // empty cubin is INVALID_ARGUMENT. Storing bytes that are already there
  // keeps the first metadata (nvrtc_version, arch, log) and repairs a stored
  // copy that was damaged on disk.
  absl::StatusOr<std::string> PutBinary(const v1::Binary& binary);
  // Reads a binary and checks its bytes against the key: DATA_LOSS when they
  // differ (the blob is never returned), NOT_FOUND when absent.
  //   "binary <sha> is corrupt: stored bytes hash to <other>; run
  //    `autotune invalidate` on the entries that use it and retune, or import
  //    a good copy of it"
  absl::StatusOr<v1::Binary> GetBinary(std::string_view sha256) const;

  // ---- Compile cache -------------------------------------------------------
  // Stores the outcome of one compile and, for OK, its binary (`cubin`), in
  // one transaction. Replaces an earlier record with the same key.
  // INVALID_ARGUMENT for a record that is neither OK with a cubin nor
  // COMPILE_ERROR; FAILED_PRECONDITION below schema version 3. Returns the
  // binary's sha256 (empty for COMPILE_ERROR), so the caller need not read
  // it back.
  absl::StatusOr<std::string> PutCompile(const CompileRecord& record, const std::string& cubin);
  // The record for `compile_key`, or nullopt. An OK record whose binary is
  // no longer stored counts as absent (the variant must be compiled again).
  absl::StatusOr<std::optional<CompileRecord>> FindCompile(std::string_view compile_key) const;

  // ---- Best entries -------------------------------------------------------
  // Inserts or replaces the entry for its key. The family version and the
  // binary (when binary_sha256 is set) must already be stored.
  // INVALID_ARGUMENT, naming the field: "entry.family is empty",
  // "entry.family_hash is empty", "entry.device.name is empty",
  // "entry.problem.dims is empty", "entry.problem.dtype is not set",
  // "entry.nvrtc_version: ..." (when set, it must be MAJOR.MINOR).
  // NOT_FOUND, naming the field: "entry.family_hash: family 'f' has no stored
  // version H ...", "entry.binary_sha256: binary S is not stored".
  absl::Status PutEntry(const v1::Entry& entry);
  // The entry for exactly this key, or nullopt.
  absl::StatusOr<std::optional<v1::Entry>> FindEntry(const EntryKey& key) const;
  // Every entry of `family` at `family_hash` for `dtype`, on `device` (empty:
  // any device). The candidates a NEAREST lookup chooses from. Ordered by
  // canonical dims text, then device.
  absl::StatusOr<std::vector<v1::Entry>> ListCandidates(std::string_view family,
                                                        std::string_view family_hash,
                                                        v1::DType dtype,
                                                        std::string_view device) const;
  // Entries matching `filter` (every set field narrows), ordered by family,
  // dims, dtype, device. `total` receives the count before limit/offset.
  //  - limit 0 returns no entries, only `total` (a count); a negative limit
  //    means no limit. A negative offset is INVALID_ARGUMENT.
  //  - "dims" order is the canonical dims text ("m=128" < "m=64"); entries
  //    that differ only by family hash follow each other.
  //  - filter.problem: dims (when given) and dtype (when set) narrow
  //    independently, each exactly.
  //  - filter.nvrtc_older_than compares versions numerically ("12.10" >
  //    "12.9"); entries with no nvrtc_version are never "older". Bad version
  //    text is INVALID_ARGUMENT "filter.nvrtc_older_than: ...". Needs schema
  //    version 2 (FAILED_PRECONDITION on a migrate_to=1 store).
  absl::StatusOr<std::vector<v1::Entry>> ListEntries(const v1::EntryFilter& filter, int limit,
                                                     int offset, int64_t* total = nullptr) const;
  // Removes entries matching `filter` and the measurements of the same
  // scope. An empty filter matches everything (callers decide whether to
  // allow that). With dry_run, reports and changes nothing.
  // The measurements removed are:
  //  - without nvrtc_older_than: every measurement whose family, family
  //    hash, device and problem match the filter the way an entry would,
  //    including measurements of problems that have no best entry;
  //  - with nvrtc_older_than: the measurements of the removed entries' own
  //    scopes (family x hash x problem x device). A measurement records no
  //    compiler version of its own, so the entry's decides.
  // Families and binaries stay; GarbageCollect() drops unreferenced binaries.
  absl::StatusOr<InvalidateResult> Invalidate(const v1::EntryFilter& filter, bool dry_run);

  // ---- Measurements -------------------------------------------------------
  // Validates like PutEntry (INVALID_ARGUMENT "measurement.<field> ...",
  // plus "measurement.status is not set"); the family version must be stored
  // (NOT_FOUND). The binary need not be: losing variants' cubins may be
  // dropped. A measurement identical to a stored one is stored once, so
  // re-importing a bundle adds nothing.
  absl::Status AddMeasurement(const v1::Measurement& measurement);
  // Every measurement of one family version x problem x device, oldest first
  // (in the order they were added).
  absl::StatusOr<std::vector<v1::Measurement>> ListMeasurements(const EntryKey& key) const;

  // ---- Jobs ---------------------------------------------------------------
  // Creates a QUEUED job and returns it with its new id (16 random hex
  // digits) and created_at = updated_at = now (RFC 3339, UTC).
  absl::StatusOr<v1::Job> CreateJob(const v1::JobSpec& spec, const std::string& submitted_by = "");
  // Replaces the stored job with `job` (matched by id); NOT_FOUND if absent,
  // INVALID_ARGUMENT for an empty id. An empty created_at keeps the stored
  // one; an empty updated_at becomes now.
  absl::Status UpdateJob(const v1::Job& job);
  // NOT_FOUND: "unknown job 'id'".
  absl::StatusOr<v1::Job> GetJob(std::string_view id) const;
  // Newest first; limit <= 0 lists every job.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(int limit) const;
  // The jobs that have not ended (neither SUCCEEDED, FAILED nor CANCELLED),
  // newest first; ended ones are not read.
  absl::StatusOr<std::vector<v1::Job>> ListUnfinishedJobs() const;

  // ---- Bundles and maintenance --------------------------------------------
  // Applies a whole bundle in one transaction after checking all of it:
  // format_version (kBundleFormatVersion, proto/bundle_parts.h), every
  // family hash, every binary digest, that each entry's family version and
  // binary are in the bundle or already stored. The first
  // problem found fails the call and nothing is written. Existing entries are
  // kept unless `replace` (counted as entries_skipped).
  //
  // Every problem is INVALID_ARGUMENT naming the item, e.g.
  // "format_version is 2; this build reads format_version 1",
  // "families[0].content_hash is 'X' but the descriptor hashes to Y",
  // "binaries[1].sha256 is X but the cubin hashes to Y",
  // "entries[2].binary_sha256: binary S is neither in the bundle nor in the
  // store", "entries[3].device.name is empty" (PutEntry's checks),
  // "entries[5]: same key as entries[1] (...)", "measurements[0].status is
  // not set".
  //
  // Families: an imported version is stored, and becomes the current one of
  // its name only if the name has no current version yet or `replace` is
  // true; so an import never silently changes which source a local name
  // means. Imported versions are not built-in.
  // Counts: families = versions newly stored or made current; binaries and
  // measurements = newly stored (identical ones already there are skipped;
  // a damaged stored binary is repaired); entries = written (new or
  // replaced), entries_skipped = existing ones kept.
  // `merge` says what happens to an entry the store already has: kept,
  // replaced, or whichever MeasuredBetter() prefers (the existing one on a
  // tie). Families move their current version only with kReplace.
  //
  // `families_refused`: when not empty, a bundle that would store a family
  // version the store lacks, or make another version current, fails with
  // PERMISSION_DENIED, checked in the same transaction, nothing written:
  // "families[0]: importing family 'x' version H would add it; <refused>".
  // (The daemon refuses family changes this way to callers below admin.)
  enum class Merge { kKeepExisting, kReplace, kKeepBetter };
  absl::StatusOr<v1::ImportResponse> Import(const v1::CacheBundle& bundle, Merge merge,
                                            std::string_view families_refused = {});
  absl::StatusOr<v1::ImportResponse> Import(const v1::CacheBundle& bundle, bool replace) {
    return Import(bundle, replace ? Merge::kReplace : Merge::kKeepExisting);
  }
  // Entries matching `filter` with the family versions and binaries they
  // use (and their measurements when asked: those of each exported entry's
  // scope). format_version is kBundleFormatVersion; entries come in
  // ListEntries order. Binaries referenced only by measurements are left
  // out. One read snapshot; a damaged binary fails the export with DATA_LOSS
  // rather than export it.
  absl::StatusOr<v1::CacheBundle> Export(const v1::EntryFilter& filter,
                                         bool include_measurements) const;
  // Removes binaries that no entry or measurement references (dry_run:
  // reports what would go). The freed pages go back to the file system.
  absl::StatusOr<GarbageCollectResult> GarbageCollect(bool dry_run);
  absl::StatusOr<StoreStats> Stats() const;

  // An online backup into options.backup_dir, as the new file `name` (a
  // name in that folder, not a path), checked with PRAGMA integrity_check.
  // The file is created 0600 with O_EXCL | O_NOFOLLOW, in a folder that
  // must be this process's user's and closed to group and others' writes,
  // so nothing else can be put in its place. FAILED_PRECONDITION when no
  // folder is configured or the folder is not so; INVALID_ARGUMENT "path:
  // ..." for a name with '/', "." or "..", or a control character;
  // ALREADY_EXISTS when the file exists; DATA_LOSS when the copy fails its
  // check (the copy is removed on any failure).
  absl::StatusOr<v1::BackupResponse> Backup(const std::string& name) const;

  // Whether the database answers now, for health checks: a read through a
  // pooled reader, the write lock taken and given back within the busy
  // timeout (another process holding it for longer fails this: ABORTED),
  // and the file at path() still the one this store has open (removed,
  // renamed or replaced: FAILED_PRECONDITION, since writes would go where no
  // later start finds them). OK, or the reason naming the path.
  absl::Status CheckAvailable() const;

 private:
  class Impl;
  static absl::StatusOr<std::unique_ptr<Store>> OpenFile(const StoreOptions& options);
  absl::Mutex* commit_gate() const;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace autotune::cache

#endif  // AUTOTUNE_CACHE_STORE_H_
