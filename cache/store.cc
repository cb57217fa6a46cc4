#include "cache/store.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/posix_error.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "cache/schema.h"
#include "cache/sqlite.h"
#include "cache/strings.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/bundle_parts.h"
#include "proto/problem.h"

namespace autotune::cache {
namespace {

// What a database that cannot be written to needs, for the error.
constexpr char kNeedsReadWrite[] =
    " (the database must be readable and writable by this user, and its folder writable: "
    "SQLite creates the -wal and -shm files beside it)";

using sqlite::Connection;
using sqlite::Statement;
using sqlite::Transaction;

std::string Now() {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
}

// The exclusive flock on "<path>.lock", held for the Store's lifetime. The
// file is left in place on close: removing it would let a third process lock
// a fresh inode while a second still holds the old one.
class LockFile {
 public:
  LockFile() = default;
  LockFile(LockFile&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  LockFile& operator=(LockFile&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~LockFile() {
    if (fd_ >= 0) close(fd_);
  }

  static absl::StatusOr<LockFile> Acquire(const std::string& database_path) {
    const std::string path = absl::StrCat(database_path, ".lock");
    LockFile lock;
    lock.fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock.fd_ < 0) return PosixError(absl::StrCat("cannot open lock file ", path), errno);
    if (flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return PosixError(absl::StrCat("cannot lock ", path), errno);
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", database_path, " is in use by another process (pid ", lock.ReadPid(), ")"));
    }
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(lock.fd_, 0) != 0 ||
        pwrite(lock.fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      return PosixError(absl::StrCat("cannot write lock file ", path), errno);
    }
    return lock;
  }

 private:
  // The holder writes its pid right after locking; a reader racing that
  // write sees an empty file.
  std::string ReadPid() const {
    char buffer[32];
    const ssize_t n = pread(fd_, buffer, sizeof(buffer) - 1, 0);
    int64_t pid = 0;
    if (n <= 0 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buffer, n)), &pid)) {
      return "unknown";
    }
    return absl::StrCat(pid);
  }

  int fd_ = -1;
};

template <typename Message>
absl::StatusOr<Message> ParseStored(absl::string_view blob, absl::string_view what,
                                    const std::string& path) {
  Message message;
  if (!message.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
    return absl::DataLossError(
        absl::StrCat("database ", path, ": a stored ", what, " does not parse"));
  }
  return message;
}

std::string SerializeDeterministic(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream output(&bytes);
    google::protobuf::io::CodedOutputStream coded(&output);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }  // the streams trim `bytes` to what was written when they go
  return bytes;
}

// ---- Validation of arguments (no database access) --------------------------

absl::Status ValidateFamilyName(absl::string_view name, absl::string_view field) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (!IsFamilyName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", name, "' must match [a-z][a-z0-9_]*"));
  }
  return absl::OkStatus();
}

// The fields that make up an entry's or a measurement's key.
absl::Status ValidateKeyFields(absl::string_view prefix, const std::string& family,
                               const std::string& family_hash, const v1::Problem& problem,
                               const v1::Device& device) {
  const auto missing = [&](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".", field, " ", what));
  };
  if (family.empty()) return missing("family", "is empty");
  if (family_hash.empty()) return missing("family_hash", "is empty");
  if (device.name().empty()) return missing("device.name", "is empty");
  if (problem.dims().empty()) return missing("problem.dims", "is empty");
  if (problem.dtype() == v1::DTYPE_UNSPECIFIED) return missing("problem.dtype", "is not set");
  return absl::OkStatus();
}

absl::Status ValidateEntryFields(const v1::Entry& entry, absl::string_view prefix) {
  RETURN_IF_ERROR(ValidateKeyFields(prefix, entry.family(), entry.family_hash(), entry.problem(),
                                    entry.device()));
  if (!entry.nvrtc_version().empty()) {
    absl::StatusOr<int64_t> number = NvrtcVersionNumber(entry.nvrtc_version());
    if (!number.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ".nvrtc_version: ", number.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateMeasurementFields(const v1::Measurement& measurement,
                                       absl::string_view prefix) {
  RETURN_IF_ERROR(ValidateKeyFields(prefix, measurement.family(), measurement.family_hash(),
                                    measurement.problem(), measurement.device()));
  if (measurement.status() == v1::VARIANT_STATUS_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".status is not set"));
  }
  return absl::OkStatus();
}

// Returns the digest the binary is stored under.
absl::StatusOr<std::string> ValidateBinary(const v1::Binary& binary, absl::string_view prefix,
                                           bool require_sha256) {
  if (binary.cubin().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".cubin is empty"));
  }
  std::string digest = Sha256Hex(binary.cubin());
  if (binary.sha256().empty()) {
    if (require_sha256) return absl::InvalidArgumentError(absl::StrCat(prefix, ".sha256 is empty"));
  } else if (binary.sha256() != digest) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".sha256 is ", binary.sha256(), " but the cubin hashes to ", digest));
  }
  return digest;
}

std::string EntryKeyText(const v1::Entry& entry) {
  return absl::StrCat(entry.family(), "@", entry.family_hash(), " ",
                      FormatDims(entry.problem().dims()), " ", DTypeName(entry.problem().dtype()),
                      " on ", entry.device().name());
}

// ---- Entry filters ------------------------------------------------------------
//
// Each set field adds a fixed SQL fragment with a fixed parameter number;
// values are bound, never spliced. ?7 and ?8 are left for LIMIT / OFFSET.

struct FilterClause {
  const v1::EntryFilter* filter = nullptr;
  std::string dims_key;              // set when filter->problem has dims
  std::optional<int64_t> nvrtc_num;  // set when filter has nvrtc_older_than
};

absl::StatusOr<FilterClause> MakeFilterClause(const v1::EntryFilter& filter, int schema_version) {
  FilterClause clause;
  clause.filter = &filter;
  if (!filter.problem().dims().empty()) clause.dims_key = FormatDims(filter.problem().dims());
  if (!filter.nvrtc_older_than().empty()) {
    absl::StatusOr<int64_t> number = NvrtcVersionNumber(filter.nvrtc_older_than());
    if (!number.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter.nvrtc_older_than: ", number.status().message()));
    }
    if (schema_version < 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "filter.nvrtc_older_than needs schema version 2; the database is at ", schema_version));
    }
    clause.nvrtc_num = *number;
  }
  return clause;
}

// `measurements` selects the measurements of the same scope instead of the
// entries themselves (see Store::Invalidate in the header).
std::string FilterWhere(const FilterClause& clause, bool measurements) {
  const v1::EntryFilter& filter = *clause.filter;
  std::vector<absl::string_view> terms;
  if (!filter.family().empty()) terms.push_back("family = ?1");
  if (!filter.family_hash().empty()) terms.push_back("family_hash = ?2");
  if (!filter.device().empty()) terms.push_back("device = ?3");
  if (!clause.dims_key.empty()) terms.push_back("dims_key = ?4");
  if (filter.problem().dtype() != v1::DTYPE_UNSPECIFIED) terms.push_back("dtype = ?5");
  if (clause.nvrtc_num.has_value()) {
    terms.push_back(measurements
                        ? "EXISTS (SELECT 1 FROM entries e WHERE e.family = measurements.family"
                          " AND e.family_hash = measurements.family_hash"
                          " AND e.dims_key = measurements.dims_key"
                          " AND e.dtype = measurements.dtype AND e.device = measurements.device"
                          " AND e.nvrtc_version_num > 0 AND e.nvrtc_version_num < ?6)"
                        : "nvrtc_version_num > 0 AND nvrtc_version_num < ?6");
  }
  if (terms.empty()) return std::string();
  return absl::StrCat(" WHERE ", absl::StrJoin(terms, " AND "));
}

