// RegisterKernel's compile check as CacheAdmin runs it, over a stand-in for
// the compile pool: what it refuses is not stored, a check that cannot run
// is said in the answer, and an unchanged version is not compiled again.
// Import runs the same check on the bundle's new family versions.
#include "service/lookup/cache_admin.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "proto/bundle_parts.h"
#include "proto/problem.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class CacheAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, cache::Store::Open({.path = dir_.path() + "/cache.db"}));
    ASSERT_OK_AND_ASSIGN(*request_.mutable_family(),
                         kernels::LoadFamilyFile(KERNELS_TESTDATA "/good/axpy.textproto"));
  }

  CacheAdmin Admin() {
    return CacheAdmin(store_.get(), [this](const v1::KernelFamily&) {
      ++checks_;
      return check_;
    });
  }

  testing::TempDir dir_;
  std::unique_ptr<cache::Store> store_;
  v1::RegisterKernelRequest request_;
  absl::Status check_;
  int checks_ = 0;
};

TEST_F(CacheAdminTest, WhatTheCompileCheckRefusesIsNotStored) {
  check_ = absl::InvalidArgumentError("family (compiled for sm_90): reference (fp32): ...");
  CacheAdmin admin = Admin();
  EXPECT_THAT(admin.RegisterKernel(request_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reference (fp32)")));
  EXPECT_THAT(store_->GetFamily("axpy"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CacheAdminTest, ACheckThatCannotRunIsSaidAndTheFamilyStored) {
  check_ = absl::FailedPreconditionError("cannot compile here: NVRTC is not installed");
  CacheAdmin admin = Admin();
  ASSERT_OK_AND_ASSIGN(v1::RegisterKernelResponse response, admin.RegisterKernel(request_));
  EXPECT_TRUE(response.changed());
  EXPECT_THAT(response.warnings(),
              ElementsAre(HasSubstr("default_config: not set"),
                          "not compiled before storing it: cannot compile here: NVRTC is not "
                          "installed"));
  EXPECT_OK(store_->GetFamily("axpy").status());
}

TEST_F(CacheAdminTest, AVersionAlreadyStoredIsNotCompiledAgain) {
  CacheAdmin admin = Admin();
  ASSERT_OK(admin.RegisterKernel(request_).status());
  ASSERT_OK_AND_ASSIGN(v1::RegisterKernelResponse again, admin.RegisterKernel(request_));
  EXPECT_FALSE(again.changed());
  EXPECT_EQ(checks_, 1);
}

v1::CacheBundle BundleOf(const v1::KernelFamily& family) {
  v1::CacheBundle bundle;
  bundle.set_format_version(kBundleFormatVersion);
  v1::FamilyRecord* record = bundle.add_families();
  *record->mutable_family() = family;
  record->set_content_hash(FamilyContentHash(family));
  return bundle;
}

TEST_F(CacheAdminTest, AnImportedFamilyTheCompileCheckRefusesIsNotStored) {
  check_ = absl::InvalidArgumentError("family (compiled for sm_90): reference (fp32): ...");
  CacheAdmin admin = Admin();
  EXPECT_THAT(admin.Import(BundleOf(request_.family()), cache::Store::Merge::kKeepExisting),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("families[0].family: family (compiled for sm_90)")));
  EXPECT_THAT(store_->GetFamily("axpy"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(CacheAdminTest, AnImportedFamilyIsCompiledOnlyWhenItsVersionIsNew) {
  CacheAdmin admin = Admin();
  ASSERT_OK(admin.Import(BundleOf(request_.family()), cache::Store::Merge::kKeepExisting).status());
  EXPECT_EQ(checks_, 1);
  EXPECT_OK(store_->GetFamily("axpy").status());
  ASSERT_OK(admin.Import(BundleOf(request_.family()), cache::Store::Merge::kKeepExisting).status());
  EXPECT_EQ(checks_, 1);
  // Where no compiler runs, the family is imported all the same.
  check_ = absl::FailedPreconditionError("cannot compile here: NVRTC is not installed");
  v1::KernelFamily changed = request_.family();
  changed.set_description("another version");
  EXPECT_OK(admin.Import(BundleOf(changed), cache::Store::Merge::kKeepExisting).status());
  EXPECT_EQ(checks_, 2);
}

// Import's chain of trust over a stand-in for the daemon's own compile,
// which stores a cubin as the compile cache would: every entry is served
// with that binary, whatever bytes, launch or symbol it came with.
class ImportTrustTest : public CacheAdminTest {
 protected:
  CacheAdmin TrustingAdmin() {
    return CacheAdmin(
        store_.get(),
        [this](const v1::KernelFamily&) {
          ++checks_;
          return check_;
        },
        [this](const std::vector<ConfigCompile>& configs) -> absl::StatusOr<CompiledConfigs> {
          compiled_ += static_cast<int>(configs.size());
          if (!compiler_.ok()) return compiler_;
          CompiledConfigs result;
          result.nvrtc_version = "13.0";
          for (const ConfigCompile& config : configs) {
            cache::CompileRecord record;
            record.compile_key =
                absl::StrCat("key-", config.config.ShortDebugString(), config.arch);
            record.status = v1::OK;
            record.lowered_name = "_Z4axpyILi256ELi2EEvPfS0_fx";
            record.nvrtc_version = "13.0";
            record.arch = config.arch;
            record.family = config.record->family.name();
            record.family_hash = config.record->content_hash;
            CompileEnd end;
            end.status = v1::OK;
            end.lowered_name = record.lowered_name;
            absl::StatusOr<std::string> sha256 = store_->PutCompile(record,
                                                                    "\x7f"
                                                                    "ELF own compile of " +
                                                                        record.compile_key);
            if (!sha256.ok()) return sha256.status();
            end.binary_sha256 = *sha256;
            result.ends.push_back(std::move(end));
          }
          return result;
        });
  }

  // The axpy family with one entry for n=4096 fp32 at BLOCK=256 ELEMS=2, its
  // launch as the family computes it, and a foreign binary it names.
  v1::CacheBundle EntryBundle() {
    v1::CacheBundle bundle = BundleOf(request_.family());
    v1::Entry* entry = bundle.add_entries();
    entry->set_family("axpy");
    entry->set_family_hash(FamilyContentHash(request_.family()));
    (*entry->mutable_problem()->mutable_dims())["n"] = 4096;
    entry->mutable_problem()->set_dtype(v1::FLOAT32);
    entry->mutable_device()->set_name("NVIDIA H200");
    (*entry->mutable_config()->mutable_params())["BLOCK"] = 256;
    (*entry->mutable_config()->mutable_params())["ELEMS"] = 2;
    entry->mutable_launch()->add_grid(8);
    entry->mutable_launch()->add_block(256);
    entry->set_arch("sm_90");
    entry->mutable_timing()->set_median_us(3.5);
    v1::Binary* binary = bundle.add_binaries();
    binary->set_cubin("not a cubin: bytes a tuner chose");
    binary->set_sha256(Sha256Hex(binary->cubin()));
    entry->set_binary_sha256(binary->sha256());
    return bundle;
  }

  absl::StatusOr<v1::Entry> Stored() {
    v1::GetEntryRequest request;
    request.set_family("axpy");
    (*request.mutable_problem()->mutable_dims())["n"] = 4096;
    request.mutable_problem()->set_dtype(v1::FLOAT32);
    request.mutable_device()->set_name("NVIDIA H200");
    ASSIGN_OR_RETURN(v1::GetEntryResponse response, TrustingAdmin().GetEntry(request));
    return response.entry();
  }

  absl::Status compiler_;
  int compiled_ = 0;
};

TEST_F(ImportTrustTest, AnEntryIsServedWithTheDaemonsOwnCompileNotTheImportedBytes) {
  CacheAdmin admin = TrustingAdmin();
  const v1::CacheBundle bundle = EntryBundle();
  ASSERT_OK_AND_ASSIGN(v1::ImportResponse response,
                       admin.Import(bundle, cache::Store::Merge::kKeepExisting));
  EXPECT_EQ(compiled_, 1);
  EXPECT_EQ(response.binaries_replaced(), 1);
  EXPECT_THAT(response.replaced(),
              ElementsAre(HasSubstr("is not what this daemon compiles (NVRTC 13.0, sm_90)")));
  ASSERT_OK_AND_ASSIGN(v1::Entry entry, Stored());
  EXPECT_NE(entry.binary_sha256(), bundle.entries(0).binary_sha256());
  EXPECT_EQ(entry.function_name(), "_Z4axpyILi256ELi2EEvPfS0_fx");
  ASSERT_OK_AND_ASSIGN(v1::Binary own, store_->GetBinary(entry.binary_sha256()));
  EXPECT_THAT(own.cubin(), HasSubstr("own compile"));
  // The imported bytes were never stored.
  EXPECT_THAT(store_->GetBinary(bundle.entries(0).binary_sha256()),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(ImportTrustTest, AnImportedLaunchOrSymbolThatDiffersIsRefusedNamingTheField) {
  const std::vector<std::pair<std::function<void(v1::Entry&)>, std::string>> cases = {
      {[](v1::Entry& e) {
         e.mutable_launch()->clear_grid();
         for (int64_t v : {int64_t{2147483647}, int64_t{65535}, int64_t{65535}}) {
           e.mutable_launch()->add_grid(v);
         }
       },
       "entries[0].launch.grid: (2147483647, 65535, 65535) is not the launch family 'axpy' "
       "computes for this problem and config, (8)"},
      {[](v1::Entry& e) { e.mutable_launch()->add_block(1024); },
       "entries[0].launch.block: (256, 1024)"},
      {[](v1::Entry& e) { e.mutable_launch()->set_dynamic_shared_bytes(int64_t{1} << 40); },
       "entries[0].launch.dynamic_shared_bytes: 1099511627776 is not the launch"},
      {[](v1::Entry& e) {
         v1::TensorMapLayout* map = e.mutable_launch()->add_tensor_maps();
         map->set_buffer(7);
         map->add_shape(int64_t{1} << 40);
       },
       "entries[0].launch.tensor_maps: 1 maps is not the launch"},
      {[](v1::Entry& e) { e.set_function_name("attacker_symbol"); },
       "entries[0].function_name: 'attacker_symbol' is not the kernel this config compiles to"},
      {[](v1::Entry& e) { e.mutable_device()->set_name("H200\x1b]0;owned\x07"); },
       "entries[0].device.name: holds the control character U+001B at byte 4"},
      {[](v1::Entry& e) { e.set_job_id("job\nforged row"); },
       "entries[0].job_id: holds the control character U+000A"},
      {[](v1::Entry& e) { e.set_stop(std::string("two\nlines\0", 10)); },
       "entries[0].stop: holds the control character U+0000 at byte 9"},
      {[](v1::Entry& e) { e.set_arch(""); }, "entries[0].arch is empty"},
  };
  for (const auto& [change, message] : cases) {
    v1::CacheBundle bundle = EntryBundle();
    change(*bundle.mutable_entries(0));
    EXPECT_THAT(TrustingAdmin().Import(bundle, cache::Store::Merge::kKeepExisting),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << message;
    EXPECT_THAT(Stored(), StatusIs(absl::StatusCode::kNotFound, ::testing::_)) << message;
  }
  // A multi-line detail is a detail.
  v1::CacheBundle bundle = EntryBundle();
  bundle.mutable_entries(0)->set_stop("noise 0.4%\n\tafter 9 rounds");
  EXPECT_OK(TrustingAdmin().Import(bundle, cache::Store::Merge::kKeepExisting).status());
}

TEST_F(ImportTrustTest, ABinaryNoEntryNamesIsRefused) {
  v1::CacheBundle bundle = EntryBundle();
  v1::Binary* blob = bundle.add_binaries();
  blob->set_cubin(std::string(40 << 10, 'x'));
  blob->set_sha256(Sha256Hex(blob->cubin()));
  EXPECT_THAT(TrustingAdmin().Import(bundle, cache::Store::Merge::kKeepExisting),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("binaries[1]: no entry of the bundle names binary")));
  EXPECT_THAT(store_->GetBinary(blob->sha256()),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(ImportTrustTest, WithoutACompilerAnEntryThatNamesABinaryIsRefused) {
  compiler_ = absl::FailedPreconditionError("cannot compile here: NVRTC is not installed");
  EXPECT_THAT(TrustingAdmin().Import(EntryBundle(), cache::Store::Merge::kKeepExisting),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("entries[0].binary_sha256: this daemon cannot compile (cannot "
                                 "compile here: NVRTC is not installed)")));
  // An entry without one is served with its recipe, as before.
  v1::CacheBundle bare = EntryBundle();
  bare.clear_binaries();
  bare.mutable_entries(0)->clear_binary_sha256();
  EXPECT_OK(TrustingAdmin().Import(bare, cache::Store::Merge::kKeepExisting).status());
  ASSERT_OK_AND_ASSIGN(v1::Entry entry, Stored());
  EXPECT_EQ(entry.binary_sha256(), "");
}

TEST_F(ImportTrustTest, ACallerWhoMayNotAddFamiliesIsRefusedBeforeAnythingCompiles) {
  v1::CacheBundle bundle = EntryBundle();
  bundle.mutable_families(0)->mutable_family()->set_source("#error planted\n");
  EXPECT_THAT(TrustingAdmin().Import(bundle, cache::Store::Merge::kKeepExisting,
                                     "adding or replacing a family needs the admin role"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       ::testing::AllOf(HasSubstr("families[0]: importing family 'axpy'"),
                                        Not(HasSubstr("planted")))));
  EXPECT_EQ(checks_, 0);
  EXPECT_EQ(compiled_, 0);
  // A version the store holds is not new: a tuner's bundle may carry it.
  ASSERT_OK(TrustingAdmin().RegisterKernel(request_).status());
  EXPECT_OK(TrustingAdmin()
                .Import(EntryBundle(), cache::Store::Merge::kKeepExisting,
                        "adding or replacing a family needs the admin role")
                .status());
}

}  // namespace
}  // namespace autotune::service
