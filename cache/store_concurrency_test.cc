// Readers running while a writer imports and replaces entries.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "cache/store.h"
#include "cache/store_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/problem.h"

namespace autotune::cache {
namespace {

using ::autotune::cache::testing::KeyOf;
using ::autotune::cache::testing::MakeBinary;
using ::autotune::cache::testing::MakeEntry;
using ::autotune::cache::testing::MakeFamily;
using ::autotune::cache::testing::MakeProblem;
using ::autotune::cache::testing::MeasurementFor;
using ::autotune::cache::testing::OptionsFor;
using ::autotune::cache::testing::TempDir;

constexpr int kGenerations = 150;
constexpr int kEntriesPerGeneration = 8;
constexpr int kReaders = 4;

// One import: a new family with its binary and kEntriesPerGeneration entries.
v1::CacheBundle Generation(int g) {
  v1::CacheBundle bundle;
  bundle.set_format_version(1);
  const v1::KernelFamily family = MakeFamily(absl::StrCat("gen_", g));
  const std::string hash = FamilyContentHash(family);
  v1::FamilyRecord* record = bundle.add_families();
  *record->mutable_family() = family;
  record->set_content_hash(hash);
  v1::Binary* binary = bundle.add_binaries();
  *binary = MakeBinary(absl::StrCat("cubin of generation ", g));
  binary->set_sha256(Sha256Hex(binary->cubin()));
  for (int m = 1; m <= kEntriesPerGeneration; ++m) {
    v1::Entry entry = MakeEntry(family.name(), hash, MakeProblem({{"m", m}}, v1::BFLOAT16), "H200",
                                "13.0", binary->sha256());
    *bundle.add_measurements() = MeasurementFor(entry, 64);
    *bundle.add_entries() = std::move(entry);
  }
  return bundle;
}

class Errors {
 public:
  void Add(const std::string& error) {
    absl::MutexLock lock(&mu_);
    if (errors_.size() < 20) errors_.push_back(error);
  }
  std::vector<std::string> Get() {
    absl::MutexLock lock(&mu_);
    return errors_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

TEST(StoreConcurrencyTest, ReadersSeeWholeImportsAndNeverFail) {
  TempDir dir;
  StoreOptions options = OptionsFor(dir.File("cache.db"));
  options.readers = 3;  // fewer connections than reader threads: some wait for one
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(options));
  ASSERT_OK_AND_ASSIGN(FamilyRecord gemm, store->PutFamily(MakeFamily("gemm"), false));
  v1::Entry sentinel =
      MakeEntry("gemm", gemm.content_hash, MakeProblem({{"m", 4096}}, v1::BFLOAT16), "H200");
  ASSERT_OK(store->PutEntry(sentinel));

  std::atomic<bool> done{false};
  std::atomic<int64_t> reads{0};
  std::atomic<int64_t> partial_views{0};  // reads that saw some imports but not all
  Errors errors;

  std::thread writer([&] {
    // Start once the readers are going, so that they overlap the imports.
    while (reads < kReaders) std::this_thread::yield();
    for (int g = 0; g < kGenerations; ++g) {
      absl::StatusOr<v1::ImportResponse> imported = store->Import(Generation(g), false);
      if (!imported.ok()) errors.Add(absl::StrCat("import: ", imported.status().ToString()));
      // Replacing the sentinel must never make it disappear for a reader.
      sentinel.mutable_timing()->set_median_us(g);
      absl::Status put = store->PutEntry(sentinel);
      if (!put.ok()) errors.Add(absl::StrCat("put: ", put.ToString()));
    }
    done = true;
  });

  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      int64_t last_total = 0;
      while (!done) {
        absl::StatusOr<std::optional<v1::Entry>> found = store->FindEntry(KeyOf(sentinel));
        if (!found.ok()) {
          errors.Add(absl::StrCat("find: ", found.status().ToString()));
        } else if (!found->has_value()) {
          errors.Add("find: the sentinel entry vanished");
        }

        int64_t total = 0;
        absl::StatusOr<std::vector<v1::Entry>> all = store->ListEntries({}, -1, 0, &total);
        if (!all.ok()) {
          errors.Add(absl::StrCat("list: ", all.status().ToString()));
          continue;
        }
        if (total != static_cast<int64_t>(all->size())) {
          errors.Add(absl::StrCat("list: total ", total, " but ", all->size(), " entries"));
        }
        if (total < last_total) errors.Add(absl::StrCat("list: went back from ", last_total));
        last_total = total;
        if (total > 1 && total < 1 + kGenerations * kEntriesPerGeneration) ++partial_views;
        std::map<std::string, int> per_family;
        for (const v1::Entry& entry : *all) ++per_family[entry.family()];
        for (const auto& [family, count] : per_family) {
          if (absl::StartsWith(family, "gen_") && count != kEntriesPerGeneration) {
            errors.Add(absl::StrCat("list: partial import of ", family, ": ", count, " entries"));
          }
        }
        // Something every committed import brought along must be readable.
        if (!all->empty() && !all->back().binary_sha256().empty()) {
          absl::Status binary = store->GetBinary(all->back().binary_sha256()).status();
          if (!binary.ok()) errors.Add(absl::StrCat("binary: ", binary.ToString()));
          absl::StatusOr<std::vector<v1::Measurement>> measurements =
              store->ListMeasurements(KeyOf(all->back()));
          if (!measurements.ok() || measurements->size() != 1) {
            errors.Add(absl::StrCat("measurements of ", all->back().family(), " missing"));
          }
        }
        if (r == 0) {
          absl::Status family = store->GetFamily("gemm").status();
          if (!family.ok()) errors.Add(absl::StrCat("family: ", family.ToString()));
        }
        ++reads;
      }
    });
  }
  writer.join();
  for (std::thread& reader : readers) reader.join();

  EXPECT_THAT(errors.Get(), ::testing::IsEmpty());
  EXPECT_GT(partial_views.load(), 0) << "the readers did run alongside the writer";
  int64_t total = 0;
  ASSERT_OK(store->ListEntries({}, 0, 0, &total).status());
  EXPECT_EQ(total, 1 + kGenerations * kEntriesPerGeneration);
  ASSERT_OK_AND_ASSIGN(std::optional<v1::Entry> last, store->FindEntry(KeyOf(sentinel)));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->timing().median_us(), kGenerations - 1);
}

}  // namespace
}  // namespace autotune::cache
