// Opening, ownership and schema upgrades of the store's file.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "cache/schema.h"
#include "cache/store.h"
#include "cache/store_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/problem.h"

namespace autotune::cache {
namespace {

using ::autotune::cache::testing::EqualsProto;
using ::autotune::cache::testing::KeyOf;
using ::autotune::cache::testing::MakeBinary;
using ::autotune::cache::testing::MakeEntry;
using ::autotune::cache::testing::MakeFamily;
using ::autotune::cache::testing::MakeProblem;
using ::autotune::cache::testing::MeasurementFor;
using ::autotune::cache::testing::OpenRaw;
using ::autotune::cache::testing::OptionsFor;
using ::autotune::cache::testing::TempDir;
using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

unsigned ModeOf(const std::string& path) {
  struct stat info;
  EXPECT_EQ(stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 0777;
}

TEST(StoreOpenTest, CreatesAnOwnerOnlyDatabaseAtTheCurrentSchema) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(OptionsFor(path)));
  EXPECT_EQ(store->path(), path);
  EXPECT_EQ(store->schema_version(), kSchemaVersion);
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_EQ(ModeOf(path + ".lock"), 0600u);
  // SQLite gives its side files the database's mode.
  for (const char* suffix : {"-wal", "-shm"}) {
    ASSERT_TRUE(std::filesystem::exists(path + suffix)) << suffix;
    EXPECT_EQ(ModeOf(path + suffix), 0600u) << suffix;
  }
  store.reset();

  auto raw = OpenRaw(path);
  EXPECT_EQ(raw->QueryInt("PRAGMA user_version").value(), kSchemaVersion);
  EXPECT_EQ(raw->QueryInt("PRAGMA application_id").value(), schema::kApplicationId);
  EXPECT_EQ(raw->QueryText("PRAGMA journal_mode").value(), "wal");
}

TEST(StoreOpenTest, ReopenKeepsDataAndCloseLeavesNoWal) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  const v1::KernelFamily family = MakeFamily("gemm");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(OptionsFor(path)));
    ASSERT_OK(store->PutFamily(family, false).status());
  }
  EXPECT_TRUE(!std::filesystem::exists(path + "-wal") ||
              std::filesystem::file_size(path + "-wal") == 0)
      << "closing checkpoints the WAL into the main file";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(OptionsFor(path)));
  ASSERT_OK_AND_ASSIGN(FamilyRecord record, store->GetFamily("gemm"));
  EXPECT_THAT(record.family, EqualsProto(family));
}

TEST(StoreOpenTest, RejectsBadOptions) {
  TempDir dir;
  StoreOptions options = OptionsFor(dir.File("cache.db"));
  options.path = "";
  EXPECT_THAT(Store::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "options.path is empty"));
  options = OptionsFor(dir.File("cache.db"));
  options.readers = 0;
  EXPECT_THAT(Store::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("options.readers is 0")));
  options = OptionsFor(dir.File("cache.db"));
  options.migrate_to = kSchemaVersion + 1;
  EXPECT_THAT(Store::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("options.migrate_to")));
}

TEST(StoreOpenTest, MissingDirectoryNamesThePathAndTheReason) {
  TempDir dir;
  const std::string path = dir.File("no/such/dir/cache.db");
  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("cannot open database ", path, ": No such file or directory")));
}

TEST(StoreOpenTest, PathUnderAFileNamesThePathAndTheReason) {
  TempDir dir;
  WriteFile(dir.File("file"), "x");
  const std::string path = dir.File("file/cache.db");
  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("cannot open database ", path, ": Not a directory")));
}

TEST(StoreOpenTest, DirectoryIsNotADatabase) {
  TempDir dir;
  EXPECT_THAT(Store::Open(OptionsFor(dir.path())),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("cannot open database ", dir.path(), ": Is a directory")));
}

TEST(StoreOpenTest, UnreadableFileNamesThePathAndTheReason) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  TempDir dir;
  const std::string path = dir.File("cache.db");
  WriteFile(path, "");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr(absl::StrCat("cannot open database ", path,
                                              ": Permission denied (the database must be "
                                              "readable and writable by this user"))));
}

