#include "base/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;
using ::autotune::testing::TempDir;
using ::testing::ElementsAre;

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<std::string> FileNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ReadFileTest, ReadsEveryByte) {
  TempDir dir;
  // Larger than one read buffer, with NUL bytes in it.
  std::string bytes(200000, 'x');
  bytes[7] = '\0';
  bytes.back() = '\0';
  WriteRaw(dir.File("blob"), bytes);
  ASSERT_OK_AND_ASSIGN(std::string read, ReadFile(dir.File("blob")));
  EXPECT_EQ(read, bytes);
  WriteRaw(dir.File("empty"), "");
  ASSERT_OK_AND_ASSIGN(std::string empty, ReadFile(dir.File("empty")));
  EXPECT_EQ(empty, "");
}

// Files whose size fstat does not tell (here a pipe, of 0 bytes by fstat,
// larger than any one read) are read to their end.
TEST(ReadFileTest, ReadsAFileWhoseSizeIsNotKnownToItsEnd) {
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string bytes(300000, 'y');
  bytes[4096] = '\0';
  bytes.back() = 'z';
  std::thread writer([&] { WriteRaw(fifo, bytes); });
  absl::StatusOr<std::string> read = ReadFile(fifo);
  writer.join();
  ASSERT_OK(read.status());
  EXPECT_EQ(*read, bytes);
}

TEST(ReadFileTest, SaysWhatFstatSaysOfTheFileRead) {
  TempDir dir;
  const std::string path = dir.File("answer");
  WriteRaw(path, "twelve bytes");
  struct stat info;
  ASSERT_OK_AND_ASSIGN(std::string read, ReadFile(path, "answer", &info));
  struct stat expected;
  ASSERT_EQ(stat(path.c_str(), &expected), 0);
  EXPECT_EQ(info.st_ino, expected.st_ino);
  EXPECT_EQ(info.st_size, 12);
}

TEST(ReadFileTest, MissingFileNamesItsRoleAndPath) {
  TempDir dir;
  const std::string path = dir.File("nope.textproto");
  EXPECT_THAT(ReadFile(path, "manifest"),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("cannot read manifest ", path, ": No such file or directory")));
  EXPECT_THAT(ReadFile(path),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("cannot read ", path, ": No such file or directory")));
}

TEST(ReadFileTest, DirectoryIsRefusedAsSuch) {
  TempDir dir;
  EXPECT_THAT(ReadFile(dir.path(), "--tls-key"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("cannot read --tls-key ", dir.path(), ": Is a directory")));
}

TEST(ReadFileTest, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  TempDir dir;
  WriteRaw(dir.File("secret"), "x");
  ASSERT_EQ(chmod(dir.File("secret").c_str(), 0), 0);
  EXPECT_THAT(ReadFile(dir.File("secret")),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::HasSubstr("secret")));
}

TEST(WriteFileAtomicallyTest, ReplacesTheFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.File("bundle.json");
  WriteRaw(path, "old contents, longer than the new");
  ASSERT_OK(WriteFileAtomically(path, "new", "bundle file"));
  ASSERT_OK_AND_ASSIGN(std::string read, ReadFile(path));
  EXPECT_EQ(read, "new");
  EXPECT_THAT(FileNames(dir.path()), ElementsAre("bundle.json"));
}

TEST(WriteFileAtomicallyTest, MissingDirectoryNamesThePath) {
  TempDir dir;
  const std::string path = dir.File("no/such/bundle.json");
  EXPECT_THAT(WriteFileAtomically(path, "x", "bundle file"),
              StatusIs(absl::StatusCode::kNotFound, absl::StrCat("cannot write bundle file ", path,
                                                                 ": No such file or directory")));
}

TEST(WriteFileAtomicallyTest, FailedRenameRemovesTheTemporary) {
  TempDir dir;
  // rename() cannot put a file over a non-empty directory.
  const std::string path = dir.File("taken");
  ASSERT_TRUE(std::filesystem::create_directory(path));
  WriteRaw(dir.File("taken/inside"), "x");
  EXPECT_THAT(WriteFileAtomically(path, "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("cannot write ", path, ": Is a directory")));
  EXPECT_THAT(FileNames(dir.path()), ElementsAre("taken"));
}

TEST(WriteFileAtomicallyTest, WritesPiecesOneAfterTheOtherWithTheMode) {
  TempDir dir;
  const std::string path = dir.File("pack");
  const std::string middle(70000, 'x');
  const std::vector<absl::string_view> pieces = {"head", "", middle, "tail"};
  ASSERT_OK(WriteFileAtomically(path, pieces, "pack", 0444));
  ASSERT_OK_AND_ASSIGN(std::string read, ReadFile(path));
  EXPECT_EQ(read, absl::StrCat("head", std::string(70000, 'x'), "tail"));
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0222, 0u);
  // A read-only file is still replaced whole: rename needs only the folder.
  ASSERT_OK(WriteFileAtomically(path, "new", "pack", 0444));
  ASSERT_OK_AND_ASSIGN(read, ReadFile(path));
  EXPECT_EQ(read, "new");
}

TEST(MappedFileTest, MapsEveryByteAndOutlivesTheFilesReplacement) {
  TempDir dir;
  const std::string path = dir.File("pack");
  const std::string bytes = absl::StrCat("start", std::string(3 * 4096 + 7, '\0'), "end");
  WriteRaw(path, bytes);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const MappedFile> mapped, MappedFile::Open(path, "pack"));
  EXPECT_EQ(mapped->bytes(), bytes);
  ASSERT_OK(WriteFileAtomically(path, "replaced"));
  std::filesystem::remove(path);
  EXPECT_EQ(mapped->bytes(), bytes);
}

TEST(MappedFileTest, EmptyFileMapsToNoBytes) {
  TempDir dir;
  WriteRaw(dir.File("empty"), "");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const MappedFile> mapped,
                       MappedFile::Open(dir.File("empty")));
  EXPECT_TRUE(mapped->bytes().empty());
}

TEST(MappedFileTest, ErrorsNameTheRoleAndPath) {
  TempDir dir;
  EXPECT_THAT(
      MappedFile::Open(dir.File("none"), "pack"),
      StatusIs(absl::StatusCode::kNotFound,
               absl::StrCat("cannot map pack ", dir.File("none"), ": No such file or directory")));
  EXPECT_THAT(MappedFile::Open(dir.path(), "pack"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("cannot map pack ", dir.path(), ": Is a directory")));
  EXPECT_THAT(MappedFile::Open("/dev/null", "pack"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "cannot map pack /dev/null: not a regular file"));
}

}  // namespace
}  // namespace autotune
