// The exclusive flock on "<database>.lock" that makes one process the owner
// of a store's database file (cache/store.h, "Ownership").
//
//   ASSIGN_OR_RETURN(LockFile lock, LockFile::Acquire("/var/lib/autotune/cache.db"));
//
// The lock lasts as long as the object (moves carry it). The file is left in
// place on close: removing it would let a third process lock a fresh inode
// while a second still holds the old one.
#ifndef AUTOTUNE_CACHE_LOCK_FILE_H_
#define AUTOTUNE_CACHE_LOCK_FILE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace autotune::cache {

class LockFile {
 public:
  LockFile() = default;
  LockFile(LockFile&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  LockFile& operator=(LockFile&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~LockFile();

  // Creates "<database_path>.lock" (mode 0600) if missing, locks it without
  // waiting and writes this process's pid into it. FAILED_PRECONDITION
  // "database <path> is in use by another process (pid N)" when another
  // process holds it; PosixError's codes when the file cannot be opened,
  // locked or written.
  static absl::StatusOr<LockFile> Acquire(const std::string& database_path);

 private:
  // The holder writes its pid right after locking; a reader racing that
  // write sees an empty file.
  std::string ReadPid() const;

  int fd_ = -1;
};

}  // namespace autotune::cache

#endif  // AUTOTUNE_CACHE_LOCK_FILE_H_
