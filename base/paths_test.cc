#include "base/paths.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "base/file.h"
#include "base/scoped_env.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

// A listening Unix socket at `path`; its descriptor (closed by the caller).
int Listen(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  EXPECT_EQ(listen(fd, 1), 0);
  return fd;
}

TEST(DefaultServerAddressTest, WithoutARuntimeDirectoryTheSocketIsInAFolderOfItsOwn) {
  testing::ScopedEnv unset("XDG_RUNTIME_DIR", std::nullopt);
  EXPECT_EQ(DefaultServerAddress(),
            "unix:///tmp/autotune-" + std::to_string(getuid()) + "/autotune.sock");
  EXPECT_EQ(FallbackSocketDirectory(), "/tmp/autotune-" + std::to_string(getuid()));
}

// Found on e01f360: another local user could create /tmp/autotune-$UID.sock
// first, and the CLI sent its bearer token to that process.
TEST(CheckPrivateDirectoryTest, OnlyAFolderOfOursThatNoOneElseMayEnterPasses) {
  testing::TempDir dir;
  const std::string folder = dir.File("sock");
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  EXPECT_OK(CheckPrivateDirectory(folder));
  ASSERT_EQ(chmod(folder.c_str(), 0755), 0);
  EXPECT_THAT(CheckPrivateDirectory(folder),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("has mode 0755")));
  const std::string link = dir.File("link");
  ASSERT_EQ(symlink(folder.c_str(), link.c_str()), 0);
  EXPECT_THAT(CheckPrivateDirectory(link),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is a symbolic link")));
  ASSERT_OK(WriteFileAtomically(dir.File("file"), "x"));
  EXPECT_THAT(CheckPrivateDirectory(dir.File("file")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not a folder")));
}

TEST(CheckSocketOwnerTest, OursPassesAndWhatAnyoneCouldReplaceDoesNot) {
  testing::TempDir dir;
  const std::string folder = dir.File("run");
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  const std::string path = folder + "/autotune.sock";
  EXPECT_OK(CheckSocketOwner(path, std::nullopt)) << "nothing there: connecting will say so";
  const int fd = Listen(path);
  EXPECT_OK(CheckSocketOwner(path, std::nullopt));
  // A folder anyone may write, without the sticky bit (as /tmp has).
  ASSERT_EQ(chmod(folder.c_str(), 0777), 0);
  EXPECT_THAT(CheckSocketOwner(path, std::nullopt),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("may be written by other users and is not sticky")));
  ASSERT_EQ(chmod(folder.c_str(), 01777), 0);
  EXPECT_OK(CheckSocketOwner(path, std::nullopt));
  ASSERT_OK(WriteFileAtomically(dir.File("plain"), "x"));
  EXPECT_THAT(CheckSocketOwner(dir.File("plain"), std::nullopt),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("is not a socket")));
  // Another user's socket: only root can make one here.
  if (getuid() == 0) {
    ASSERT_EQ(chmod(folder.c_str(), 0755), 0);
    ASSERT_EQ(chown(path.c_str(), 4242, 4242), 0);
    EXPECT_THAT(CheckSocketOwner(path, std::nullopt),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         HasSubstr("belongs to uid 4242, not to you")));
    EXPECT_OK(CheckSocketOwner(path, uid_t{4242})) << "the daemon's configured user";
  }
  close(fd);
}

TEST(SocketOwnerFromEnvironmentTest, ANameOrAUid) {
  {
    testing::ScopedEnv unset("AUTOTUNE_SOCKET_OWNER", std::nullopt);
    ASSERT_OK_AND_ASSIGN(std::optional<uid_t> none, SocketOwnerFromEnvironment());
    EXPECT_FALSE(none.has_value());
  }
  {
    testing::ScopedEnv number("AUTOTUNE_SOCKET_OWNER", "4242");
    ASSERT_OK_AND_ASSIGN(std::optional<uid_t> uid, SocketOwnerFromEnvironment());
    EXPECT_EQ(uid, uid_t{4242});
  }
  {
    testing::ScopedEnv root("AUTOTUNE_SOCKET_OWNER", "root");
    ASSERT_OK_AND_ASSIGN(std::optional<uid_t> uid, SocketOwnerFromEnvironment());
    EXPECT_EQ(uid, uid_t{0});
  }
  testing::ScopedEnv nobody("AUTOTUNE_SOCKET_OWNER", "no-such-user-here");
  EXPECT_THAT(SocketOwnerFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no user of this host")));
}

}  // namespace
}  // namespace autotune
