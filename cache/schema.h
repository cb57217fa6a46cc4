// Internal to cache/: the database schema and its forward migrations.
//
// The schema version lives in PRAGMA user_version; PRAGMA application_id
// marks the file as an autotune database. Migration N takes a database from
// version N-1 to N in its own transaction, so an interrupted upgrade leaves
// the file at the last version that completed.
//
//   version 1: family_versions, families, binaries, entries, measurements,
//              jobs.
//   version 2: entries.nvrtc_version_num (MAJOR*1000+MINOR, 0 = unknown),
//              back-filled from the stored entries, and an index on it, so
//              "compiled by an NVRTC older than X" is a numeric range query
//              ("12.10" sorts after "12.9").
#ifndef AUTOTUNE_CACHE_SCHEMA_H_
#define AUTOTUNE_CACHE_SCHEMA_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cache/sqlite.h"

namespace autotune::cache::schema {

// "ATC1" in ASCII.
inline constexpr int32_t kApplicationId = 0x41544331;

struct Migration {
  int version;  // the user_version this migration produces
  absl::string_view description;
  absl::Status (*apply)(sqlite::Connection& db);
};

// Ordered by version: 1, 2, ... kSchemaVersion.
std::span<const Migration> Migrations();

// Applies the migrations after the database's current version up to and
// including `target`, each in its own write transaction. The version is
// re-read inside each transaction, so a concurrent opener that already
// applied a step is not repeated.
absl::Status MigrateTo(sqlite::Connection& db, int target);

}  // namespace autotune::cache::schema

#endif  // AUTOTUNE_CACHE_SCHEMA_H_
