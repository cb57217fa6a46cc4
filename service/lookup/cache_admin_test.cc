// RegisterKernel's compile check as CacheAdmin runs it, over a stand-in for
// the compile pool: what it refuses is not stored, a check that cannot run
// is said in the answer, and an unchanged version is not compiled again.
// Import runs the same check on the bundle's new family versions.
#include "service/lookup/cache_admin.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
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

}  // namespace
}  // namespace autotune::service
