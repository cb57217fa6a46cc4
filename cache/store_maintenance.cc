// Keeping the database file in shape: dropping unreferenced binaries,
// online backups, and what the file holds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "cache/sqlite.h"
#include "cache/store.h"
#include "cache/store_impl.h"
#include "cache/store_rows.h"

namespace autotune::cache {
namespace {

using sqlite::Connection;
using sqlite::Statement;

int64_t FileSize(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : 0;
}

}  // namespace

absl::StatusOr<GarbageCollectResult> Store::GarbageCollect(bool dry_run) {
  std::string unreferenced =
      " WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.binary_sha256 = binaries.sha256)"
      " AND NOT EXISTS (SELECT 1 FROM measurements m WHERE m.binary_sha256 = binaries.sha256)";
  if (impl_->schema_version >= 3) {
    unreferenced +=
        " AND NOT EXISTS (SELECT 1 FROM compiles c WHERE c.binary_sha256 = binaries.sha256)";
  }
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  GarbageCollectResult result;
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
  RETURN_IF_ERROR(write.CommitVisible(/*families=*/false, /*entries=*/true));
  // Hands the freed pages back to the file system (the file shrinks at the
  // next checkpoint). Best effort: the binaries are gone either way.
  db.Execute("PRAGMA incremental_vacuum").IgnoreError();
  return result;
}

absl::StatusOr<v1::BackupResponse> Store::Backup(const std::string& name) const {
  const std::string& dir = impl_->options.backup_dir;
  if (dir.empty()) {
    return absl::FailedPreconditionError(
        "this daemon takes no backups: start autotuned with --backup-dir DIR (a folder of the "
        "daemon's user) to allow them into that folder");
  }
  // A name, never a path: an admin's call writes nowhere but the folder.
  if (name.empty() || name == "." || name == ".." || name.size() > 255 ||
      name.find_first_of(std::string("/\0", 2)) != std::string::npos ||
      std::any_of(name.begin(), name.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path: '", absl::CHexEscape(name.substr(0, 300)),
        "' is not a file name (no '/', not '..', no control characters, at most 255 bytes); "
        "backups are written into the daemon's --backup-dir ",
        dir));
  }
  // The folder as it is now: ours, and no one else may add or swap files in
  // it, so the file created below stays the one SQLite writes.
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return PosixError(absl::StrCat("--backup-dir ", dir), errno);
  const absl::Cleanup close_dir = [dir_fd] { close(dir_fd); };
  struct stat info {};
  if (fstat(dir_fd, &info) != 0) return PosixError(absl::StrCat("--backup-dir ", dir), errno);
  if (info.st_uid != geteuid() || (info.st_mode & 022) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--backup-dir %s belongs to uid %d with mode %04o: backups go only into a folder of "
        "the daemon's uid %d that group and others cannot write",
        dir, info.st_uid, info.st_mode & 07777, geteuid()));
  }
  const std::string path = absl::StrCat(dir, "/", name);
  const int fd =
      openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError(absl::StrCat("cannot create the backup ", path), errno);
  close(fd);
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
    unlinkat(dir_fd, name.c_str(), 0);
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

}  // namespace autotune::cache