void BindFilter(Statement& statement, const FilterClause& clause) {
  const v1::EntryFilter& filter = *clause.filter;
  if (!filter.family().empty()) statement.BindText(1, filter.family());
  if (!filter.family_hash().empty()) statement.BindText(2, filter.family_hash());
  if (!filter.device().empty()) statement.BindText(3, filter.device());
  if (!clause.dims_key.empty()) statement.BindText(4, clause.dims_key);
  if (filter.problem().dtype() != v1::DTYPE_UNSPECIFIED) {
    statement.BindInt(5, filter.problem().dtype());
  }
  if (clause.nvrtc_num.has_value()) statement.BindInt(6, *clause.nvrtc_num);
}

constexpr absl::string_view kEntryOrder = " ORDER BY family, dims_key, dtype, device, family_hash";

// ---- Reads (any connection) ---------------------------------------------------

absl::StatusOr<std::vector<v1::Entry>> CollectEntries(Statement& statement, int column,
                                                      const std::string& path) {
  std::vector<v1::Entry> entries;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, statement.Step());
    if (!row) return entries;
    ASSIGN_OR_RETURN(v1::Entry entry,
                     ParseStored<v1::Entry>(statement.ColumnBlob(column), "entry", path));
    entries.push_back(std::move(entry));
  }
}

absl::StatusOr<int64_t> CountEntries(Connection& db, const FilterClause& clause) {
  ASSIGN_OR_RETURN(Statement count,
                   db.Prepare(absl::StrCat("SELECT COUNT(*) FROM entries",
                                           FilterWhere(clause, /*measurements=*/false))));
  BindFilter(count, clause);
  ASSIGN_OR_RETURN(bool row, count.Step());
  return row ? count.ColumnInt(0) : 0;
}

// limit < 0: no limit.
absl::StatusOr<std::vector<v1::Entry>> SelectEntries(Connection& db, const FilterClause& clause,
                                                     int64_t limit, int64_t offset) {
  ASSIGN_OR_RETURN(Statement select,
                   db.Prepare(absl::StrCat("SELECT entry FROM entries",
                                           FilterWhere(clause, /*measurements=*/false), kEntryOrder,
                                           " LIMIT ?7 OFFSET ?8")));
  BindFilter(select, clause);
  select.BindInt(7, limit).BindInt(8, offset);
  return CollectEntries(select, 0, db.path());
}

absl::StatusOr<std::optional<FamilyRecord>> ReadFamilyVersion(Connection& db,
                                                              absl::string_view name,
                                                              absl::string_view hash) {
  ASSIGN_OR_RETURN(Statement select,
                   db.Prepare("SELECT builtin, registered_at, descriptor FROM family_versions"
                              " WHERE name = ?1 AND content_hash = ?2"));
  select.BindText(1, name).BindText(2, hash);
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return std::nullopt;
  FamilyRecord record;
  ASSIGN_OR_RETURN(record.family, ParseStored<v1::KernelFamily>(select.ColumnBlob(2),
                                                                "family descriptor", db.path()));
  record.content_hash = std::string(hash);
  record.builtin = select.ColumnInt(0) != 0;
  record.registered_at = select.ColumnText(1);
  return record;
}

absl::StatusOr<std::optional<std::string>> ReadCurrentHash(Connection& db, absl::string_view name) {
  ASSIGN_OR_RETURN(Statement select,
                   db.Prepare("SELECT current_hash FROM families WHERE name = ?1"));
  select.BindText(1, name);
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return std::nullopt;
  return select.ColumnText(0);
}

absl::StatusOr<bool> RowExists(Connection& db, absl::string_view sql, absl::string_view key1,
                               absl::string_view key2 = {}) {
  ASSIGN_OR_RETURN(Statement select, db.Prepare(sql));
  select.BindText(1, key1);
  if (!key2.empty()) select.BindText(2, key2);
  return select.Step();
}

absl::StatusOr<bool> FamilyVersionExists(Connection& db, absl::string_view name,
                                         absl::string_view hash) {
  return RowExists(db, "SELECT 1 FROM family_versions WHERE name = ?1 AND content_hash = ?2", name,
                   hash);
}

absl::StatusOr<bool> BinaryExists(Connection& db, absl::string_view sha256) {
  return RowExists(db, "SELECT 1 FROM binaries WHERE sha256 = ?1", sha256);
}

// NOT_FOUND when absent, DATA_LOSS when the stored bytes no longer hash to
// the key: a damaged cubin loaded into a GPU process fails in ways far from
// here, so it is never handed out.
absl::StatusOr<v1::Binary> ReadBinary(Connection& db, absl::string_view sha256) {
  ASSIGN_OR_RETURN(Statement select,
                   db.Prepare("SELECT nvrtc_version, arch, compile_log, family, family_hash, cubin"
                              " FROM binaries WHERE sha256 = ?1"));
  select.BindText(1, sha256);
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("binary ", sha256, " not found"));
  const absl::string_view cubin = select.ColumnBlob(5);
  const std::string actual = Sha256Hex(cubin);
  if (actual != sha256) {
    return absl::DataLossError(absl::StrCat(
        "binary ", sha256, " is corrupt: stored bytes hash to ", actual,
        "; run `autotune invalidate` on the entries that use it and retune, or import a good "
        "copy of it"));
  }
  v1::Binary binary;
  binary.set_sha256(std::string(sha256));
  binary.set_cubin(std::string(cubin));
  binary.set_nvrtc_version(select.ColumnText(0));
  binary.set_arch(select.ColumnText(1));
  binary.set_compile_log(select.ColumnText(2));
  binary.set_family(select.ColumnText(3));
  binary.set_family_hash(select.ColumnText(4));
  return binary;
}

// An empty family_hash resolves to the family's current hash inside the
// statement, so hot lookups stay one query.
constexpr absl::string_view kHashOrCurrent =
    "COALESCE(NULLIF(?2, ''), (SELECT current_hash FROM families WHERE name = ?1))";

absl::StatusOr<std::vector<v1::Measurement>> SelectMeasurements(Connection& db,
                                                                const EntryKey& key) {
  ASSIGN_OR_RETURN(Statement select,
                   db.Prepare(absl::StrCat("SELECT measurement FROM measurements"
                                           " WHERE family = ?1 AND family_hash = ",
                                           kHashOrCurrent,
                                           " AND dims_key = ?3 AND dtype = ?4 AND device = ?5"
                                           " ORDER BY id")));
  select.BindText(1, key.family)
      .BindText(2, key.family_hash)
      .BindText(3, FormatDims(key.problem.dims()))
      .BindInt(4, key.problem.dtype())
      .BindText(5, key.device);
  std::vector<v1::Measurement> measurements;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return measurements;
    ASSIGN_OR_RETURN(v1::Measurement measurement,
                     ParseStored<v1::Measurement>(select.ColumnBlob(0), "measurement", db.path()));
    measurements.push_back(std::move(measurement));
  }
}

// ---- Writes (the writer connection, inside a transaction) ---------------------

