#include "service/rpc/submit_job_call.h"

#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"

namespace autotune::service {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::_;

absl::StatusOr<int64_t> Count(const std::string& bytes) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return CountManifestItemsOnWire(&in);
}

v1::SubmitJobRequest WithItems(int items) {
  v1::SubmitJobRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  spec->mutable_options()->set_compile_only(true);
  spec->mutable_manifest()->set_arch("sm_90");
  for (int i = 0; i < items; ++i) {
    v1::ManifestItem* item = spec->mutable_manifest()->add_items();
    item->set_family("vector_scale");
    v1::ManifestItem::DimValues* dim = item->add_dims();
    dim->set_name("n");
    dim->add_values(i + 1);
  }
  return request;
}

TEST(CountManifestItemsOnWireTest, CountsTheItemsOfTheManifest) {
  EXPECT_EQ(Count("").value_or(-1), 0);
  EXPECT_EQ(Count(v1::SubmitJobRequest().SerializeAsString()).value_or(-1), 0);
  EXPECT_EQ(Count(WithItems(1).SerializeAsString()).value_or(-1), 1);
  EXPECT_EQ(Count(WithItems(1000).SerializeAsString()).value_or(-1), 1000);
}

// Protobuf merges a message field that appears twice and concatenates its
// repeated fields: the parse would hold both halves' items, so the count does.
TEST(CountManifestItemsOnWireTest, CountsAManifestSplitOverRepeatedFieldsAsItsMerge) {
  const std::string twice = WithItems(3).SerializeAsString() + WithItems(4).SerializeAsString();
  v1::SubmitJobRequest merged;
  ASSERT_TRUE(merged.ParseFromString(twice));
  ASSERT_EQ(merged.spec().manifest().items_size(), 7);
  EXPECT_EQ(Count(twice).value_or(-1), 7);
}

TEST(CountManifestItemsOnWireTest, SkipsUnknownFields) {
  v1::SubmitJobRequest request = WithItems(2);
  // Field 15 of the manifest, varint; field 99 of the request, bytes.
  std::string manifest = request.spec().manifest().SerializeAsString() + std::string("\x78\x05", 2);
  std::string spec = std::string("\x0a") + static_cast<char>(manifest.size()) + manifest;
  std::string bytes = std::string("\x0a") + static_cast<char>(spec.size()) + spec +
                      std::string("\x9a\x06\x03xyz", 6);
  ASSERT_LT(manifest.size(), 120u);
  v1::SubmitJobRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.spec().manifest().items_size(), 2);
  EXPECT_EQ(Count(bytes).value_or(-1), 2);
}

TEST(CountManifestItemsOnWireTest, RefusesBytesThatAreNoMessage) {
  const std::string whole = WithItems(5).SerializeAsString();
  EXPECT_THAT(Count(whole.substr(0, whole.size() - 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the request is not a well-formed SubmitJobRequest"));
  EXPECT_THAT(Count(std::string("\x0a\xff\xff\xff\xff\x0f", 6)),
              StatusIs(absl::StatusCode::kInvalidArgument, _));
  EXPECT_THAT(Count(std::string("\x00\x01", 2)), StatusIs(absl::StatusCode::kInvalidArgument, _));
}

}  // namespace
}  // namespace autotune::service
