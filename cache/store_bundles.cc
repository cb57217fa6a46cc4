// Bundles: a filtered slice of the store, with the family versions and
// binaries it needs, exported as one message and imported in one
// transaction.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "cache/sqlite.h"
#include "cache/store.h"
#include "cache/store_impl.h"
#include "cache/store_rows.h"
#include "cache/strings.h"
#include "proto/bundle_parts.h"
#include "proto/problem.h"

namespace autotune::cache {
namespace {

using sqlite::Connection;
using sqlite::Statement;
using sqlite::Transaction;
using store_internal::BinaryExists;
using store_internal::FamilyVersionExists;
using store_internal::FilterClause;
using store_internal::MakeFilterClause;
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

std::string EntryKeyText(const v1::Entry& entry) {
  return absl::StrCat(entry.family(), "@", entry.family_hash(), " ",
                      FormatDims(entry.problem().dims()), " ", DTypeName(entry.problem().dtype()),
                      " on ", entry.device().name());
}

}  // namespace

bool MeasuredBetter(const v1::Entry& a, const v1::Entry& b) {
  if (a.contended() != b.contended()) return !a.contended();
  const double am = a.timing().median_us();
  const double bm = b.timing().median_us();
  if (am > 0 && bm > 0) return am < bm;
  return am > 0 && bm <= 0;
}

absl::StatusOr<v1::ImportResponse> Store::Import(const v1::CacheBundle& bundle, Merge merge,
                                                 std::string_view families_refused) {
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

  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
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
    const bool moves = !current.has_value() || (replace && *current != hash);
    if (!families_refused.empty() && (stored || moves)) {
      // The transaction is rolled back: nothing of the bundle is written.
      return absl::PermissionDeniedError(absl::StrCat(
          "families[", i, "]: importing family '", family.name(), "' version ", hash.substr(0, 12),
          " would ", stored ? "add that version" : "make that version current", "; ",
          ToAbsl(families_refused)));
    }
    bool moved = false;
    if (moves) {
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
  RETURN_IF_ERROR(write.CommitVisible(bundle.families_size() > 0, bundle.entries_size() > 0));
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

}  // namespace autotune::cache