// Returns whether the version was new.
absl::StatusOr<bool> WriteFamilyVersion(Connection& db, const v1::KernelFamily& family,
                                        const std::string& hash, bool builtin) {
  ASSIGN_OR_RETURN(bool exists, FamilyVersionExists(db, family.name(), hash));
  if (exists) {
    // Built-in is sticky: the daemon re-registers its families at start-up,
    // possibly after an import stored the same content.
    if (builtin) {
      ASSIGN_OR_RETURN(Statement update, db.Prepare("UPDATE family_versions SET builtin = 1"
                                                    " WHERE name = ?1 AND content_hash = ?2"));
      update.BindText(1, family.name()).BindText(2, hash);
      RETURN_IF_ERROR(update.Run());
    }
    return false;
  }
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT INTO family_versions"
                              " (name, content_hash, builtin, registered_at, descriptor)"
                              " VALUES (?1, ?2, ?3, ?4, ?5)"));
  insert.BindText(1, family.name())
      .BindText(2, hash)
      .BindInt(3, builtin ? 1 : 0)
      .BindText(4, Now())
      .BindBlob(5, family.SerializeAsString());
  RETURN_IF_ERROR(insert.Run());
  return true;
}

absl::Status SetCurrentHash(Connection& db, absl::string_view name, absl::string_view hash) {
  ASSIGN_OR_RETURN(
      Statement upsert,
      db.Prepare("INSERT INTO families (name, current_hash) VALUES (?1, ?2)"
                 " ON CONFLICT (name) DO UPDATE SET current_hash = excluded.current_hash"));
  upsert.BindText(1, name).BindText(2, hash);
  return upsert.Run();
}

