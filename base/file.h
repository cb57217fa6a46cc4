// Whole-file reads, read-only mappings and atomic replacement, with errors
// that name the file.
//
//   ASSIGN_OR_RETURN(std::string text, ReadFile(path, "manifest"));
//   // NOT_FOUND "cannot read manifest x.textproto: No such file or directory"
//   RETURN_IF_ERROR(WriteFileAtomically(path, json, "bundle file"));
//   ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> pack, MappedFile::Open(path, "pack"));
//   pack->bytes()  // valid while `pack` lives
//
// Codes are PosixError's (base/posix_error.h) for the errno of the call that
// failed; a directory where a file was expected is FAILED_PRECONDITION
// (EISDIR). Thread-safe.
#ifndef AUTOTUNE_BASE_FILE_H_
#define AUTOTUNE_BASE_FILE_H_

#include <sys/stat.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace autotune {

// All bytes of `path`. Errors read "cannot read <what> <path>: <strerror>",
// or "cannot read <path>: ..." when `what` (the file's role, e.g.
// "--tls-key", "manifest") is empty. `info`, when given, receives fstat()
// of the file read (the very file, also when the path is replaced meanwhile).
absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what = {},
                                     struct stat* info = nullptr);

// Writes `contents` to a temporary file beside `path` ("<path>.tmp.<pid>.<n>",
// unique per call) and renames it over `path`: a reader sees the old file or
// the new one, never half of one, and writers racing on one path (threads or
// processes) each replace it whole. Nothing is fsync'ed: the promise is to concurrent
// readers, not across a crash. The temporary file is removed on failure.
// The file is created with `mode` (less the umask). Errors read "cannot
// write <what> <path>: <strerror>".
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 absl::string_view what = {}, unsigned mode = 0666);
// The same, the contents being `pieces` one after the other (nothing is
// joined in memory first).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces,
                                 absl::string_view what = {}, unsigned mode = 0666);

// A whole regular file mapped read-only, its pages read in by the call
// (MAP_POPULATE): reading it costs no copy and no fresh memory. The bytes
// stay valid while the object lives, also when the file is removed or
// replaced by rename meanwhile. A file truncated or written in place while
// mapped is another matter (its pages change, reading past a new end is
// SIGBUS): map only files that are replaced whole, never edited, and keep
// them read-only (WriteFileAtomically with mode 0444). An empty file maps
// to no bytes. Errors read "cannot map <what> <path>: <strerror>".
class MappedFile {
 public:
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path,
                                                                absl::string_view what = {});
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  absl::string_view bytes() const { return {data_, size_}; }

 private:
  MappedFile(const char* data, size_t size) : data_(data), size_(size) {}
  const char* data_;
  size_t size_;
};

}  // namespace autotune

#endif  // AUTOTUNE_BASE_FILE_H_
