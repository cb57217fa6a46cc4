#include "cache/sqlite.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/posix_error.h"

namespace autotune::cache::sqlite {

absl::Status Error(int code, absl::string_view message, absl::string_view path,
                   absl::string_view context) {
  std::string text = absl::StrCat("database ", path, ": ");
  if (!context.empty()) absl::StrAppend(&text, context, ": ");
  if (message.empty()) {
    absl::StrAppend(&text, sqlite3_errstr(code));
  } else {
    absl::StrAppend(&text, message);
  }
  switch (code & 0xff) {
    // Not UNAVAILABLE: to a gRPC client that means the server could not be
    // reached. A busy database is a conflict worth retrying; I/O trouble is
    // the server's own fault.
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::AbortedError(text);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PROTOCOL:
      return absl::InternalError(text);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(text);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(text);
    case SQLITE_CORRUPT:
      return absl::DataLossError(text);
    case SQLITE_NOTADB:
      return absl::FailedPreconditionError(text);
    default:
      return absl::InternalError(text);
  }
}

Statement::Statement(sqlite3_stmt* statement, Connection* connection, bool* in_use)
    : statement_(statement), connection_(connection), in_use_(in_use) {
  *in_use_ = true;
}

Statement::Statement(Statement&& other) noexcept
    : statement_(std::exchange(other.statement_, nullptr)),
      connection_(other.connection_),
      in_use_(other.in_use_),
      bind_error_(other.bind_error_) {}

Statement::~Statement() {
  if (statement_ == nullptr) return;
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
  *in_use_ = false;
}

void Statement::NoteBind(int rc) {
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
}

Statement& Statement::BindInt(int index, int64_t value) {
  NoteBind(sqlite3_bind_int64(statement_, index, value));
  return *this;
}

Statement& Statement::BindText(int index, absl::string_view text) {
  // SQLITE_TRANSIENT: SQLite copies, so callers may pass temporaries.
  NoteBind(sqlite3_bind_text64(statement_, index, text.data(), text.size(), SQLITE_TRANSIENT,
                               SQLITE_UTF8));
  return *this;
}

Statement& Statement::BindTextOrNull(int index, absl::string_view text) {
  if (text.empty()) {
    NoteBind(sqlite3_bind_null(statement_, index));
    return *this;
  }
  return BindText(index, text);
}

Statement& Statement::BindBlob(int index, absl::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL: bind_blob64 with a
  // null pointer would store NULL.
  static const char kEmpty = 0;
  NoteBind(sqlite3_bind_blob64(statement_, index, bytes.empty() ? &kEmpty : bytes.data(),
                               bytes.size(), SQLITE_TRANSIENT));
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_error_ != SQLITE_OK) {
    return connection_->LastError(bind_error_, "binding a parameter");
  }
  const int rc = sqlite3_step(statement_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return connection_->LastError(rc);
}

absl::Status Statement::Run() {
  for (;;) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(statement_, column); }

std::string Statement::ColumnText(int column) const {
  const unsigned char* text = sqlite3_column_text(statement_, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(statement_, column)));
}

absl::string_view Statement::ColumnBlob(int column) const {
  // column_blob before column_bytes: the documented order that avoids a
  // conversion invalidating the pointer.
  const void* data = sqlite3_column_blob(statement_, column);
  if (data == nullptr) return absl::string_view();
  return absl::string_view(static_cast<const char*>(data),
                           static_cast<size_t>(sqlite3_column_bytes(statement_, column)));
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(statement_, column) == SQLITE_NULL;
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path, Mode mode,
                                                             absl::Duration busy_timeout) {
  // NOMUTEX: every connection is used by one thread at a time (see header),
  // so SQLite's per-connection mutex is pure overhead. NOFOLLOW: a database
  // swapped for a symbolic link after the store checked it is not opened.
  const int flags = (mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
                    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  // A handle comes back even on failure and must be closed.
  ConnectionHandle db(raw);
  if (rc != SQLITE_OK) {
    return Error(rc, db != nullptr ? sqlite3_errmsg(db.get()) : sqlite3_errstr(rc), path,
                 "cannot open");
  }
  const int64_t timeout_ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(busy_timeout), 0,
                                                 std::numeric_limits<int>::max());
  sqlite3_busy_timeout(db.get(), static_cast<int>(timeout_ms));
  return std::unique_ptr<Connection>(new Connection(std::move(db), path));
}

absl::Status Connection::LastError(int code, absl::string_view context) {
  last_error_code_ = code;
  return Error(code, sqlite3_errmsg(db_.get()), path_, context);
}