// Returns whether the binary was new. A stored copy whose bytes differ (it
// can only be damaged: the key is their hash) is overwritten, which heals it.
absl::StatusOr<bool> WriteBinary(Connection& db, const v1::Binary& binary,
                                 const std::string& sha256) {
  ASSIGN_OR_RETURN(bool exists, BinaryExists(db, sha256));
  if (exists) {
    ASSIGN_OR_RETURN(Statement heal,
                     db.Prepare("UPDATE binaries SET cubin = ?2, size = ?3"
                                " WHERE sha256 = ?1 AND (size != ?3 OR cubin != ?2)"));
    heal.BindText(1, sha256)
        .BindBlob(2, binary.cubin())
        .BindInt(3, static_cast<int64_t>(binary.cubin().size()));
    RETURN_IF_ERROR(heal.Run());
    return false;
  }
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT INTO binaries (sha256, size, nvrtc_version, arch, family,"
                              " family_hash, created_at, compile_log, cubin)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
  insert.BindText(1, sha256)
      .BindInt(2, static_cast<int64_t>(binary.cubin().size()))
      .BindText(3, binary.nvrtc_version())
      .BindText(4, binary.arch())
      .BindText(5, binary.family())
      .BindText(6, binary.family_hash())
      .BindText(7, Now())
      .BindText(8, binary.compile_log())
      .BindBlob(9, binary.cubin());
  RETURN_IF_ERROR(insert.Run());
  return true;
}

// Returns whether the entry was written: false when one with the same key
// exists and `replace` is false. Fields must have been validated.
absl::StatusOr<bool> WriteEntry(Connection& db, int schema_version, const v1::Entry& entry,
                                bool replace) {
  // Schema 1 (only ever open here through migrate_to, in tests) has no
  // nvrtc_version_num column.
  static constexpr absl::string_view kInsert1 =
      "INSERT INTO entries (family, family_hash, dims_key, dtype, device, compute_capability,"
      " sm_count, binary_sha256, tuned_at, entry) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
  static constexpr absl::string_view kInsert2 =
      "INSERT INTO entries (family, family_hash, dims_key, dtype, device, compute_capability,"
      " sm_count, binary_sha256, tuned_at, entry, nvrtc_version_num)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
  static constexpr absl::string_view kConflict =
      " ON CONFLICT (family, family_hash, dims_key, dtype, device) DO ";
  static constexpr absl::string_view kUpdate1 =
      "UPDATE SET compute_capability = excluded.compute_capability,"
      " sm_count = excluded.sm_count, binary_sha256 = excluded.binary_sha256,"
      " tuned_at = excluded.tuned_at, entry = excluded.entry";
  const bool v2 = schema_version >= 2;
  std::string sql = absl::StrCat(v2 ? kInsert2 : kInsert1, kConflict);
  if (!replace) {
    absl::StrAppend(&sql, "NOTHING");
  } else {
    absl::StrAppend(&sql, kUpdate1, v2 ? ", nvrtc_version_num = excluded.nvrtc_version_num" : "");
  }
  ASSIGN_OR_RETURN(Statement insert, db.Prepare(sql));
  insert.BindText(1, entry.family())
      .BindText(2, entry.family_hash())
      .BindText(3, FormatDims(entry.problem().dims()))
      .BindInt(4, entry.problem().dtype())
      .BindText(5, entry.device().name())
      .BindInt(6, entry.device().compute_capability())
      .BindInt(7, entry.device().sm_count())
      .BindTextOrNull(8, entry.binary_sha256())
      .BindText(9, entry.tuned_at())
      .BindBlob(10, entry.SerializeAsString());
  if (v2) {
    int64_t number = 0;
    if (!entry.nvrtc_version().empty()) {
      ASSIGN_OR_RETURN(number, NvrtcVersionNumber(entry.nvrtc_version()));
    }
    insert.BindInt(11, number);
  }
  RETURN_IF_ERROR(insert.Run());
  return db.changes() > 0;
}

// Returns whether the measurement was new (an identical one is stored once,
// which makes importing the same bundle twice harmless).
absl::StatusOr<bool> WriteMeasurement(Connection& db, const v1::Measurement& measurement) {
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT INTO measurements (family, family_hash, dims_key, dtype,"
                              " device, config_key, status, phase, binary_sha256, job_id,"
                              " measured_at, digest, measurement)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                              " ON CONFLICT (digest) DO NOTHING"));
  const std::string bytes = SerializeDeterministic(measurement);
  insert.BindText(1, measurement.family())
      .BindText(2, measurement.family_hash())
      .BindText(3, FormatDims(measurement.problem().dims()))
      .BindInt(4, measurement.problem().dtype())
      .BindText(5, measurement.device().name())
      .BindText(6, FormatDims(measurement.config().params()))
      .BindInt(7, measurement.status())
      .BindInt(8, measurement.phase())
      .BindTextOrNull(9, measurement.binary_sha256())
      .BindText(10, measurement.job_id())
      .BindText(11, measurement.measured_at())
      .BindText(12, Sha256Hex(bytes))
      .BindBlob(13, bytes);
  RETURN_IF_ERROR(insert.Run());
  return db.changes() > 0;
}

absl::Status CheckFamilyStored(Connection& db, absl::string_view field, absl::string_view family,
                               absl::string_view hash) {
  ASSIGN_OR_RETURN(bool exists, FamilyVersionExists(db, family, hash));
  if (!exists) {
    return absl::NotFoundError(absl::StrCat(field, ": family '", family, "' has no stored version ",
                                            hash, " (register the family first)"));
  }
  return absl::OkStatus();
}

int64_t FileSize(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : 0;
}

}  // namespace

class Store::Impl {
 public:
  explicit Impl(const StoreOptions& options) : options(options) {}

  ~Impl() {
    absl::MutexLock lock(&writer_mu);
    // Folds the WAL back into the main file so the database is one
    // self-contained file after close (copyable, backup-able).
    if (writer != nullptr) writer->Execute("PRAGMA wal_checkpoint(TRUNCATE)").IgnoreError();
  }

  const StoreOptions options;
  int schema_version = 0;
  // Each bumped just before and just after the commit of a write that can
  // change a family's current version, or what a lookup answers (entries,
  // binaries), so each is odd while such a commit is in flight; see
  // Store::family_generation() and Store::entry_generation().
  std::atomic<int64_t> family_generation{0};
  std::atomic<int64_t> entry_generation{0};
  // Held shared by a Store::CommitHold, exclusively around those commits.
  mutable absl::Mutex commit_gate;

  // Commits `transaction` inside the gate, with the given generations odd
  // for the duration.
  absl::Status CommitVisible(Transaction& transaction, bool families, bool entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu) {
    absl::MutexLock hold(&commit_gate);
    if (families) family_generation.fetch_add(1);
    if (entries) entry_generation.fetch_add(1);
    absl::Status committed = transaction.Commit();
    if (families) family_generation.fetch_add(1);
    if (entries) entry_generation.fetch_add(1);
    return committed;
  }
  LockFile lock;  // released last, after every connection has closed
  // The database file's identity when opened (CheckAvailable()).
  dev_t device = 0;
  ino_t inode = 0;
  absl::Mutex writer_mu;
  std::unique_ptr<Connection> writer ABSL_GUARDED_BY(writer_mu);
  // Declared after the writer so its connections close first and the writer,
  // closing last, removes the WAL.
  sqlite::ConnectionPool readers;
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::path() const { return impl_->options.path; }
int Store::schema_version() const { return impl_->schema_version; }

int64_t Store::family_generation() const { return impl_->family_generation.load(); }

int64_t Store::entry_generation() const { return impl_->entry_generation.load(); }

absl::Mutex* Store::commit_gate() const { return &impl_->commit_gate; }

Store::CommitHold::CommitHold(const Store& store) : gate_(store.commit_gate()) {
  gate_->ReaderLock();
}

Store::CommitHold::~CommitHold() { gate_->ReaderUnlock(); }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenFile(options);
  // A writable file in a read-only folder opens, and fails at the first
  // write, when SQLite cannot create the -wal file beside it.
  if (!store.ok() && absl::StrContains(store.status().message(), "readonly database")) {
    return absl::Status(store.status().code(),
                        absl::StrCat(store.status().message(), kNeedsReadWrite));
  }
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> Store::OpenFile(const StoreOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return absl::InvalidArgumentError("options.path is empty");
  if (options.readers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.readers is ", options.readers, "; at least 1 is needed"));
  }
  if (options.migrate_to < 0 || options.migrate_to > kSchemaVersion) {
    return absl::InvalidArgumentError(absl::StrCat("options.migrate_to is ", options.migrate_to,
                                                   "; expected 0..", kSchemaVersion));
  }
  const int target = options.migrate_to == 0 ? kSchemaVersion : options.migrate_to;

  // Created here rather than by SQLite so that it is owner-only from the
  // first byte; SQLite gives its -wal and -shm files the same mode. Opening
  // read-write also turns an unreadable or unwritable path into an errno
  // message naming the path.
  struct stat file {};
  {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int error = errno;
      absl::Status status = PosixError(absl::StrCat("cannot open database ", path), error);
      if (error == EACCES || error == EPERM || error == EROFS) {
        return absl::Status(status.code(), absl::StrCat(status.message(), kNeedsReadWrite));
      }
      return status;
    }
    // The file's identity, for CheckAvailable(), from the file just opened.
    const int statted = fstat(fd, &file);
    const int stat_error = errno;
    // Closed before SQLite opens the file: closing any descriptor of a file
    // drops this process's POSIX locks on it, SQLite's included.
    close(fd);
    if (statted != 0) return PosixError(absl::StrCat("cannot open database ", path), stat_error);
  }

  auto impl = std::make_unique<Impl>(options);
  impl->device = file.st_dev;
  impl->inode = file.st_ino;
  if (options.exclusive) {
    ASSIGN_OR_RETURN(impl->lock, LockFile::Acquire(path));
  }

  ASSIGN_OR_RETURN(std::unique_ptr<Connection> writer,
                   Connection::Open(path, Connection::Mode::kReadWrite, options.busy_timeout));
  // The first statement reads the schema from page 1, so a file that is not
  // a SQLite database fails here, before anything is written to it.
  absl::StatusOr<int64_t> tables = writer->QueryInt("SELECT COUNT(*) FROM sqlite_master");
  if (!tables.ok()) {
    if (writer->last_error_code() == SQLITE_NOTADB) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is not an autotune database: file is not a database"));
    }
    return tables.status();
  }
  ASSIGN_OR_RETURN(int64_t application_id, writer->QueryInt("PRAGMA application_id"));
  ASSIGN_OR_RETURN(int64_t version, writer->QueryInt("PRAGMA user_version"));
  if (application_id != 0 && application_id != schema::kApplicationId) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not an autotune database: its application_id is ", application_id,
                     ", not ", schema::kApplicationId));
  }
  if (version == 0 && *tables > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not an autotune database: it holds tables but no autotune schema"));
  }
  // Checked before anything below writes (journal_mode=WAL rewrites the
  // header): a newer database is left exactly as it was.
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("database ", path, " has schema version ",
                                                      version, ", newer than this build supports (",
                                                      kSchemaVersion, "); upgrade autotune"));
  }
  if (version == 0) {
    // Only possible while the file has no tables; lets GarbageCollect hand
    // freed pages back to the file system.
    RETURN_IF_ERROR(writer->Execute("PRAGMA auto_vacuum = INCREMENTAL"));
  }
  ASSIGN_OR_RETURN(std::string journal_mode, writer->QueryText("PRAGMA journal_mode = WAL"));
  if (absl::AsciiStrToLower(journal_mode) != "wal") {
    return absl::UnavailableError(absl::StrCat(
        "database ", path, ": cannot use WAL mode (journal mode stays '", journal_mode, "')"));
  }
  RETURN_IF_ERROR(writer->Execute("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON"));
  RETURN_IF_ERROR(schema::MigrateTo(*writer, target));
  ASSIGN_OR_RETURN(version, writer->QueryInt("PRAGMA user_version"));
  impl->schema_version = static_cast<int>(version);

  for (int i = 0; i < options.readers; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Connection> reader,
                     Connection::Open(path, Connection::Mode::kReadOnly, options.busy_timeout));
    impl->readers.Add(std::move(reader));
  }
  {
    absl::MutexLock lock(&impl->writer_mu);
    impl->writer = std::move(writer);
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

// ---- Families ---------------------------------------------------------------

absl::StatusOr<FamilyRecord> Store::PutFamily(const v1::KernelFamily& family, bool builtin,
                                              bool* changed) {
  RETURN_IF_ERROR(ValidateFamilyName(family.name(), "family.name"));
  const std::string hash = FamilyContentHash(family);
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  RETURN_IF_ERROR(WriteFamilyVersion(db, family, hash, builtin).status());
  ASSIGN_OR_RETURN(std::optional<std::string> previous, ReadCurrentHash(db, family.name()));
  RETURN_IF_ERROR(SetCurrentHash(db, family.name(), hash));
  ASSIGN_OR_RETURN(std::optional<FamilyRecord> record, ReadFamilyVersion(db, family.name(), hash));
  if (!record.has_value()) return absl::InternalError("family version vanished while storing it");
  RETURN_IF_ERROR(impl_->CommitVisible(transaction, /*families=*/true, /*entries=*/false));
  if (changed != nullptr) *changed = previous != hash;
  return *std::move(record);
}

absl::StatusOr<FamilyRecord> Store::GetFamily(std::string_view std_name) const {
  const absl::string_view name = ToAbsl(std_name);
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare("SELECT v.content_hash, v.builtin, v.registered_at, v.descriptor"
                               " FROM families f JOIN family_versions v"
                               " ON v.name = f.name AND v.content_hash = f.current_hash"
                               " WHERE f.name = ?1"));
  select.BindText(1, name);
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown family '", name, "'"));
  FamilyRecord record;
  ASSIGN_OR_RETURN(record.family, ParseStored<v1::KernelFamily>(select.ColumnBlob(3),
                                                                "family descriptor", db->path()));
  record.content_hash = select.ColumnText(0);
  record.builtin = select.ColumnInt(1) != 0;
  record.registered_at = select.ColumnText(2);
  return record;
}

