// Internal to cache/: thin RAII over the SQLite C API.
//
//   ASSIGN_OR_RETURN(auto db, Connection::Open(path, Connection::Mode::kReadWrite,
//                                              absl::Seconds(5)));
//   ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(*db, Transaction::Kind::kWrite));
//   ASSIGN_OR_RETURN(Statement insert, db->Prepare("INSERT INTO jobs (id) VALUES (?1)"));
//   insert.BindText(1, id);
//   RETURN_IF_ERROR(insert.Run());
//   RETURN_IF_ERROR(txn.Commit());  // otherwise the destructor rolls back
//
// Values only ever reach SQL through bound parameters. Statements are
// prepared once per connection (SQLITE_PREPARE_PERSISTENT) and kept in the
// connection's cache, keyed by their text, so hot reads never re-prepare.
//
// Threading: a Connection and its statements are used by one thread at a
// time (the connections are opened without SQLite's own mutex); the store
// serialises access with its writer mutex and its reader pool.
#ifndef AUTOTUNE_CACHE_SQLITE_H_
#define AUTOTUNE_CACHE_SQLITE_H_

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace autotune::cache::sqlite {

struct ConnectionCloser {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StatementFinalizer {
  void operator()(sqlite3_stmt* statement) const noexcept { sqlite3_finalize(statement); }
};
using ConnectionHandle = std::unique_ptr<sqlite3, ConnectionCloser>;
using StatementHandle = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;

// The one place a SQLite result code becomes a Status:
// "database <path>: <context>: <message>". BUSY and LOCKED are ABORTED (a
// conflict worth retrying), FULL is RESOURCE_EXHAUSTED, READONLY, PERM and
// AUTH are PERMISSION_DENIED, CORRUPT is DATA_LOSS, NOTADB is
// FAILED_PRECONDITION, everything else (CANTOPEN and IOERR included: the
// server's own trouble) INTERNAL. Never UNAVAILABLE: over gRPC that code
// means the server could not be reached, and clients say so (store.h).
absl::Status Error(int code, absl::string_view message, absl::string_view path,
                   absl::string_view context = {});

class Connection;

// A cached prepared statement checked out for one use. On destruction it is
// reset and its bindings cleared, which also ends the read it may hold open.
// Bind errors are remembered and reported by the next Step().
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Parameters are numbered from 1 (?1, ?2, ...).
  Statement& BindInt(int index, int64_t value);
  Statement& BindText(int index, absl::string_view text);
  // Binds NULL for empty text: optional references such as binary_sha256.
  Statement& BindTextOrNull(int index, absl::string_view text);
  Statement& BindBlob(int index, absl::string_view bytes);

  // true when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows (or whose rows are not wanted).
  absl::Status Run();

  int64_t ColumnInt(int column) const;
  std::string ColumnText(int column) const;
  // Valid until the next Step() or the statement's destruction.
  absl::string_view ColumnBlob(int column) const;
  bool ColumnIsNull(int column) const;

 private:
  friend class Connection;
  Statement(sqlite3_stmt* statement, Connection* connection, bool* in_use);
  void NoteBind(int rc);

  sqlite3_stmt* statement_;
  Connection* connection_;
  bool* in_use_;
  int bind_error_ = SQLITE_OK;
};

class Connection {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  // Opens an existing file (never creates one: the store creates the file
  // itself so that it gets mode 0600) and sets busy_timeout.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path, Mode mode,
                                                          absl::Duration busy_timeout);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() = default;

  // The cached statement for `sql`, which must be one statement. A statement
  // cannot be checked out twice at once (INTERNAL): nested uses of the same
  // text need different text.
  absl::StatusOr<Statement> Prepare(absl::string_view sql);
  // Runs fixed SQL without parameters (schema changes, pragmas); several
  // statements allowed. Not cached.
  absl::Status Execute(absl::string_view sql);
  // The first column of the first row of `sql`, e.g. "PRAGMA user_version".
  absl::StatusOr<int64_t> QueryInt(absl::string_view sql);
  absl::StatusOr<std::string> QueryText(absl::string_view sql);
  // Copies this connection's database into `path`, an empty file the
  // caller created (in a folder no one else may write), with SQLite's
  // online backup API, in one step: a consistent snapshot that does not
  // block writers (WAL). The file is removed when the copy fails.
  absl::Status BackupTo(const std::string& path);

  // An error from the last failed call on this connection (see Error above).
  absl::Status LastError(int code, absl::string_view context = {});
  // The result code of the last error made by LastError().
  int last_error_code() const { return last_error_code_; }
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t changes() const { return sqlite3_changes64(db_.get()); }
  bool in_transaction() const { return sqlite3_get_autocommit(db_.get()) == 0; }
  // Distinct statements prepared so far (each once).
  size_t cached_statements() const { return statements_.size(); }
  const std::string& path() const { return path_; }

 private:
  struct CachedStatement {
    StatementHandle handle;
    bool in_use = false;
  };

  Connection(ConnectionHandle db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}

  // Declared first so it is destroyed last, after every statement.
  ConnectionHandle db_;
  std::string path_;
  std::map<std::string, CachedStatement, std::less<>> statements_;
  int last_error_code_ = SQLITE_OK;
};

// Rolls back on destruction unless Commit() succeeded. Writes use BEGIN
// IMMEDIATE so that the write lock is taken up front and a busy database is
// reported at the start (after busy_timeout) rather than at the first write.
// Reads use a deferred transaction: a stable snapshot across statements.
class Transaction {
 public:
  enum class Kind { kRead, kWrite };

  static absl::StatusOr<Transaction> Begin(Connection& connection, Kind kind);

  Transaction(Transaction&& other) noexcept
      : connection_(std::exchange(other.connection_, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  explicit Transaction(Connection* connection) : connection_(connection) {}
  Connection* connection_;  // null once committed or moved from
};

// Read connections handed out one caller at a time.
class ConnectionPool {
 public:
  // Returns its connection to the pool on destruction.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), connection_(std::move(other.connection_)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    Connection& operator*() const { return *connection_; }
    Connection* operator->() const { return connection_.get(); }

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<Connection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    ConnectionPool* pool_;
    std::unique_ptr<Connection> connection_;
  };

  ConnectionPool() = default;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void Add(std::unique_ptr<Connection> connection);
  // Blocks until a connection is free.
  Lease Acquire();
  // How many callers are blocked in Acquire() right now: a pool too small
  // for its readers shows here.
  int waiting() const;

 private:
  void Release(std::unique_ptr<Connection> connection);
  bool HasIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !idle_.empty(); }

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace autotune::cache::sqlite

#endif  // AUTOTUNE_CACHE_SQLITE_H_
