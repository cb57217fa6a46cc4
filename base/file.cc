#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"

namespace autotune {
namespace {

std::string Context(absl::string_view verb, absl::string_view what, const std::string& path) {
  return what.empty() ? absl::StrCat(verb, " ", path) : absl::StrCat(verb, " ", what, " ", path);
}

// Closes on destruction; Close() reports the error close() gives.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  // 0, or the errno of a failed close().
  int Close() {
    const int result = close(fd_);
    fd_ = -1;
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what,
                                     struct stat* info) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return PosixError(Context("cannot read", what, path), errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(Context("cannot read", what, path), errno);
  // A directory opens fine and only fails at the first read; say so early.
  if (S_ISDIR(st.st_mode)) return PosixError(Context("cannot read", what, path), EISDIR);
  if (info != nullptr) *info = st;
  // Read straight into the string, sized by fstat; a file that is not
  // regular, or that grows meanwhile, is read on until its end.
  std::string contents(S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) : 0, '\0');
  size_t got = 0;
  char tail[4096];
  for (;;) {
    const bool full = got == contents.size();
    const ssize_t n = full ? read(fd.get(), tail, sizeof(tail))
                           : read(fd.get(), contents.data() + got, contents.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(Context("cannot read", what, path), errno);
    }
    if (n == 0) break;
    if (full) {
      contents.append(tail, static_cast<size_t>(n));
      contents.resize(std::max(contents.size(), 2 * got));  // room for more
    }
    got += static_cast<size_t>(n);
  }
  contents.resize(got);
  return contents;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 absl::string_view what, unsigned mode) {
  return WriteFileAtomically(path, absl::MakeConstSpan(&contents, 1), what, mode);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces, absl::string_view what,
                                 unsigned mode) {
  // Unique per process and call: threads and processes may write one path
  // at once, and the last rename wins whole.
  static std::atomic<uint64_t> calls{0};
  const std::string temp_path =
      absl::StrCat(path, ".tmp.", getpid(), ".", calls.fetch_add(1, std::memory_order_relaxed));
  const std::string context = Context("cannot write", what, path);
  Fd fd(open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (fd.get() < 0) return PosixError(context, errno);
  int error = 0;
  for (absl::string_view contents : pieces) {
    for (size_t done = 0; error == 0 && done < contents.size();) {
      const ssize_t n = write(fd.get(), contents.data() + done, contents.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        error = errno;
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  // close() may be the first to report a full disk (NFS, quotas).
  const int close_error = fd.Close();
  if (error == 0) error = close_error;
  if (error == 0 && std::rename(temp_path.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    std::remove(temp_path.c_str());
    return PosixError(context, error);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(const std::string& path,
                                                                   absl::string_view what) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return PosixError(Context("cannot map", what, path), errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(Context("cannot map", what, path), errno);
  if (S_ISDIR(st.st_mode)) return PosixError(Context("cannot map", what, path), EISDIR);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(Context("cannot map", what, path), ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return std::shared_ptr<const MappedFile>(new MappedFile(nullptr, 0));
  void* data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.get(), 0);
  if (data == MAP_FAILED) return PosixError(Context("cannot map", what, path), errno);
  return std::shared_ptr<const MappedFile>(new MappedFile(static_cast<const char*>(data), size));
}

MappedFile::~MappedFile() {
  if (size_ > 0) munmap(const_cast<char*>(data_), size_);
}

}  // namespace autotune