absl::StatusOr<Statement> Connection::Prepare(absl::string_view sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    sqlite3_stmt* raw = nullptr;
    const char* tail = nullptr;
    const int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, &tail);
    StatementHandle handle(raw);
    if (rc != SQLITE_OK) return LastError(rc, "preparing a statement");
    const absl::string_view rest(tail, sql.data() + sql.size() - tail);
    if (handle == nullptr || !absl::StripAsciiWhitespace(rest).empty()) {
      return absl::InternalError(
          absl::StrCat("database ", path_, ": expected exactly one SQL statement in: ", sql));
    }
    it = statements_.emplace(std::string(sql), CachedStatement{std::move(handle), false}).first;
  }
  if (it->second.in_use) {
    return absl::InternalError(
        absl::StrCat("database ", path_, ": statement already in use: ", sql));
  }
  return Statement(it->second.handle.get(), this, &it->second.in_use);
}

absl::Status Connection::Execute(absl::string_view sql) {
  const std::string text(sql);
  const int rc = sqlite3_exec(db_.get(), text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return LastError(rc);
  return absl::OkStatus();
}

absl::Status Connection::BackupTo(const std::string& path) {
  sqlite3* raw = nullptr;
  const int opened =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr);
  ConnectionHandle dest(raw);
  if (opened != SQLITE_OK) {
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot open the backup ", path, ": ",
                                            raw != nullptr ? sqlite3_errmsg(raw) : "no memory"));
  }
  sqlite3_backup* backup = sqlite3_backup_init(dest.get(), "main", db_.get(), "main");
  if (backup == nullptr) {
    const std::string why = sqlite3_errmsg(dest.get());
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot start the backup to ", path, ": ", why));
  }
  int rc = SQLITE_OK;
  do {
    rc = sqlite3_backup_step(backup, -1);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(10);
  } while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
  const int finished = sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE || finished != SQLITE_OK) {
    const std::string why = sqlite3_errstr(rc != SQLITE_DONE ? rc : finished);
    dest.reset();
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("the backup to ", path, " failed: ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Connection::QueryInt(absl::string_view sql) {
  absl::StatusOr<Statement> statement = Prepare(sql);
  if (!statement.ok()) return statement.status();
  absl::StatusOr<bool> row = statement->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat("database ", path_, ": no row from: ", sql));
  return statement->ColumnInt(0);
}

absl::StatusOr<std::string> Connection::QueryText(absl::string_view sql) {
  absl::StatusOr<Statement> statement = Prepare(sql);
  if (!statement.ok()) return statement.status();
  absl::StatusOr<bool> row = statement->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat("database ", path_, ": no row from: ", sql));
  return statement->ColumnText(0);
}

absl::StatusOr<Transaction> Transaction::Begin(Connection& connection, Kind kind) {
  absl::StatusOr<Statement> begin =
      connection.Prepare(kind == Kind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED");
  if (!begin.ok()) return begin.status();
  if (absl::Status status = begin->Run(); !status.ok()) return status;
  return Transaction(&connection);
}

Transaction::~Transaction() {
  if (connection_ == nullptr || !connection_->in_transaction()) return;
  // Nothing useful can be done with a failed rollback here: SQLite rolls
  // back itself when the connection closes, and the next BEGIN would fail
  // loudly.
  absl::StatusOr<Statement> rollback = connection_->Prepare("ROLLBACK");
  if (rollback.ok()) rollback->Run().IgnoreError();
}

absl::Status Transaction::Commit() {
  if (connection_ == nullptr) return absl::InternalError("transaction already finished");
  absl::StatusOr<Statement> commit = connection_->Prepare("COMMIT");
  if (!commit.ok()) return commit.status();
  if (absl::Status status = commit->Run(); !status.ok()) return status;
  connection_ = nullptr;
  return absl::OkStatus();
}

ConnectionPool::Lease::~Lease() {
  if (connection_ != nullptr) pool_->Release(std::move(connection_));
}

void ConnectionPool::Add(std::unique_ptr<Connection> connection) { Release(std::move(connection)); }

ConnectionPool::Lease ConnectionPool::Acquire() {
  absl::MutexLock lock(&mu_);
  // A caller that finds a connection idle never shows as waiting: the count
  // goes up and down under one hold of the lock.
  ++waiting_;
  mu_.Await(absl::Condition(this, &ConnectionPool::HasIdle));
  --waiting_;
  std::unique_ptr<Connection> connection = std::move(idle_.back());
  idle_.pop_back();
  return Lease(this, std::move(connection));
}

int ConnectionPool::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void ConnectionPool::Release(std::unique_ptr<Connection> connection) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(connection));
}

}  // namespace autotune::cache::sqlite