absl::StatusOr<FamilyRecord> Store::GetFamilyVersion(std::string_view std_name,
                                                     std::string_view std_hash) const {
  const absl::string_view name = ToAbsl(std_name);
  const absl::string_view hash = ToAbsl(std_hash);
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(std::optional<FamilyRecord> record, ReadFamilyVersion(*db, name, hash));
  if (!record.has_value()) {
    return absl::NotFoundError(absl::StrCat("family '", name, "' has no version ", hash));
  }
  return *std::move(record);
}

absl::StatusOr<std::vector<v1::KernelSummary>> Store::ListFamilies() const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare("SELECT f.name, v.content_hash, v.builtin, v.registered_at,"
                               " v.descriptor, (SELECT COUNT(*) FROM entries e"
                               " WHERE e.family = f.name AND e.family_hash = f.current_hash)"
                               " FROM families f JOIN family_versions v"
                               " ON v.name = f.name AND v.content_hash = f.current_hash"
                               " ORDER BY f.name"));
  std::vector<v1::KernelSummary> summaries;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return summaries;
    ASSIGN_OR_RETURN(
        v1::KernelFamily family,
        ParseStored<v1::KernelFamily>(select.ColumnBlob(4), "family descriptor", db->path()));
    v1::KernelSummary& summary = summaries.emplace_back();
    summary.set_name(select.ColumnText(0));
    summary.set_content_hash(select.ColumnText(1));
    summary.set_builtin(select.ColumnInt(2) != 0);
    summary.set_registered_at(select.ColumnText(3));
    summary.set_entry_count(select.ColumnInt(5));
    summary.set_description(family.description());
    *summary.mutable_dims() = family.dims();
    *summary.mutable_dtypes() = family.dtypes();
    summary.set_config_count(ConfigCount(family));
  }
}

// ---- Binaries -----------------------------------------------------------------

absl::StatusOr<std::string> Store::PutBinary(const v1::Binary& binary) {
  ASSIGN_OR_RETURN(std::string sha256, ValidateBinary(binary, "binary", /*require_sha256=*/false));
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  RETURN_IF_ERROR(WriteBinary(db, binary, sha256).status());
  RETURN_IF_ERROR(transaction.Commit());
  return sha256;
}

absl::StatusOr<v1::Binary> Store::GetBinary(std::string_view sha256) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  return ReadBinary(*db, ToAbsl(sha256));
}

// ---- Compile cache ------------------------------------------------------------

absl::StatusOr<std::string> Store::PutCompile(const CompileRecord& record,
                                              const std::string& cubin) {
  if (impl_->schema_version < 3) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the compile cache needs schema version 3; the database is at ", impl_->schema_version));
  }
  if (record.compile_key.empty()) return absl::InvalidArgumentError("compile.compile_key is empty");
  const bool ok = record.status == v1::OK;
  if (!ok && record.status != v1::COMPILE_ERROR) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile.status: only OK and COMPILE_ERROR are kept, not ",
                     v1::VariantStatus_Name(record.status)));
  }
  if (ok && cubin.empty()) return absl::InvalidArgumentError("compile: OK without a cubin");
  if (record.nvrtc_version.empty()) {
    return absl::InvalidArgumentError("compile.nvrtc_version is empty");
  }
  if (record.arch.empty()) return absl::InvalidArgumentError("compile.arch is empty");
  std::string sha256;
  v1::Binary binary;
  if (ok) {
    binary.set_cubin(cubin);
    binary.set_nvrtc_version(record.nvrtc_version);
    binary.set_arch(record.arch);
    binary.set_compile_log(record.log);
    binary.set_family(record.family);
    binary.set_family_hash(record.family_hash);
    ASSIGN_OR_RETURN(sha256, ValidateBinary(binary, "compile.binary", /*require_sha256=*/false));
  }
  const std::string created_at =
      record.created_at.empty()
          ? absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone())
          : record.created_at;
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  if (ok) RETURN_IF_ERROR(WriteBinary(db, binary, sha256).status());
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT OR REPLACE INTO compiles (compile_key, status, binary_sha256,"
                              " lowered_name, nvrtc_version, arch, family, family_hash, created_at,"
                              " log) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  insert.BindText(1, record.compile_key)
      .BindInt(2, record.status)
      .BindTextOrNull(3, sha256)
      .BindText(4, ok ? record.lowered_name : std::string())
      .BindText(5, record.nvrtc_version)
      .BindText(6, record.arch)
      .BindText(7, record.family)
      .BindText(8, record.family_hash)
      .BindText(9, created_at)
      .BindText(10, record.log);
  RETURN_IF_ERROR(insert.Run());
  RETURN_IF_ERROR(transaction.Commit());
  return sha256;
}

absl::StatusOr<std::optional<CompileRecord>> Store::FindCompile(
    std::string_view compile_key) const {
  if (impl_->schema_version < 3) return std::nullopt;
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(
      Statement select,
      db->Prepare("SELECT c.status, COALESCE(c.binary_sha256, ''), c.lowered_name, c.nvrtc_version,"
                  " c.arch, c.family, c.family_hash, c.created_at, c.log,"
                  " c.binary_sha256 IS NULL OR EXISTS (SELECT 1 FROM binaries b"
                  "   WHERE b.sha256 = c.binary_sha256)"
                  " FROM compiles c WHERE c.compile_key = ?1"));
  select.BindText(1, ToAbsl(compile_key));
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row || select.ColumnInt(9) == 0) return std::nullopt;
  CompileRecord record;
  record.compile_key = std::string(compile_key);
  record.status = static_cast<v1::VariantStatus>(select.ColumnInt(0));
  record.binary_sha256 = std::string(select.ColumnText(1));
  record.lowered_name = std::string(select.ColumnText(2));
  record.nvrtc_version = std::string(select.ColumnText(3));
  record.arch = std::string(select.ColumnText(4));
  record.family = std::string(select.ColumnText(5));
  record.family_hash = std::string(select.ColumnText(6));
  record.created_at = std::string(select.ColumnText(7));
  record.log = std::string(select.ColumnText(8));
  return record;
}

// ---- Best entries -------------------------------------------------------------

