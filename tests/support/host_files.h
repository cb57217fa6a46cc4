// What the end-to-end tests read of the host around a daemon: whole text
// files, a file's permission bits, and a loopback port free to listen on.
#ifndef AUTOTUNE_TESTS_SUPPORT_HOST_FILES_H_
#define AUTOTUNE_TESTS_SUPPORT_HOST_FILES_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

namespace autotune::testing {

// The whole of the file at `path`; "" when it cannot be read.
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file at `path` with `text` (not atomically).
inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The permission bits (07777) of `path` itself (a link is not followed); 0
// when it does not exist.
inline mode_t ModeOf(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0 ? (info.st_mode & 07777) : 0;
}

// A TCP port on loopback that nobody listens on right now; 0 when none could
// be had.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

}  // namespace autotune::testing

#endif  // AUTOTUNE_TESTS_SUPPORT_HOST_FILES_H_
