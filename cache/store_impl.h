// Internal to the Store (cache/store*.cc): the state behind a Store, and
// Impl::Write, the one way its mutators write.
#ifndef AUTOTUNE_CACHE_STORE_IMPL_H_
#define AUTOTUNE_CACHE_STORE_IMPL_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cache/lock_file.h"
#include "cache/sqlite.h"
#include "cache/store.h"

namespace autotune::cache {

class Store::Impl {
 public:
  explicit Impl(const StoreOptions& options) : options(options) {}

  ~Impl() {
    absl::MutexLock lock(&writer_mu);
    // Folds the WAL back into the main file so the database is one
    // self-contained file after close (copyable, backup-able).
    if (writer != nullptr) writer->Execute("PRAGMA wal_checkpoint(TRUNCATE)").IgnoreError();
  }

  const StoreOptions options;
  int schema_version = 0;
  // Each bumped just before and just after the commit of a write that can
  // change a family's current version, or what a lookup answers (entries,
  // binaries), so each is odd while such a commit is in flight; see
  // Store::family_generation() and Store::entry_generation().
  std::atomic<int64_t> family_generation{0};
  std::atomic<int64_t> entry_generation{0};
  // Held shared by a Store::CommitHold, exclusively around those commits
  // (Write::CommitVisible).
  mutable absl::Mutex commit_gate;
  LockFile lock;  // released last, after every connection has closed
  // The database file's identity when opened (CheckAvailable()).
  dev_t device = 0;
  ino_t inode = 0;
  absl::Mutex writer_mu;
  std::unique_ptr<sqlite::Connection> writer ABSL_GUARDED_BY(writer_mu);
  // Declared after the writer so its connections close first and the writer,
  // closing last, removes the WAL.
  sqlite::ConnectionPool readers;

  // Every mutator's write: holds writer_mu for the object's life, so the
  // writer connection is this write's alone, and runs one write transaction
  // on it, rolled back unless a commit succeeds.
  //
  //   Impl::Write write(*impl_);
  //   RETURN_IF_ERROR(write.Begin());
  //   RETURN_IF_ERROR(WriteBinary(write.db(), binary, sha256).status());
  //   return write.Commit();
  class ABSL_SCOPED_LOCKABLE Write {
   public:
    explicit Write(Impl& impl) ABSL_EXCLUSIVE_LOCK_FUNCTION(impl.writer_mu);
    // Rolls back what was not committed, then lets the writer go.
    ~Write() ABSL_UNLOCK_FUNCTION();
    Write(const Write&) = delete;
    Write& operator=(const Write&) = delete;

    // Begins the transaction (BEGIN IMMEDIATE: a busy database fails here,
    // after the busy timeout, before anything is written). Once, first.
    absl::Status Begin();
    // The writer connection; statements on it run in the transaction.
    sqlite::Connection& db() const { return *db_; }
    // Commits a write that cannot move either generation.
    absl::Status Commit();
    // Commits inside the commit gate, with the given generations odd for
    // the duration: for a write that may change a family's current version
    // (`families`) or what a lookup answers (`entries`).
    absl::Status CommitVisible(bool families, bool entries);

   private:
    Impl& impl_;
    sqlite::Connection* db_;
    std::optional<sqlite::Transaction> transaction_;
  };
};

}  // namespace autotune::cache

#endif  // AUTOTUNE_CACHE_STORE_IMPL_H_