absl::Status Store::PutEntry(const v1::Entry& entry) {
  RETURN_IF_ERROR(ValidateEntryFields(entry, "entry"));
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  RETURN_IF_ERROR(CheckFamilyStored(db, "entry.family_hash", entry.family(), entry.family_hash()));
  if (!entry.binary_sha256().empty()) {
    ASSIGN_OR_RETURN(bool exists, BinaryExists(db, entry.binary_sha256()));
    if (!exists) {
      return absl::NotFoundError(
          absl::StrCat("entry.binary_sha256: binary ", entry.binary_sha256(), " is not stored"));
    }
  }
  RETURN_IF_ERROR(WriteEntry(db, impl_->schema_version, entry, /*replace=*/true).status());
  RETURN_IF_ERROR(impl_->CommitVisible(transaction, /*families=*/false, /*entries=*/true));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::Entry>> Store::FindEntry(const EntryKey& key) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare(absl::StrCat("SELECT entry FROM entries"
                                            " WHERE family = ?1 AND family_hash = ",
                                            kHashOrCurrent,
                                            " AND dims_key = ?3 AND dtype = ?4 AND device = ?5")));
  select.BindText(1, key.family)
      .BindText(2, key.family_hash)
      .BindText(3, FormatDims(key.problem.dims()))
      .BindInt(4, key.problem.dtype())
      .BindText(5, key.device);
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return std::nullopt;
  return ParseStored<v1::Entry>(select.ColumnBlob(0), "entry", db->path());
}

absl::StatusOr<std::vector<v1::Entry>> Store::ListCandidates(std::string_view family,
                                                             std::string_view family_hash,
                                                             v1::DType dtype,
                                                             std::string_view device) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare(absl::StrCat("SELECT entry FROM entries"
                                            " WHERE family = ?1 AND family_hash = ",
                                            kHashOrCurrent,
                                            " AND dtype = ?3 AND (?4 = '' OR device = ?4)"
                                            " ORDER BY dims_key, device")));
  select.BindText(1, ToAbsl(family))
      .BindText(2, ToAbsl(family_hash))
      .BindInt(3, dtype)
      .BindText(4, ToAbsl(device));
  return CollectEntries(select, 0, db->path());
}

absl::StatusOr<std::vector<v1::Entry>> Store::ListEntries(const v1::EntryFilter& filter, int limit,
                                                          int offset, int64_t* total) const {
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset is ", offset, "; must be >= 0"));
  }
  ASSIGN_OR_RETURN(FilterClause clause, MakeFilterClause(filter, impl_->schema_version));
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  // One snapshot for the count and the page.
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(*db, Transaction::Kind::kRead));
  if (total != nullptr) {
    ASSIGN_OR_RETURN(*total, CountEntries(*db, clause));
  }
  std::vector<v1::Entry> entries;
  if (limit != 0) {
    ASSIGN_OR_RETURN(entries, SelectEntries(*db, clause, limit < 0 ? -1 : limit, offset));
  }
  RETURN_IF_ERROR(transaction.Commit());
  return entries;
}

absl::StatusOr<InvalidateResult> Store::Invalidate(const v1::EntryFilter& filter, bool dry_run) {
  ASSIGN_OR_RETURN(FilterClause clause, MakeFilterClause(filter, impl_->schema_version));
  const std::string entry_where = FilterWhere(clause, /*measurements=*/false);
  const std::string measurement_where = FilterWhere(clause, /*measurements=*/true);
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  InvalidateResult result;
  ASSIGN_OR_RETURN(result.removed, SelectEntries(db, clause, -1, 0));
  {
    ASSIGN_OR_RETURN(Statement count, db.Prepare(absl::StrCat("SELECT COUNT(*) FROM measurements",
                                                              measurement_where)));
    BindFilter(count, clause);
    ASSIGN_OR_RETURN(bool row, count.Step());
    result.measurements_removed = row ? count.ColumnInt(0) : 0;
  }
  if (dry_run) return result;  // the transaction rolls back
  {
    // Measurements first: with the nvrtc filter their scope is decided by
    // the entries about to go.
    ASSIGN_OR_RETURN(Statement remove,
                     db.Prepare(absl::StrCat("DELETE FROM measurements", measurement_where)));
    BindFilter(remove, clause);
    RETURN_IF_ERROR(remove.Run());
  }
  {
    ASSIGN_OR_RETURN(Statement remove,
                     db.Prepare(absl::StrCat("DELETE FROM entries", entry_where)));
    BindFilter(remove, clause);
    RETURN_IF_ERROR(remove.Run());
  }
  RETURN_IF_ERROR(impl_->CommitVisible(transaction, /*families=*/false, /*entries=*/true));
  return result;
}

// ---- Measurements -------------------------------------------------------------

absl::Status Store::AddMeasurement(const v1::Measurement& measurement) {
  RETURN_IF_ERROR(ValidateMeasurementFields(measurement, "measurement"));
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  RETURN_IF_ERROR(CheckFamilyStored(db, "measurement.family_hash", measurement.family(),
                                    measurement.family_hash()));
  RETURN_IF_ERROR(WriteMeasurement(db, measurement).status());
  return transaction.Commit();
}

absl::StatusOr<std::vector<v1::Measurement>> Store::ListMeasurements(const EntryKey& key) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  return SelectMeasurements(*db, key);
}

// ---- Jobs ---------------------------------------------------------------------

absl::StatusOr<v1::Job> Store::CreateJob(const v1::JobSpec& spec, const std::string& submitted_by) {
  unsigned char random[8];
  if (RAND_bytes(random, sizeof(random)) != 1) {
    return absl::InternalError("cannot draw random bytes for a job id");
  }
  v1::Job job;
  job.set_id(absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(random), sizeof(random))));
  *job.mutable_spec() = spec;
  job.set_submitted_by(submitted_by);
  job.set_state(v1::QUEUED);
  const std::string now = Now();
  job.set_created_at(now);
  job.set_updated_at(now);

  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT INTO jobs (id, state, created_at, updated_at, job)"
                              " VALUES (?1, ?2, ?3, ?4, ?5)"));
  insert.BindText(1, job.id())
      .BindInt(2, job.state())
      .BindText(3, job.created_at())
      .BindText(4, job.updated_at())
      .BindBlob(5, job.SerializeAsString());
  RETURN_IF_ERROR(insert.Run());
  return job;
}

absl::Status Store::UpdateJob(const v1::Job& job) {
  if (job.id().empty()) return absl::InvalidArgumentError("job.id is empty");
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  v1::Job stored;
  {
    ASSIGN_OR_RETURN(Statement select, db.Prepare("SELECT job FROM jobs WHERE id = ?1"));
    select.BindText(1, job.id());
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return absl::NotFoundError(absl::StrCat("unknown job '", job.id(), "'"));
    ASSIGN_OR_RETURN(stored, ParseStored<v1::Job>(select.ColumnBlob(0), "job", db.path()));
  }
  v1::Job updated = job;
  if (updated.created_at().empty()) updated.set_created_at(stored.created_at());
  if (updated.updated_at().empty()) updated.set_updated_at(Now());
  ASSIGN_OR_RETURN(Statement update,
                   db.Prepare("UPDATE jobs SET state = ?2, updated_at = ?3, job = ?4"
                              " WHERE id = ?1"));
  update.BindText(1, updated.id())
      .BindInt(2, updated.state())
      .BindText(3, updated.updated_at())
      .BindBlob(4, updated.SerializeAsString());
  RETURN_IF_ERROR(update.Run());
  return transaction.Commit();
}

absl::StatusOr<v1::Job> Store::GetJob(std::string_view std_id) const {
  const absl::string_view id = ToAbsl(std_id);
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select, db->Prepare("SELECT job FROM jobs WHERE id = ?1"));
  select.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown job '", id, "'"));
  return ParseStored<v1::Job>(select.ColumnBlob(0), "job", db->path());
}

absl::StatusOr<std::vector<v1::Job>> Store::ListJobs(int limit) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare("SELECT job FROM jobs ORDER BY seq DESC LIMIT ?1"));
  select.BindInt(1, limit <= 0 ? -1 : limit);
  std::vector<v1::Job> jobs;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return jobs;
    ASSIGN_OR_RETURN(v1::Job job, ParseStored<v1::Job>(select.ColumnBlob(0), "job", db->path()));
    jobs.push_back(std::move(job));
  }
}

