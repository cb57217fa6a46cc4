#include "cache/store_rows.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "cache/sqlite.h"
#include "proto/problem.h"

namespace autotune::cache::store_internal {
namespace {

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

constexpr absl::string_view kEntryOrder = " ORDER BY family, dims_key, dtype, device, family_hash";

absl::StatusOr<bool> RowExists(Connection& db, absl::string_view sql, absl::string_view key1,
                               absl::string_view key2 = {}) {
  ASSIGN_OR_RETURN(Statement select, db.Prepare(sql));
  select.BindText(1, key1);
  if (!key2.empty()) select.BindText(2, key2);
  return select.Step();
}

}  // namespace

std::string Now() { return TimestampMillis(); }

absl::Status ValidateFamilyName(absl::string_view name, absl::string_view field) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (!IsFamilyName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", name, "' must match [a-z][a-z0-9_]*"));
  }
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

absl::StatusOr<bool> FamilyVersionExists(Connection& db, absl::string_view name,
                                         absl::string_view hash) {
  return RowExists(db, "SELECT 1 FROM family_versions WHERE name = ?1 AND content_hash = ?2", name,
                   hash);
}

absl::StatusOr<bool> BinaryExists(Connection& db, absl::string_view sha256) {
  return RowExists(db, "SELECT 1 FROM binaries WHERE sha256 = ?1", sha256);
}

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

absl::StatusOr<bool> WriteMeasurement(Connection& db, const v1::Measurement& measurement) {
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT INTO measurements (family, family_hash, dims_key, dtype,"
                              " device, config_key, status, phase, binary_sha256, job_id,"
                              " measured_at, digest, measurement)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                              " ON CONFLICT (digest) DO NOTHING"));
  const std::string bytes = SerializeDeterministically(measurement);
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

}  // namespace autotune::cache::store_internal
