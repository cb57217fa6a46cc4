// Jobs: what was submitted and how far it got, one row each.
#include <openssl/rand.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "cache/sqlite.h"
#include "cache/store.h"
#include "cache/store_impl.h"
#include "cache/store_rows.h"
#include "cache/strings.h"

namespace autotune::cache {
namespace {

using sqlite::Connection;
using sqlite::Statement;
using store_internal::Now;
using store_internal::ParseStored;

}  // namespace

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

  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
  ASSIGN_OR_RETURN(Statement insert,
                   db.Prepare("INSERT INTO jobs (id, state, created_at, updated_at, job)"
                              " VALUES (?1, ?2, ?3, ?4, ?5)"));
  insert.BindText(1, job.id())
      .BindInt(2, job.state())
      .BindText(3, job.created_at())
      .BindText(4, job.updated_at())
      .BindBlob(5, job.SerializeAsString());
  RETURN_IF_ERROR(insert.Run());
  RETURN_IF_ERROR(write.Commit());
  return job;
}

absl::Status Store::UpdateJob(const v1::Job& job) {
  if (job.id().empty()) return absl::InvalidArgumentError("job.id is empty");
  Impl::Write write(*impl_);
  RETURN_IF_ERROR(write.Begin());
  Connection& db = write.db();
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
  return write.Commit();
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

namespace {

// The jobs `select` yields (its column 0 is a stored job).
absl::StatusOr<std::vector<v1::Job>> ReadJobs(Statement& select, const std::string& path) {
  std::vector<v1::Job> jobs;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return jobs;
    ASSIGN_OR_RETURN(v1::Job job, ParseStored<v1::Job>(select.ColumnBlob(0), "job", path));
    jobs.push_back(std::move(job));
  }
}

}  // namespace

absl::StatusOr<std::vector<v1::Job>> Store::ListJobs(int limit) const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare("SELECT job FROM jobs ORDER BY seq DESC LIMIT ?1"));
  select.BindInt(1, limit <= 0 ? -1 : limit);
  return ReadJobs(select, db->path());
}

absl::StatusOr<std::vector<v1::Job>> Store::ListUnfinishedJobs() const {
  sqlite::ConnectionPool::Lease db = impl_->readers.Acquire();
  ASSIGN_OR_RETURN(Statement select,
                   db->Prepare("SELECT job FROM jobs WHERE state NOT IN (?1, ?2, ?3)"
                               " ORDER BY seq DESC"));
  select.BindInt(1, v1::SUCCEEDED).BindInt(2, v1::FAILED).BindInt(3, v1::CANCELLED);
  return ReadJobs(select, db->path());
}

}  // namespace autotune::cache