// ---- Bundles and maintenance --------------------------------------------------

bool MeasuredBetter(const v1::Entry& a, const v1::Entry& b) {
  if (a.contended() != b.contended()) return !a.contended();
  const double am = a.timing().median_us();
  const double bm = b.timing().median_us();
  if (am > 0 && bm > 0) return am < bm;
  return am > 0 && bm <= 0;
}

absl::StatusOr<v1::ImportResponse> Store::Import(const v1::CacheBundle& bundle, Merge merge) {
  const bool replace = merge == Merge::kReplace;
  if (bundle.format_version() != kBundleFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("format_version is ", bundle.format_version(),
                                                   "; this build reads format_version ",
                                                   kBundleFormatVersion));
  }
  // Everything that needs no database is checked before taking the writer
  // (hashing large cubins included).
  std::vector<std::string> family_hashes;
  std::set<std::pair<std::string, std::string>> bundle_families;
  for (int i = 0; i < bundle.families_size(); ++i) {
    const v1::FamilyRecord& record = bundle.families(i);
    const std::string prefix = absl::StrCat("families[", i, "]");
    RETURN_IF_ERROR(ValidateFamilyName(record.family().name(), prefix + ".family.name"));
    std::string hash = FamilyContentHash(record.family());
    if (record.content_hash() != hash) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".content_hash is '",
                                                     record.content_hash(),
                                                     "' but the descriptor hashes to ", hash));
    }
    bundle_families.emplace(record.family().name(), hash);
    family_hashes.push_back(std::move(hash));
  }
  std::set<std::string> bundle_binaries;
  for (int i = 0; i < bundle.binaries_size(); ++i) {
    ASSIGN_OR_RETURN(std::string sha256,
                     ValidateBinary(bundle.binaries(i), absl::StrCat("binaries[", i, "]"),
                                    /*require_sha256=*/true));
    bundle_binaries.insert(std::move(sha256));
  }
  std::map<std::tuple<std::string, std::string, std::string, int, std::string>, int> entry_keys;
  for (int i = 0; i < bundle.entries_size(); ++i) {
    const v1::Entry& entry = bundle.entries(i);
    const std::string prefix = absl::StrCat("entries[", i, "]");
    RETURN_IF_ERROR(ValidateEntryFields(entry, prefix));
    const auto [it, inserted] = entry_keys.emplace(
        std::make_tuple(entry.family(), entry.family_hash(), FormatDims(entry.problem().dims()),
                        static_cast<int>(entry.problem().dtype()), entry.device().name()),
        i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ": same key as entries[", it->second,
                                                     "] (", EntryKeyText(entry), ")"));
    }
  }
  for (int i = 0; i < bundle.measurements_size(); ++i) {
    RETURN_IF_ERROR(
        ValidateMeasurementFields(bundle.measurements(i), absl::StrCat("measurements[", i, "]")));
  }

  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
  // References are checked inside the transaction that applies the bundle,
  // so what was checked is what the writes see.
  const auto family_known = [&](const std::string& name,
                                const std::string& hash) -> absl::StatusOr<bool> {
    if (bundle_families.contains({name, hash})) return true;
    return FamilyVersionExists(db, name, hash);
  };
  for (int i = 0; i < bundle.entries_size(); ++i) {
    const v1::Entry& entry = bundle.entries(i);
    ASSIGN_OR_RETURN(bool family_ok, family_known(entry.family(), entry.family_hash()));
    if (!family_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", i, "].family_hash: family '", entry.family(), "' version ",
                       entry.family_hash(), " is neither in the bundle nor in the store"));
    }
    if (!entry.binary_sha256().empty() && !bundle_binaries.contains(entry.binary_sha256())) {
      ASSIGN_OR_RETURN(bool stored, BinaryExists(db, entry.binary_sha256()));
      if (!stored) {
        return absl::InvalidArgumentError(
            absl::StrCat("entries[", i, "].binary_sha256: binary ", entry.binary_sha256(),
                         " is neither in the bundle nor in the store"));
      }
    }
  }
  for (int i = 0; i < bundle.measurements_size(); ++i) {
    const v1::Measurement& measurement = bundle.measurements(i);
    ASSIGN_OR_RETURN(bool family_ok, family_known(measurement.family(), measurement.family_hash()));
    if (!family_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "measurements[", i, "].family_hash: family '", measurement.family(), "' version ",
          measurement.family_hash(), " is neither in the bundle nor in the store"));
    }
  }

  v1::ImportResponse response;
  for (int i = 0; i < bundle.families_size(); ++i) {
    const v1::KernelFamily& family = bundle.families(i).family();
    const std::string& hash = family_hashes[i];
    ASSIGN_OR_RETURN(bool stored, WriteFamilyVersion(db, family, hash, /*builtin=*/false));
    ASSIGN_OR_RETURN(std::optional<std::string> current, ReadCurrentHash(db, family.name()));
    bool moved = false;
    if (!current.has_value() || (replace && *current != hash)) {
      RETURN_IF_ERROR(SetCurrentHash(db, family.name(), hash));
      moved = true;
    }
    if (stored || moved) response.set_families(response.families() + 1);
  }
  for (const v1::Binary& binary : bundle.binaries()) {
    ASSIGN_OR_RETURN(bool stored, WriteBinary(db, binary, binary.sha256()));
    if (stored) response.set_binaries(response.binaries() + 1);
  }
  for (const v1::Entry& entry : bundle.entries()) {
    bool overwrite = replace;
    if (merge == Merge::kKeepBetter) {
      ASSIGN_OR_RETURN(Statement select,
                       db.Prepare("SELECT entry FROM entries WHERE family = ?1 AND family_hash = ?2"
                                  " AND dims_key = ?3 AND dtype = ?4 AND device = ?5"));
      select.BindText(1, entry.family())
          .BindText(2, entry.family_hash())
          .BindText(3, FormatDims(entry.problem().dims()))
          .BindInt(4, entry.problem().dtype())
          .BindText(5, entry.device().name());
      ASSIGN_OR_RETURN(bool found, select.Step());
      if (found) {
        v1::Entry existing;
        const absl::string_view blob = select.ColumnBlob(0);
        if (!existing.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
          return absl::DataLossError(
              absl::StrCat("stored entry ", EntryKeyText(entry), " does not parse"));
        }
        overwrite = MeasuredBetter(entry, existing);
      }
    }
    ASSIGN_OR_RETURN(bool written, WriteEntry(db, impl_->schema_version, entry, overwrite));
    if (written) {
      response.set_entries(response.entries() + 1);
    } else {
      response.set_entries_skipped(response.entries_skipped() + 1);
    }
  }
  for (const v1::Measurement& measurement : bundle.measurements()) {
    ASSIGN_OR_RETURN(bool stored, WriteMeasurement(db, measurement));
    if (stored) response.set_measurements(response.measurements() + 1);
  }
  RETURN_IF_ERROR(
      impl_->CommitVisible(transaction, bundle.families_size() > 0, bundle.entries_size() > 0));
  return response;
}

