#include "cache/sqlite.h"

#include <atomic>
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_matchers.h"
#include "cache/store_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::cache::sqlite {
namespace {

using ::autotune::cache::testing::OpenRaw;
using ::autotune::cache::testing::TempDir;
using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("test.db");
    db_ = OpenRaw(path_);
    ASSERT_NE(db_, nullptr);
    ASSERT_OK(
        db_->Execute("CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT, data BLOB NOT NULL)"));
  }

  absl::Status Insert(Connection& db, const std::string& text) {
    ASSIGN_OR_RETURN(Statement insert, db.Prepare("INSERT INTO t (text, data) VALUES (?1, ?2)"));
    insert.BindTextOrNull(1, text).BindBlob(2, "");
    return insert.Run();
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Connection> db_;
};

TEST_F(SqliteTest, TransactionRollsBackUnlessCommitted) {
  {
    ASSERT_OK_AND_ASSIGN(Transaction txn, Transaction::Begin(*db_, Transaction::Kind::kWrite));
    ASSERT_OK(Insert(*db_, "dropped"));
    EXPECT_EQ(db_->QueryInt("SELECT COUNT(*) FROM t").value(), 1);
  }
  EXPECT_FALSE(db_->in_transaction());
  EXPECT_EQ(db_->QueryInt("SELECT COUNT(*) FROM t").value(), 0);
  {
    ASSERT_OK_AND_ASSIGN(Transaction txn, Transaction::Begin(*db_, Transaction::Kind::kWrite));
    ASSERT_OK(Insert(*db_, "kept"));
    ASSERT_OK(txn.Commit());
  }
  EXPECT_EQ(db_->QueryInt("SELECT COUNT(*) FROM t").value(), 1);
}

TEST_F(SqliteTest, BoundTextIsDataNotSql) {
  const std::string hostile = "x'); DROP TABLE t; --";
  ASSERT_OK(Insert(*db_, hostile));
  ASSERT_OK_AND_ASSIGN(std::string text, db_->QueryText("SELECT text FROM t"));
  EXPECT_EQ(text, hostile);
  EXPECT_EQ(db_->QueryInt("SELECT COUNT(*) FROM t").value(), 1);
}

TEST_F(SqliteTest, EmptyTextBindsNullAndEmptyBlobStaysABlob) {
  // data is NOT NULL: an empty blob must not turn into NULL.
  ASSERT_OK(Insert(*db_, ""));
  EXPECT_EQ(db_->QueryInt("SELECT COUNT(*) FROM t WHERE text IS NULL").value(), 1);
  EXPECT_EQ(db_->QueryInt("SELECT length(data) FROM t").value(), 0);
}

TEST_F(SqliteTest, StatementsAreReusedAndCannotBeCheckedOutTwice) {
  const size_t before = db_->cached_statements();
  for (int i = 0; i < 3; ++i) ASSERT_OK(Insert(*db_, "row"));
  EXPECT_EQ(db_->cached_statements(), before + 1) << "prepared once, used three times";
  EXPECT_EQ(db_->QueryInt("SELECT COUNT(*) FROM t").value(), 3);

  ASSERT_OK_AND_ASSIGN(Statement first, db_->Prepare("SELECT id FROM t"));
  EXPECT_THAT(db_->Prepare("SELECT id FROM t"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("already in use")));
}

TEST_F(SqliteTest, ResetOnDestructionSoTheNextUseStartsOver) {
  for (int i = 0; i < 3; ++i) ASSERT_OK(Insert(*db_, "row"));
  for (int round = 0; round < 2; ++round) {
    ASSERT_OK_AND_ASSIGN(Statement select, db_->Prepare("SELECT id FROM t ORDER BY id"));
    ASSERT_OK_AND_ASSIGN(bool row, select.Step());
    ASSERT_TRUE(row);
    EXPECT_EQ(select.ColumnInt(0), 1);  // stopped early last round, starts at the top again
  }
}

TEST_F(SqliteTest, PrepareRejectsSeveralStatements) {
  EXPECT_THAT(db_->Prepare("SELECT 1; SELECT 2"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("exactly one SQL statement")));
}

TEST_F(SqliteTest, ErrorsNameTheDatabaseAndSqliteMessage) {
  EXPECT_THAT(
      db_->Prepare("SELECT nope FROM t"),
      StatusIs(absl::StatusCode::kInternal, ::testing::AllOf(StartsWith("database " + path_ + ": "),
                                                             HasSubstr("no such column: nope"))));
}

