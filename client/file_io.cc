#include "client/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace autotune::client {
namespace {

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

absl::Status ErrnoStatus(int error, absl::string_view context) {
  const std::string message = absl::StrCat(context, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot open ", what, " ", path));
  std::string contents;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) contents.append(buffer, n);
  if (std::ferror(file.get())) {
    return ErrnoStatus(errno, absl::StrCat("cannot read ", what, " ", path));
  }
  return contents;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 absl::string_view what) {
  const std::string temp_path = absl::StrCat(path, ".tmp.", getpid());
  FilePtr file(std::fopen(temp_path.c_str(), "wb"));
  if (file == nullptr) {
    return ErrnoStatus(errno, absl::StrCat("cannot create ", what, " ", path));
  }
  const bool written =
      std::fwrite(contents.data(), 1, contents.size(), file.get()) == contents.size();
  const int write_error = errno;
  const bool closed = std::fclose(file.release()) == 0;
  const int close_error = errno;
  if (!written || !closed) {
    std::remove(temp_path.c_str());
    return ErrnoStatus(written ? close_error : write_error,
                       absl::StrCat("cannot write ", what, " ", path));
  }
  if (std::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    std::remove(temp_path.c_str());
    return ErrnoStatus(rename_error, absl::StrCat("cannot write ", what, " ", path));
  }
  return absl::OkStatus();
}

}  // namespace autotune::client
