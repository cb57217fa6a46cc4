// Test-only helpers for cache/ tests: temporary directories, small valid
// families / binaries / entries / measurements, and a proto matcher.
#ifndef AUTOTUNE_CACHE_STORE_TESTING_H_
#define AUTOTUNE_CACHE_STORE_TESTING_H_

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/temp_dir.h"
#include "cache/sqlite.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"

namespace autotune::cache::testing {

using ::autotune::testing::TempDir;

inline StoreOptions OptionsFor(const std::string& path) {
  StoreOptions options;
  options.path = path;
  options.readers = 2;
  return options;
}

// A second, independent SQLite connection to a store's file: what an
// operator with the sqlite3 shell (or a damaged disk) would do.
inline std::unique_ptr<sqlite::Connection> OpenRaw(const std::string& path) {
  // Connection::Open never creates files.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd >= 0) close(fd);
  absl::StatusOr<std::unique_ptr<sqlite::Connection>> db =
      sqlite::Connection::Open(path, sqlite::Connection::Mode::kReadWrite, absl::Seconds(5));
  EXPECT_TRUE(db.ok()) << db.status();
  return db.ok() ? std::move(*db) : nullptr;
}

inline int64_t CountRows(sqlite::Connection& db, const std::string& table) {
  absl::StatusOr<int64_t> count = db.QueryInt(absl::StrCat("SELECT COUNT(*) FROM ", table));
  EXPECT_TRUE(count.ok()) << count.status();
  return count.ok() ? *count : -1;
}

inline v1::KernelFamily MakeFamily(const std::string& name, const std::string& source = "") {
  v1::KernelFamily family;
  family.set_name(name);
  family.set_description(absl::StrCat("test family ", name));
  family.set_source(source.empty() ? absl::StrCat("__global__ void ", name, "() {}") : source);
  family.set_kernel_name(name);
  v1::TunableParameter* block = family.add_params();
  block->set_name("BLOCK");
  block->add_values(128);
  block->add_values(256);
  v1::TunableParameter* unroll = family.add_params();
  unroll->set_name("UNROLL");
  unroll->add_values(1);
  unroll->add_values(2);
  unroll->add_values(4);
  v1::ProblemDimension* m = family.add_dims();
  m->set_name("m");
  m->set_bucketed(true);
  family.add_dtypes(v1::BFLOAT16);
  family.add_dtypes(v1::FLOAT16);
  return family;
}

inline v1::Binary MakeBinary(const std::string& bytes, const std::string& nvrtc = "12.8") {
  v1::Binary binary;
  binary.set_cubin(bytes);
  binary.set_nvrtc_version(nvrtc);
  binary.set_arch("sm_90");
  binary.set_compile_log("ok");
  return binary;
}

inline v1::Problem MakeProblem(const std::map<std::string, int64_t>& dims, v1::DType dtype) {
  v1::Problem problem;
  for (const auto& [name, value] : dims) (*problem.mutable_dims())[name] = value;
  problem.set_dtype(dtype);
  return problem;
}

inline v1::Entry MakeEntry(const std::string& family, const std::string& family_hash,
                           const v1::Problem& problem, const std::string& device,
                           const std::string& nvrtc = "12.8",
                           const std::string& binary_sha256 = "") {
  v1::Entry entry;
  entry.set_family(family);
  entry.set_family_hash(family_hash);
  *entry.mutable_problem() = problem;
  entry.mutable_device()->set_name(device);
  entry.mutable_device()->set_compute_capability(90);
  entry.mutable_device()->set_sm_count(132);
  (*entry.mutable_config()->mutable_params())["BLOCK"] = 256;
  entry.mutable_launch()->add_grid(64);
  entry.mutable_launch()->add_block(256);
  entry.set_binary_sha256(binary_sha256);
  entry.set_nvrtc_version(nvrtc);
  entry.set_arch("sm_90");
  entry.mutable_timing()->set_median_us(12.5);
  entry.set_margin(0.07);
  entry.set_phase(v1::SERIAL_VALIDATION);
  entry.set_tuned_at("2025-01-02T03:04:05Z");
  return entry;
}

inline v1::Measurement MeasurementFor(const v1::Entry& entry, int64_t block,
                                      v1::VariantStatus status = v1::OK) {
  v1::Measurement measurement;
  measurement.set_family(entry.family());
  measurement.set_family_hash(entry.family_hash());
  *measurement.mutable_problem() = entry.problem();
  *measurement.mutable_device() = entry.device();
  (*measurement.mutable_config()->mutable_params())["BLOCK"] = block;
  measurement.set_status(status);
  measurement.set_phase(v1::SCREEN);
  measurement.mutable_timing()->set_median_us(10.0 + static_cast<double>(block) / 100);
  measurement.set_binary_sha256(entry.binary_sha256());
  measurement.set_measured_at("2025-01-02T03:04:05Z");
  return measurement;
}

inline EntryKey KeyOf(const v1::Entry& entry) {
  return EntryKey{entry.family(), entry.family_hash(), entry.problem(), entry.device().name()};
}

MATCHER_P(EqualsProto, expected, "equals " + expected.ShortDebugString()) {
  std::string difference;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  if (differencer.Compare(expected, arg)) return true;
  *result_listener << difference;
  return false;
}

}  // namespace autotune::cache::testing

#endif  // AUTOTUNE_CACHE_STORE_TESTING_H_
