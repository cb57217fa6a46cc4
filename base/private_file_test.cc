#include "base/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "base/file.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(PrivateFileTest, CreatesAFileOwnerOnly) {
  TempDir dir;
  const std::string path = dir.File("new.db");
  ASSERT_OK_AND_ASSIGN(PrivateFile file, OpenPrivateFile(path, O_RDWR, "database"));
  close(file.fd);
  EXPECT_EQ(file.tightened_from, 0u);
  EXPECT_EQ(ModeOf(path), 0600u);
}

TEST(PrivateFileTest, TightensAFileOfOursThatOthersMayReadOrWrite) {
  TempDir dir;
  const std::string path = dir.File("loose.log");
  ASSERT_OK(WriteFileAtomically(path, "kept\n"));
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  ASSERT_OK_AND_ASSIGN(PrivateFile file,
                       OpenPrivateFile(path, O_WRONLY | O_APPEND, "the audit log"));
  close(file.fd);
  EXPECT_EQ(file.tightened_from, 0666u);
  EXPECT_EQ(ModeOf(path), 0600u);
  ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(path));
  EXPECT_EQ(text, "kept\n");
}

TEST(PrivateFileTest, RefusesASymbolicLinkAndLeavesItsTargetAlone) {
  TempDir dir;
  const std::string target = dir.File("target");
  ASSERT_OK(WriteFileAtomically(target, "x"));
  ASSERT_EQ(chmod(target.c_str(), 0644), 0);
  const std::string link = dir.File("link");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_THAT(OpenPrivateFile(link, O_WRONLY | O_APPEND, "the audit log"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the audit log " + link + " is a symbolic link: refused")));
  EXPECT_EQ(ModeOf(target), 0644u);
  // A dangling link is not followed to create its target either.
  const std::string dangling = dir.File("dangling");
  ASSERT_EQ(symlink(dir.File("nowhere").c_str(), dangling.c_str()), 0);
  EXPECT_THAT(OpenPrivateFile(dangling, O_RDWR, "database"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("symbolic link")));
  EXPECT_NE(access(dir.File("nowhere").c_str(), F_OK), 0);
}

TEST(PrivateFileTest, RefusesWhatIsNotARegularFileAndAMissingOneWithoutCreate) {
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(OpenPrivateFile(fifo, O_RDWR, "database"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a regular file")));
  EXPECT_THAT(OpenPrivateFile(dir.File("absent-wal"), O_RDWR, "the database's file",
                              /*create=*/false),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent-wal")));
}

TEST(PrivateFileTest, RefusesAFileAnotherUserOwnsAndLeavesItsModeAlone) {
  TempDir dir;
  std::string path = "/etc/passwd";  // root's
  if (geteuid() == 0) {
    path = dir.File("nobodys");
    ASSERT_OK(WriteFileAtomically(path, "x"));
    ASSERT_EQ(chmod(path.c_str(), 0644), 0);
    ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  }
  const mode_t before = ModeOf(path);
  EXPECT_THAT(
      OpenPrivateFile(path, O_RDONLY, "database", /*create=*/false),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not to this process's uid")));
  EXPECT_EQ(ModeOf(path), before);
}

}  // namespace
}  // namespace autotune
