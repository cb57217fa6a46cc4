// The compile cache: what compiling one variant gave, by its compile key.
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "cache/sqlite.h"
#include "cache/store.h"
#include "cache/store_impl.h"
#include "cache/store_rows.h"
#include "cache/strings.h"

namespace autotune::cache {
namespace {

using sqlite::Connection;
using sqlite::Statement;
using store_internal::ValidateBinary;
using store_internal::WriteBinary;

}  // namespace

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
  const std::string created_at = record.created_at.empty() ? TimestampMillis() : record.created_at;
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
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
  RETURN_IF_ERROR(write.Commit());
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

}  // namespace autotune::cache