absl::StatusOr<v1::CacheBundle> Store::Export(const v1::EntryFilter& filter,
                                              bool include_measurements) const {
  ASSIGN_OR_RETURN(FilterClause clause, MakeFilterClause(filter, impl_->schema_version));
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(*db, Transaction::Kind::kRead));
  v1::CacheBundle bundle;
  bundle.set_format_version(kBundleFormatVersion);
  ASSIGN_OR_RETURN(std::vector<v1::Entry> entries, SelectEntries(*db, clause, -1, 0));
  std::set<std::pair<std::string, std::string>> families;
  std::set<std::string> binaries;
  for (const v1::Entry& entry : entries) {
    families.emplace(entry.family(), entry.family_hash());
    if (!entry.binary_sha256().empty()) binaries.insert(entry.binary_sha256());
  }
  for (const auto& [name, hash] : families) {
    ASSIGN_OR_RETURN(std::optional<FamilyRecord> record, ReadFamilyVersion(*db, name, hash));
    if (!record.has_value()) {
      return absl::DataLossError(absl::StrCat("database ", db->path(), ": family '", name,
                                              "' version ", hash, " is referenced but missing"));
    }
    v1::FamilyRecord* out = bundle.add_families();
    *out->mutable_family() = std::move(record->family);
    out->set_content_hash(hash);
  }
  for (const std::string& sha256 : binaries) {
    ASSIGN_OR_RETURN(*bundle.add_binaries(), ReadBinary(*db, sha256));
  }
  if (include_measurements) {
    for (const v1::Entry& entry : entries) {
      const EntryKey key{entry.family(), entry.family_hash(), entry.problem(),
                         entry.device().name()};
      ASSIGN_OR_RETURN(std::vector<v1::Measurement> measurements, SelectMeasurements(*db, key));
      for (v1::Measurement& measurement : measurements) {
        *bundle.add_measurements() = std::move(measurement);
      }
    }
  }
  for (v1::Entry& entry : entries) *bundle.add_entries() = std::move(entry);
  RETURN_IF_ERROR(transaction.Commit());
  return bundle;
}

absl::StatusOr<GarbageCollectResult> Store::GarbageCollect(bool dry_run) {
  std::string unreferenced =
      " WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.binary_sha256 = binaries.sha256)"
      " AND NOT EXISTS (SELECT 1 FROM measurements m WHERE m.binary_sha256 = binaries.sha256)";
  if (impl_->schema_version >= 3) {
    unreferenced +=
        " AND NOT EXISTS (SELECT 1 FROM compiles c WHERE c.binary_sha256 = binaries.sha256)";
  }
  absl::MutexLock lock(&impl_->writer_mu);
  Connection& db = *impl_->writer;
  GarbageCollectResult result;
  {
    ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db, Transaction::Kind::kWrite));
    {
      ASSIGN_OR_RETURN(Statement count,
                       db.Prepare(absl::StrCat("SELECT COUNT(*), COALESCE(SUM(size), 0)"
                                               " FROM binaries",
                                               unreferenced)));
      ASSIGN_OR_RETURN(bool row, count.Step());
      if (row) {
        result.binaries_removed = count.ColumnInt(0);
        result.bytes_freed = count.ColumnInt(1);
      }
    }
    if (dry_run || result.binaries_removed == 0) return result;
    ASSIGN_OR_RETURN(Statement remove,
                     db.Prepare(absl::StrCat("DELETE FROM binaries", unreferenced)));
    RETURN_IF_ERROR(remove.Run());
    // A lookup that found an entry must find its binary too.
    RETURN_IF_ERROR(impl_->CommitVisible(transaction, /*families=*/false, /*entries=*/true));
  }
  // Hands the freed pages back to the file system (the file shrinks at the
  // next checkpoint). Best effort: the binaries are gone either way.
  db.Execute("PRAGMA incremental_vacuum").IgnoreError();
  return result;
}

absl::StatusOr<v1::BackupResponse> Store::Backup(const std::string& path) const {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("path: '", path,
                     "' is not absolute (the backup is written on the daemon's "
                     "host)"));
  }
  {
    sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
    RETURN_IF_ERROR(db->BackupTo(path));
  }
  absl::StatusOr<std::unique_ptr<Connection>> copy =
      Connection::Open(path, Connection::Mode::kReadOnly, absl::Seconds(5));
  absl::StatusOr<std::string> check =
      copy.ok() ? (*copy)->QueryText("PRAGMA integrity_check") : copy.status();
  absl::StatusOr<int64_t> entries =
      copy.ok() ? (*copy)->QueryInt("SELECT COUNT(*) FROM entries") : copy.status();
  absl::StatusOr<int64_t> version =
      copy.ok() ? (*copy)->QueryInt("PRAGMA user_version") : copy.status();
  copy = absl::CancelledError("closed");  // before the file may be removed
  if (!check.ok() || *check != "ok" || !entries.ok() || !version.ok()) {
    unlink(path.c_str());
    return absl::DataLossError(
        absl::StrCat("the backup ", path, " failed its check (",
                     check.ok() ? *check : std::string(check.status().message()), "); removed"));
  }
  v1::BackupResponse response;
  response.set_path(path);
  response.set_bytes(FileSize(path));
  response.set_schema_version(static_cast<int32_t>(*version));
  response.set_entries(*entries);
  return response;
}

absl::StatusOr<StoreStats> Store::Stats() const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  StoreStats stats;
  {
    ASSIGN_OR_RETURN(Statement select, db->Prepare("SELECT (SELECT COUNT(*) FROM families),"
                                                   " (SELECT COUNT(*) FROM entries),"
                                                   " (SELECT COUNT(*) FROM binaries),"
                                                   " (SELECT COALESCE(SUM(size), 0) FROM binaries),"
                                                   " (SELECT COUNT(*) FROM measurements),"
                                                   " (SELECT COUNT(*) FROM jobs)"));
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return absl::InternalError("stats query returned no row");
    stats.families = select.ColumnInt(0);
    stats.entries = select.ColumnInt(1);
    stats.binaries = select.ColumnInt(2);
    stats.binary_bytes = select.ColumnInt(3);
    stats.measurements = select.ColumnInt(4);
    stats.jobs = select.ColumnInt(5);
  }
  for (auto [query, counts] :
       {std::pair{"SELECT state, COUNT(*) FROM jobs GROUP BY state", &stats.jobs_by_state},
        std::pair{"SELECT status, COUNT(*) FROM measurements GROUP BY status",
                  &stats.measurements_by_status}}) {
    ASSIGN_OR_RETURN(Statement select, db->Prepare(query));
    while (true) {
      ASSIGN_OR_RETURN(bool row, select.Step());
      if (!row) break;
      (*counts)[static_cast<int>(select.ColumnInt(0))] = select.ColumnInt(1);
    }
  }
  stats.database_bytes = FileSize(path()) + FileSize(absl::StrCat(path(), "-wal"));
  stats.schema_version = impl_->schema_version;
  return stats;
}

absl::Status Store::CheckAvailable() const {
  const std::string& file = path();
  struct stat now;
  if (stat(file.c_str(), &now) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", file, " is gone: the file was removed or renamed while open (",
                     std::strerror(errno), ")"));
  }
  if (now.st_dev != impl_->device || now.st_ino != impl_->inode) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", file,
                     " was replaced by another file while open; restart the daemon to use it"));
  }
  {
    sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
    RETURN_IF_ERROR(db->QueryInt("SELECT COUNT(*) FROM sqlite_master").status());
  }
  absl::MutexLock lock(&impl_->writer_mu);
  ASSIGN_OR_RETURN(Transaction write,
                   Transaction::Begin(*impl_->writer, Transaction::Kind::kWrite));
  return absl::OkStatus();  // rolled back: nothing was written
}

}  // namespace autotune::cache