TEST(StoreOpenTest, FileThatIsNotSqliteIsRefusedAndLeftAlone) {
  TempDir dir;
  const std::string path = dir.File("notes.txt");
  std::string text;
  for (int i = 0; i < 200; ++i) absl::StrAppend(&text, "these are not the pages you want\n");
  WriteFile(path, text);
  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat(path, " is not an autotune database: file is not a database")));
  EXPECT_EQ(ReadFile(path), text);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST(StoreOpenTest, OtherSqliteDatabasesAreRefusedAndLeftAlone) {
  TempDir dir;
  const std::string plain = dir.File("plain.db");
  OpenRaw(plain)
      ->Execute("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('hi')")
      .IgnoreError();
  const std::string plain_bytes = ReadFile(plain);
  EXPECT_THAT(Store::Open(OptionsFor(plain)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat(plain,
                                    " is not an autotune database: it holds tables but no "
                                    "autotune schema")));
  EXPECT_EQ(ReadFile(plain), plain_bytes);

  const std::string tagged = dir.File("tagged.db");
  OpenRaw(tagged)->Execute("PRAGMA application_id = 42; PRAGMA user_version = 1").IgnoreError();
  EXPECT_THAT(Store::Open(OptionsFor(tagged)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is not an autotune database: its application_id is 42")));
}

TEST(StoreOpenTest, NewerSchemaIsRefusedAndLeftUntouched) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(OptionsFor(path)));
    ASSERT_OK(store->PutFamily(MakeFamily("gemm"), false).status());
  }
  // What a future build would leave behind.
  ASSERT_OK(OpenRaw(path)->Execute("PRAGMA user_version = 7"));
  const std::string bytes = ReadFile(path);

  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("database ", path,
                                    " has schema version 7, newer than this build supports (",
                                    kSchemaVersion, "); upgrade autotune")));
  EXPECT_EQ(ReadFile(path), bytes);
  EXPECT_EQ(OpenRaw(path)->QueryInt("PRAGMA user_version").value(), 7);
}

TEST(StoreOpenTest, NewerSchemaInRollbackJournalModeKeepsItsJournalMode) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  ASSERT_OK(OpenRaw(path)->Execute(
      absl::StrCat("CREATE TABLE future (x); PRAGMA application_id = ", schema::kApplicationId,
                   "; PRAGMA user_version = 99")));
  const std::string bytes = ReadFile(path);
  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("schema version 99")));
  EXPECT_EQ(ReadFile(path), bytes) << "not even switched to WAL";
  EXPECT_EQ(OpenRaw(path)->QueryText("PRAGMA journal_mode").value(), "delete");
}

TEST(StoreOpenTest, MigrationsAreOrderedUpToTheSchemaVersion) {
  const auto migrations = schema::Migrations();
  ASSERT_EQ(static_cast<int>(migrations.size()), kSchemaVersion);
  for (size_t i = 0; i < migrations.size(); ++i) {
    EXPECT_EQ(migrations[i].version, static_cast<int>(i) + 1);
    EXPECT_FALSE(migrations[i].description.empty());
  }
}

