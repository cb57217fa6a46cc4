// Opening the database, and the Store's families, binaries, entries and
// measurements. The rest of the class is in store_bundles.cc,
// store_compiles.cc, store_jobs.cc and store_maintenance.cc; the SQL of each
// table row in store_rows.cc.
#include "cache/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/posix_error.h"
#include "base/private_file.h"
#include "base/status_macros.h"
#include "cache/lock_file.h"
#include "cache/schema.h"
#include "cache/sqlite.h"
#include "cache/store_impl.h"
#include "cache/store_rows.h"
#include "cache/strings.h"
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
using store_internal::BinaryExists;
using store_internal::BindFilter;
using store_internal::CheckFamilyStored;
using store_internal::CollectEntries;
using store_internal::CountEntries;
using store_internal::FilterClause;
using store_internal::FilterWhere;
using store_internal::kHashOrCurrent;
using store_internal::MakeFilterClause;
using store_internal::ParseStored;
using store_internal::ReadBinary;
using store_internal::ReadCurrentHash;
using store_internal::ReadFamilyVersion;
using store_internal::SelectEntries;
using store_internal::SelectMeasurements;
using store_internal::SetCurrentHash;
using store_internal::ValidateBinary;
using store_internal::ValidateEntryFields;
using store_internal::ValidateFamilyName;
using store_internal::ValidateMeasurementFields;
using store_internal::WriteBinary;
using store_internal::WriteEntry;
using store_internal::WriteFamilyVersion;
using store_internal::WriteMeasurement;

}  // namespace

Store::Impl::Write::Write(Impl& impl) : impl_(impl) {
  impl.writer_mu.Lock();
  db_ = impl.writer.get();
}

Store::Impl::Write::~Write() {
  transaction_.reset();
  impl_.writer_mu.Unlock();
}

absl::Status Store::Impl::Write::Begin() {
  absl::StatusOr<Transaction> begun = Transaction::Begin(*db_, Transaction::Kind::kWrite);
  if (!begun.ok()) return begun.status();
  transaction_.emplace(*std::move(begun));
  return absl::OkStatus();
}

absl::Status Store::Impl::Write::Commit() {
  if (!transaction_.has_value()) return absl::InternalError("commit without a transaction");
  return transaction_->Commit();
}

absl::Status Store::Impl::Write::CommitVisible(bool families, bool entries) {
  if (!transaction_.has_value()) return absl::InternalError("commit without a transaction");
  absl::MutexLock hold(&impl_.commit_gate);
  if (families) impl_.family_generation.fetch_add(1);
  if (entries) impl_.entry_generation.fetch_add(1);
  absl::Status committed = transaction_->Commit();
  if (families) impl_.family_generation.fetch_add(1);
  if (entries) impl_.entry_generation.fetch_add(1);
  return committed;
}

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
  // first byte; SQLite gives its -wal and -shm files the same mode. Opened
  // as base/private_file.h says: no symbolic link, none of another user's
  // files, and a loosened mode tightened back to 0600, for the side files
  // SQLite would reuse as well. Opening read-write also turns an unreadable
  // or unwritable path into an errno message naming the path.
  struct stat file {};
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string name = absl::StrCat(path, suffix);
    const bool database = *suffix == '\0';
    absl::StatusOr<PrivateFile> opened =
        OpenPrivateFile(name, O_RDWR, database ? "database" : "the database's file", database);
    if (!database && absl::IsNotFound(opened.status())) continue;
    if (!opened.ok()) {
      if (absl::IsPermissionDenied(opened.status())) {
        return absl::Status(opened.status().code(),
                            absl::StrCat(opened.status().message(), kNeedsReadWrite));
      }
      return opened.status();
    }
    if (opened->tightened_from != 0 && options.warn) {
      options.warn(absl::StrFormat("%s was mode %04o, open to other users; tightened to 0600", name,
                                   opened->tightened_from));
    }
    // The file's identity, for CheckAvailable(), from the file just opened.
    const int statted = database ? fstat(opened->fd, &file) : 0;
    const int stat_error = errno;
    // Closed before SQLite opens the file: closing any descriptor of a file
    // drops this process's POSIX locks on it, SQLite's included.
    close(opened->fd);
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
  Impl::Write write(*impl_);
  return write.Begin();  // rolled back: nothing was written
}

absl::StatusOr<FamilyRecord> Store::PutFamily(const v1::KernelFamily& family, bool builtin,
                                              bool* changed) {
  RETURN_IF_ERROR(ValidateFamilyName(family.name(), "family.name"));
  const std::string hash = FamilyContentHash(family);
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  RETURN_IF_ERROR(WriteFamilyVersion(db, family, hash, builtin).status());
  ASSIGN_OR_RETURN(std::optional<std::string> previous, ReadCurrentHash(db, family.name()));
  RETURN_IF_ERROR(SetCurrentHash(db, family.name(), hash));
  ASSIGN_OR_RETURN(std::optional<FamilyRecord> record, ReadFamilyVersion(db, family.name(), hash));
  if (!record.has_value()) return absl::InternalError("family version vanished while storing it");
  RETURN_IF_ERROR(write.CommitVisible(/*families=*/true, /*entries=*/false));
  if (changed != nullptr) *changed = previous != hash;
  return *std::move(record);
}

