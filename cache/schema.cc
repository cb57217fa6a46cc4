#include "cache/schema.h"

#include <array>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"

namespace autotune::cache::schema {
namespace {

// Key columns are what queries filter on; the serialized proto in the last
// column carries everything else, so new proto fields need no migration.
// Blob columns come last: reading the key columns of a row then stops before
// the blob's overflow pages.
constexpr absl::string_view kVersion1 = R"sql(
CREATE TABLE family_versions (
  name TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  builtin INTEGER NOT NULL,
  registered_at TEXT NOT NULL,
  descriptor BLOB NOT NULL,
  PRIMARY KEY (name, content_hash)
);
CREATE TABLE families (
  name TEXT PRIMARY KEY NOT NULL,
  current_hash TEXT NOT NULL,
  FOREIGN KEY (name, current_hash) REFERENCES family_versions (name, content_hash)
);
CREATE TABLE binaries (
  sha256 TEXT PRIMARY KEY NOT NULL,
  size INTEGER NOT NULL,
  nvrtc_version TEXT NOT NULL,
  arch TEXT NOT NULL,
  family TEXT NOT NULL,
  family_hash TEXT NOT NULL,
  created_at TEXT NOT NULL,
  compile_log TEXT NOT NULL,
  cubin BLOB NOT NULL
);
CREATE TABLE entries (
  id INTEGER PRIMARY KEY,
  family TEXT NOT NULL,
  family_hash TEXT NOT NULL,
  dims_key TEXT NOT NULL,
  dtype INTEGER NOT NULL,
  device TEXT NOT NULL,
  compute_capability INTEGER NOT NULL,
  sm_count INTEGER NOT NULL,
  binary_sha256 TEXT REFERENCES binaries (sha256),
  tuned_at TEXT NOT NULL,
  entry BLOB NOT NULL,
  UNIQUE (family, family_hash, dims_key, dtype, device),
  FOREIGN KEY (family, family_hash) REFERENCES family_versions (name, content_hash)
);
CREATE INDEX entries_by_device ON entries (device);
CREATE INDEX entries_by_binary ON entries (binary_sha256);
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY,
  family TEXT NOT NULL,
  family_hash TEXT NOT NULL,
  dims_key TEXT NOT NULL,
  dtype INTEGER NOT NULL,
  device TEXT NOT NULL,
  config_key TEXT NOT NULL,
  status INTEGER NOT NULL,
  phase INTEGER NOT NULL,
  binary_sha256 TEXT,
  job_id TEXT NOT NULL,
  measured_at TEXT NOT NULL,
  digest TEXT NOT NULL UNIQUE,
  measurement BLOB NOT NULL,
  FOREIGN KEY (family, family_hash) REFERENCES family_versions (name, content_hash)
);
CREATE INDEX measurements_by_scope ON measurements (family, family_hash, dims_key, dtype, device);
CREATE INDEX measurements_by_binary ON measurements (binary_sha256);
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  state INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  job BLOB NOT NULL
);
)sql";

absl::Status ApplyVersion1(sqlite::Connection& db) {
  RETURN_IF_ERROR(db.Execute(kVersion1));
  // PRAGMA takes no bound parameters; the value is our own constant.
  return db.Execute(absl::StrCat("PRAGMA application_id = ", kApplicationId));
}

absl::Status ApplyVersion2(sqlite::Connection& db) {
  RETURN_IF_ERROR(db.Execute(R"sql(
ALTER TABLE entries ADD COLUMN nvrtc_version_num INTEGER NOT NULL DEFAULT 0;
CREATE INDEX entries_by_nvrtc ON entries (nvrtc_version_num);
)sql"));
  // The version only exists inside the serialized entry, so the back-fill
  // parses each one. Collected first: updating rows while stepping over the
  // same table is not something to rely on.
  std::vector<std::pair<int64_t, int64_t>> numbers;  // (row id, version number)
  {
    ASSIGN_OR_RETURN(sqlite::Statement select, db.Prepare("SELECT id, entry FROM entries"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, select.Step());
      if (!row) break;
      const absl::string_view blob = select.ColumnBlob(1);
      v1::Entry entry;
      if (!entry.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
        return absl::DataLossError(absl::StrCat("database ", db.path(), ": entries row ",
                                                select.ColumnInt(0), " does not parse"));
      }
      // An unparseable version stays 0 (unknown) rather than failing the
      // upgrade of an otherwise good database.
      absl::StatusOr<int64_t> number = NvrtcVersionNumber(entry.nvrtc_version());
      if (number.ok()) numbers.emplace_back(select.ColumnInt(0), *number);
    }
  }
  for (const auto& [id, number] : numbers) {
    ASSIGN_OR_RETURN(sqlite::Statement update,
                     db.Prepare("UPDATE entries SET nvrtc_version_num = ?1 WHERE id = ?2"));
    update.BindInt(1, number).BindInt(2, id);
    RETURN_IF_ERROR(update.Run());
  }
  return absl::OkStatus();
}

// The compile cache: what compiling one variant gave, by compile key, so a
// warmup compiles each distinct variant once across jobs and restarts.
absl::Status ApplyVersion3(sqlite::Connection& db) {
  return db.Execute(R"sql(
CREATE TABLE compiles (
  compile_key TEXT PRIMARY KEY NOT NULL,
  status INTEGER NOT NULL,
  binary_sha256 TEXT REFERENCES binaries (sha256),
  lowered_name TEXT,
  nvrtc_version TEXT NOT NULL,
  arch TEXT NOT NULL,
  family TEXT,
  family_hash TEXT,
  created_at TEXT NOT NULL,
  log TEXT
);
CREATE INDEX compiles_by_binary ON compiles (binary_sha256);
)sql");
}

constexpr std::array<Migration, 3> kMigrations = {{
    {1, "base tables", &ApplyVersion1},
    {2, "entries.nvrtc_version_num", &ApplyVersion2},
    {3, "compiles", &ApplyVersion3},
}};

}  // namespace

std::span<const Migration> Migrations() { return kMigrations; }

absl::Status MigrateTo(sqlite::Connection& db, int target) {
  for (const Migration& migration : kMigrations) {
    if (migration.version > target) break;
    ASSIGN_OR_RETURN(sqlite::Transaction transaction,
                     sqlite::Transaction::Begin(db, sqlite::Transaction::Kind::kWrite));
    ASSIGN_OR_RETURN(int64_t current, db.QueryInt("PRAGMA user_version"));
    if (current >= migration.version) continue;
    if (current != migration.version - 1) {
      return absl::InternalError(absl::StrCat("database ", db.path(), ": at schema version ",
                                              current, ", cannot apply migration ",
                                              migration.version));
    }
    absl::Status status = migration.apply(db);
    if (status.ok()) {
      status = db.Execute(absl::StrCat("PRAGMA user_version = ", migration.version));
    }
    if (status.ok()) status = transaction.Commit();
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("migrating to schema version ", migration.version, " (",
                                       migration.description, "): ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace autotune::cache::schema
