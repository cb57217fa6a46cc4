// Internal to the Store (cache/store*.cc): how what the store keeps maps to
// table rows and back, and what a value must hold to be stored. Nothing here
// takes a lock or begins a transaction: reads run on the connection they are
// given, writes on the writer inside the caller's transaction
// (Store::Impl::Write).
#ifndef AUTOTUNE_CACHE_STORE_ROWS_H_
#define AUTOTUNE_CACHE_STORE_ROWS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cache/sqlite.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"

namespace autotune::cache::store_internal {

using sqlite::Connection;
using sqlite::Statement;

// Now as the store writes times: RFC 3339, UTC, milliseconds.
std::string Now();

// A message read back from a row; DATA_LOSS naming `what` and the database
// when its bytes do not parse.
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

// Validation of arguments: no database access, so callers run it before
// taking the writer. Each error is INVALID_ARGUMENT naming the field under
// `prefix` or `field`.
absl::Status ValidateFamilyName(absl::string_view name, absl::string_view field);
absl::Status ValidateEntryFields(const v1::Entry& entry, absl::string_view prefix);
absl::Status ValidateMeasurementFields(const v1::Measurement& measurement,
                                       absl::string_view prefix);
// Returns the digest the binary is stored under.
absl::StatusOr<std::string> ValidateBinary(const v1::Binary& binary, absl::string_view prefix,
                                           bool require_sha256);

// An entry filter (v1::EntryFilter) as SQL: each set field adds a fixed SQL
// fragment with a fixed parameter number; values are bound, never spliced.
// ?7 and ?8 are left for LIMIT / OFFSET.
struct FilterClause {
  const v1::EntryFilter* filter = nullptr;
  std::string dims_key;              // set when filter->problem has dims
  std::optional<int64_t> nvrtc_num;  // set when filter has nvrtc_older_than
};

absl::StatusOr<FilterClause> MakeFilterClause(const v1::EntryFilter& filter, int schema_version);

// `measurements` selects the measurements of the same scope instead of the
// entries themselves (see Store::Invalidate in the header).
std::string FilterWhere(const FilterClause& clause, bool measurements);
void BindFilter(Statement& statement, const FilterClause& clause);

// Reads, on any connection.

// The entries in column `column` of each row `statement` still yields.
absl::StatusOr<std::vector<v1::Entry>> CollectEntries(Statement& statement, int column,
                                                      const std::string& path);
// How many entries `clause` matches.
absl::StatusOr<int64_t> CountEntries(Connection& db, const FilterClause& clause);
// limit < 0: no limit.
absl::StatusOr<std::vector<v1::Entry>> SelectEntries(Connection& db, const FilterClause& clause,
                                                     int64_t limit, int64_t offset);
// nullopt when that version is not stored.
absl::StatusOr<std::optional<FamilyRecord>> ReadFamilyVersion(Connection& db,
                                                              absl::string_view name,
                                                              absl::string_view hash);
// nullopt for a name never stored.
absl::StatusOr<std::optional<std::string>> ReadCurrentHash(Connection& db, absl::string_view name);
absl::StatusOr<bool> FamilyVersionExists(Connection& db, absl::string_view name,
                                         absl::string_view hash);
absl::StatusOr<bool> BinaryExists(Connection& db, absl::string_view sha256);
// NOT_FOUND when absent, DATA_LOSS when the stored bytes no longer hash to
// the key: a damaged cubin loaded into a GPU process fails in ways far from
// here, so it is never handed out.
absl::StatusOr<v1::Binary> ReadBinary(Connection& db, absl::string_view sha256);

// An empty family_hash resolves to the family's current hash inside the
// statement, so hot lookups stay one query.
inline constexpr absl::string_view kHashOrCurrent =
    "COALESCE(NULLIF(?2, ''), (SELECT current_hash FROM families WHERE name = ?1))";

// Every measurement of `key`, oldest first (an empty family_hash: the
// current one).
absl::StatusOr<std::vector<v1::Measurement>> SelectMeasurements(Connection& db,
                                                                const EntryKey& key);

// Writes, on the writer connection inside a transaction.

// Returns whether the version was new.
absl::StatusOr<bool> WriteFamilyVersion(Connection& db, const v1::KernelFamily& family,
                                        const std::string& hash, bool builtin);
// Upserts the current hash of family `name`.
absl::Status SetCurrentHash(Connection& db, absl::string_view name, absl::string_view hash);
// Returns whether the binary was new. A stored copy whose bytes differ (it
// can only be damaged: the key is their hash) is overwritten, which heals it.
absl::StatusOr<bool> WriteBinary(Connection& db, const v1::Binary& binary,
                                 const std::string& sha256);
// Returns whether the entry was written: false when one with the same key
// exists and `replace` is false. Fields must have been validated.
absl::StatusOr<bool> WriteEntry(Connection& db, int schema_version, const v1::Entry& entry,
                                bool replace);
// Returns whether the measurement was new (an identical one is stored once,
// which makes importing the same bundle twice harmless).
absl::StatusOr<bool> WriteMeasurement(Connection& db, const v1::Measurement& measurement);
// NOT_FOUND naming `field` when the family version is not stored.
absl::Status CheckFamilyStored(Connection& db, absl::string_view field, absl::string_view family,
                               absl::string_view hash);

}  // namespace autotune::cache::store_internal

#endif  // AUTOTUNE_CACHE_STORE_ROWS_H_