TEST(StoreOpenTest, Version1DatabaseIsUpgradedWithItsDataIntact) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  std::vector<v1::Entry> entries;
  v1::Measurement measurement;
  v1::Job job;
  std::string sha;
  {
    StoreOptions options = OptionsFor(path);
    options.migrate_to = 1;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(options));
    ASSERT_EQ(store->schema_version(), 1);
    ASSERT_OK_AND_ASSIGN(FamilyRecord family, store->PutFamily(MakeFamily("gemm"), true));
    ASSERT_OK_AND_ASSIGN(sha, store->PutBinary(MakeBinary("old cubin", "12.4")));
    const std::string hash = family.content_hash;
    entries = {
        MakeEntry("gemm", hash, MakeProblem({{"m", 64}}, v1::BFLOAT16), "H200", "12.4", sha),
        MakeEntry("gemm", hash, MakeProblem({{"m", 128}}, v1::BFLOAT16), "H200", "13.0"),
        MakeEntry("gemm", hash, MakeProblem({{"m", 256}}, v1::BFLOAT16), "H200", ""),
    };
    for (const v1::Entry& entry : entries) ASSERT_OK(store->PutEntry(entry));
    measurement = MeasurementFor(entries[0], 128);
    ASSERT_OK(store->AddMeasurement(measurement));
    ASSERT_OK_AND_ASSIGN(job, store->CreateJob({}));
    // The NVRTC filter needs the version-2 column.
    v1::EntryFilter filter;
    filter.set_nvrtc_older_than("12.8");
    EXPECT_THAT(store->ListEntries(filter, -1, 0),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("schema version 2")));
  }
  {
    auto raw = OpenRaw(path);
    EXPECT_EQ(raw->QueryInt("PRAGMA user_version").value(), 1);
    EXPECT_EQ(raw->QueryInt("SELECT COUNT(*) FROM pragma_table_info('entries')"
                            " WHERE name = 'nvrtc_version_num'")
                  .value(),
              0);
  }

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(OptionsFor(path)));
  EXPECT_EQ(store->schema_version(), kSchemaVersion);
  for (const v1::Entry& entry : entries) {
    ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> found, store->FindEntry(KeyOf(entry)));
    ASSERT_TRUE(found.has_value());
    EXPECT_THAT(*found, EqualsProto(entry));
  }
  ASSERT_OK_AND_ASSIGN(v1::Binary binary, store->GetBinary(sha));
  EXPECT_EQ(binary.cubin(), "old cubin");
  ASSERT_OK_AND_ASSIGN(auto measurements, store->ListMeasurements(KeyOf(entries[0])));
  ASSERT_THAT(measurements, SizeIs(1));
  EXPECT_THAT(measurements[0], EqualsProto(measurement));
  ASSERT_OK_AND_ASSIGN(v1::Job stored_job, store->GetJob(job.id()));
  EXPECT_THAT(stored_job, EqualsProto(job));
  ASSERT_OK_AND_ASSIGN(FamilyRecord family, store->GetFamily("gemm"));
  EXPECT_TRUE(family.builtin);

  // The upgrade back-filled the NVRTC version of entries written before it
  // existed: only the 12.4 entry is older than 12.8, the unknown one is not.
  v1::EntryFilter filter;
  filter.set_nvrtc_older_than("12.8");
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Entry> old, store->ListEntries(filter, -1, 0));
  ASSERT_THAT(old, SizeIs(1));
  EXPECT_EQ(old[0].nvrtc_version(), "12.4");
  filter.set_nvrtc_older_than("13.1");
  int64_t total = 0;
  ASSERT_OK(store->ListEntries(filter, -1, 0, &total).status());
  EXPECT_EQ(total, 2);
  store.reset();

  auto raw = OpenRaw(path);
  EXPECT_EQ(raw->QueryInt("PRAGMA user_version").value(), kSchemaVersion);
  EXPECT_EQ(
      raw->QueryInt("SELECT COUNT(*) FROM sqlite_master WHERE name = 'entries_by_nvrtc'").value(),
      1);
  EXPECT_EQ(raw->QueryInt("SELECT SUM(nvrtc_version_num) FROM entries").value(), 12004 + 13000);
}

TEST(StoreOpenTest, SecondOpenerIsToldWhoHoldsTheDatabase) {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> first, Store::Open(OptionsFor(path)));
  EXPECT_EQ(ReadFile(path + ".lock"), absl::StrCat(getpid(), "\n"));
  EXPECT_THAT(Store::Open(OptionsFor(path)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("database ", path, " is in use by another process (pid ",
                                    getpid(), ")")));
  first.reset();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> second, Store::Open(OptionsFor(path)));
  EXPECT_EQ(second->schema_version(), kSchemaVersion);
}

TEST(StoreOpenTest, NonExclusiveStoresShareTheFile) {
  TempDir dir;
  StoreOptions options = OptionsFor(dir.File("cache.db"));
  options.exclusive = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> writer, Store::Open(options));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> reader, Store::Open(options));
  ASSERT_OK(writer->PutFamily(MakeFamily("gemm"), false).status());
  ASSERT_OK(reader->GetFamily("gemm").status());
  EXPECT_FALSE(std::filesystem::exists(options.path + ".lock"));
}

}  // namespace
}  // namespace autotune::cache