TEST_F(SqliteTest, BindErrorsSurfaceAtStep) {
  ASSERT_OK_AND_ASSIGN(Statement select, db_->Prepare("SELECT ?1"));
  select.BindInt(5, 1);
  EXPECT_THAT(select.Step(), StatusIs(absl::StatusCode::kInternal, HasSubstr("binding")));
}

TEST_F(SqliteTest, SecondWriterTimesOutAsAborted) {
  ASSERT_OK(db_->Execute("PRAGMA journal_mode = WAL"));
  ASSERT_OK_AND_ASSIGN(
      auto other, Connection::Open(path_, Connection::Mode::kReadWrite, absl::Milliseconds(50)));
  ASSERT_OK_AND_ASSIGN(Transaction held, Transaction::Begin(*db_, Transaction::Kind::kWrite));
  EXPECT_THAT(Transaction::Begin(*other, Transaction::Kind::kWrite),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("database is locked")));
}

TEST_F(SqliteTest, ReadOnlyConnectionRefusesWrites) {
  ASSERT_OK_AND_ASSIGN(auto reader,
                       Connection::Open(path_, Connection::Mode::kReadOnly, absl::Seconds(1)));
  EXPECT_THAT(Insert(*reader, "x"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("readonly")));
}

TEST(SqliteConnectionTest, OpenNeverCreatesAFile) {
  TempDir dir;
  EXPECT_THAT(
      Connection::Open(dir.File("missing.db"), Connection::Mode::kReadWrite, absl::Seconds(1)),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("missing.db")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("missing.db")));
}

struct ErrorCase {
  int code;
  absl::StatusCode expected;
  friend void PrintTo(const ErrorCase& c, std::ostream* os) { *os << sqlite3_errstr(c.code); }
};

class SqliteErrorCodeTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(SqliteErrorCodeTest, MapsToTheCanonicalCode) {
  const absl::Status status = Error(GetParam().code, "boom", "/x.db", "doing it");
  EXPECT_EQ(status.code(), GetParam().expected);
  EXPECT_EQ(status.message(), "database /x.db: doing it: boom");
}

INSTANTIATE_TEST_SUITE_P(
    Codes, SqliteErrorCodeTest,
    ::testing::Values(ErrorCase{SQLITE_BUSY, absl::StatusCode::kAborted},
                      ErrorCase{SQLITE_BUSY_SNAPSHOT, absl::StatusCode::kAborted},
                      ErrorCase{SQLITE_LOCKED, absl::StatusCode::kAborted},
                      ErrorCase{SQLITE_IOERR_FSYNC, absl::StatusCode::kInternal},
                      ErrorCase{SQLITE_CANTOPEN, absl::StatusCode::kInternal},
                      ErrorCase{SQLITE_FULL, absl::StatusCode::kResourceExhausted},
                      ErrorCase{SQLITE_READONLY, absl::StatusCode::kPermissionDenied},
                      ErrorCase{SQLITE_CORRUPT, absl::StatusCode::kDataLoss},
                      ErrorCase{SQLITE_NOTADB, absl::StatusCode::kFailedPrecondition},
                      ErrorCase{SQLITE_CONSTRAINT_UNIQUE, absl::StatusCode::kInternal},
                      ErrorCase{SQLITE_ERROR, absl::StatusCode::kInternal}));

TEST(ConnectionPoolTest, AcquireWaitsForARelease) {
  TempDir dir;
  auto db = OpenRaw(dir.File("pool.db"));
  ASSERT_NE(db, nullptr);
  ConnectionPool pool;
  pool.Add(std::move(db));

  std::atomic<bool> second_got_it{false};
  std::atomic<bool> first_released{false};
  std::atomic<bool> second_got_it_after_release{false};
  absl::Notification first_holds;
  absl::Notification release_first;
  std::thread first([&] {
    ConnectionPool::Lease lease = pool.Acquire();
    first_holds.Notify();
    release_first.WaitForNotification();
    first_released = true;  // the lease goes back right after
  });
  first_holds.WaitForNotification();
  EXPECT_EQ(pool.waiting(), 0);  // the first found it idle
  std::thread second([&] {
    ConnectionPool::Lease lease = pool.Acquire();
    second_got_it_after_release = first_released.load();
    second_got_it = true;
  });
  // Blocking in a mutex sends no event: poll until the second caller is
  // inside Acquire() and waiting.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (pool.waiting() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(pool.waiting(), 1);
  EXPECT_FALSE(second_got_it);
  release_first.Notify();
  first.join();
  second.join();
  EXPECT_TRUE(second_got_it);
  EXPECT_TRUE(second_got_it_after_release);
  EXPECT_EQ(pool.waiting(), 0);
}

}  // namespace
}  // namespace autotune::cache::sqlite