absl::StatusOr<Store::RemovedFamily> Store::RemoveFamily(std::string_view std_name,
                                                         bool with_entries) {
  const absl::string_view name = ToAbsl(std_name);
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  const auto count = [&](absl::string_view sql) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(Statement select, db.Prepare(sql));
    select.BindText(1, name);
    ASSIGN_OR_RETURN(bool row, select.Step());
    return row ? select.ColumnInt(0) : 0;
  };
  RemovedFamily removed;
  ASSIGN_OR_RETURN(removed.versions, count("SELECT COUNT(*) FROM family_versions WHERE name = ?1"));
  if (removed.versions == 0) {
    return absl::NotFoundError(absl::StrCat("unknown family '", name, "'"));
  }
  ASSIGN_OR_RETURN(const int64_t builtin,
                   count("SELECT COUNT(*) FROM family_versions WHERE name = ?1 AND builtin != 0"));
  if (builtin > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", name, "' is a built-in family: the daemon registers it again at every start"));
  }
  ASSIGN_OR_RETURN(removed.entries, count("SELECT COUNT(*) FROM entries WHERE family = ?1"));
  ASSIGN_OR_RETURN(removed.measurements,
                   count("SELECT COUNT(*) FROM measurements WHERE family = ?1"));
  if (!with_entries && (removed.entries > 0 || removed.measurements > 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "family '", name, "' has ", removed.entries, " entries and ", removed.measurements,
        " measurements; unregister it with invalidate (autotune unregister --invalidate) to "
        "remove them too"));
  }
  for (absl::string_view sql :
       {"DELETE FROM measurements WHERE family = ?1", "DELETE FROM entries WHERE family = ?1",
        "DELETE FROM compiles WHERE family = ?1", "DELETE FROM families WHERE name = ?1",
        "DELETE FROM family_versions WHERE name = ?1"}) {
    ASSIGN_OR_RETURN(Statement remove, db.Prepare(sql));
    remove.BindText(1, name);
    RETURN_IF_ERROR(remove.Run());
  }
  RETURN_IF_ERROR(write.CommitVisible(/*families=*/true, /*entries=*/true));
  return removed;
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
  if (record.has_value()) return *std::move(record);
  const auto not_found = [&] {
    return absl::NotFoundError(absl::StrCat("family '", name, "' has no version ", hash));
  };
  const bool prefix = hash.size() >= kMinHashPrefix && hash.size() < 64 &&
                      std::all_of(hash.begin(), hash.end(), [](char c) {
                        return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
                      });
  if (!prefix) return not_found();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare("SELECT content_hash FROM family_versions"
                               " WHERE name = ?1 AND substr(content_hash, 1, ?2) = ?3"
                               " ORDER BY content_hash LIMIT 5"));
  select.BindText(1, name);
  select.BindInt(2, static_cast<int64_t>(hash.size()));
  select.BindText(3, hash);
  std::vector<std::string> matches;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    matches.push_back(std::string(select.ColumnText(0)));
  }
  if (matches.empty()) return not_found();
  if (matches.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "family '", name, "': the hash prefix ", hash, " fits ",
        matches.size() == 5 ? "5 or more" : absl::StrCat(matches.size()), " versions (",
        absl::StrJoin(matches, ", ",
                      [](std::string* out, const std::string& full) {
                        absl::StrAppend(out, full.substr(0, 16), "...");
                      }),
        "); give more of it"));
  }
  ASSIGN_OR_RETURN(record, ReadFamilyVersion(*db, name, matches.front()));
  if (!record.has_value()) return not_found();
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

absl::StatusOr<std::string> Store::PutBinary(const v1::Binary& binary) {
  ASSIGN_OR_RETURN(std::string sha256, ValidateBinary(binary, "binary", /*require_sha256=*/false));
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  RETURN_IF_ERROR(WriteBinary(db, binary, sha256).status());
  RETURN_IF_ERROR(write.Commit());
  return sha256;
}

absl::StatusOr<v1::Binary> Store::GetBinary(std::string_view sha256) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  return ReadBinary(*db, ToAbsl(sha256));
}

absl::Status Store::PutEntry(const v1::Entry& entry) {
  RETURN_IF_ERROR(ValidateEntryFields(entry, "entry"));
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  RETURN_IF_ERROR(CheckFamilyStored(db, "entry.family_hash", entry.family(), entry.family_hash()));
  if (!entry.binary_sha256().empty()) {
    ASSIGN_OR_RETURN(bool exists, BinaryExists(db, entry.binary_sha256()));
    if (!exists) {
      return absl::NotFoundError(
          absl::StrCat("entry.binary_sha256: binary ", entry.binary_sha256(), " is not stored"));
    }
  }
  RETURN_IF_ERROR(WriteEntry(db, impl_->schema_version, entry, /*replace=*/true).status());
  RETURN_IF_ERROR(write.CommitVisible(/*families=*/false, /*entries=*/true));
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
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
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
  RETURN_IF_ERROR(write.CommitVisible(/*families=*/false, /*entries=*/true));
  return result;
}

absl::Status Store::AddMeasurement(const v1::Measurement& measurement) {
  RETURN_IF_ERROR(ValidateMeasurementFields(measurement, "measurement"));
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  RETURN_IF_ERROR(CheckFamilyStored(db, "measurement.family_hash", measurement.family(),
                                    measurement.family_hash()));
  RETURN_IF_ERROR(WriteMeasurement(db, measurement).status());
  return write.Commit();
}

absl::StatusOr<std::vector<v1::Measurement>> Store::ListMeasurements(const EntryKey& key) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  return SelectMeasurements(*db, key);
}

}  // namespace autotune::cache
