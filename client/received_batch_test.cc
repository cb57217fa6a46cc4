#include "client/received_batch.h"

#include <random>
#include <string>
#include <vector>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

// `bytes` as gRPC hands them over: in slices of `piece` bytes.
grpc::ByteBuffer Received(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    const std::string part = bytes.substr(at, piece);
    slices.emplace_back(part.data(), part.size());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

v1::BatchLookupResponse Sample() {
  v1::BatchLookupResponse response;
  for (int i = 0; i < 3; ++i) {
    v1::LookupResponse* answer = response.add_results()->mutable_response();
    answer->set_match(v1::EXACT);
    answer->mutable_entry()->set_family("rmsnorm");
    answer->mutable_entry()->set_binary_sha256(std::string(64, static_cast<char>('a' + i)));
  }
  response.add_results()->set_error_code(5);
  (*response.mutable_binaries())[std::string(64, 'a')] = std::string(40000, '\x7f');
  (*response.mutable_binaries())[std::string(64, 'b')] = "short cubin";
  (*response.mutable_binaries())[std::string(64, 'c')] = "";
  (*response.mutable_sources())[std::string(64, 'd')] = "__global__ void k() {}";
  return response;
}

// What protobuf itself makes of `bytes`, and what ParseBatchLookupResponse
// does, agree.
void ExpectParsedAsProtobufDoes(const std::string& bytes, size_t piece) {
  grpc::ByteBuffer buffer = Received(bytes, piece);
  absl::StatusOr<ReceivedBatch> ours = ParseBatchLookupResponse(buffer);
  v1::BatchLookupResponse theirs;
  if (!theirs.ParseFromString(bytes)) {
    EXPECT_THAT(ours, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("malformed")))
        << bytes.size() << " bytes";
    return;
  }
  ASSERT_OK(ours.status()) << bytes.size() << " bytes";
  ASSERT_EQ(ours->binaries.size(), static_cast<size_t>(theirs.binaries_size()));
  for (const auto& [sha, cubin] : theirs.binaries()) {
    ASSERT_TRUE(ours->binaries.contains(sha));
    ASSERT_NE(ours->binaries.at(sha), nullptr);
    EXPECT_EQ(*ours->binaries.at(sha), cubin);
  }
  theirs.clear_binaries();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(ours->response, theirs));
}

TEST(ReceivedBatchTest, TheCubinsAreViewsIntoOneBlockAndTheRestIsTheResponse) {
  const v1::BatchLookupResponse sample = Sample();
  grpc::ByteBuffer buffer = Received(sample.SerializeAsString(), 1000);
  ASSERT_OK_AND_ASSIGN(ReceivedBatch received, ParseBatchLookupResponse(buffer));
  ASSERT_EQ(received.binaries.size(), 3u);
  EXPECT_EQ(*received.binaries.at(std::string(64, 'a')), std::string(40000, '\x7f'));
  EXPECT_EQ(*received.binaries.at(std::string(64, 'b')), "short cubin");
  EXPECT_EQ(*received.binaries.at(std::string(64, 'c')), "");
  // One block: the cubins lie one after the other in it, each at a
  // multiple of 256 bytes.
  const char* a = received.binaries.at(std::string(64, 'a'))->data();
  const char* b = received.binaries.at(std::string(64, 'b'))->data();
  EXPECT_EQ(std::abs(b - a), b > a ? 40192 : 256);
  for (const auto& [sha, cubin] : received.binaries) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cubin->data()) % 256, 0u) << sha;
  }
  EXPECT_EQ(received.response.binaries_size(), 0);
  EXPECT_EQ(received.response.results_size(), 4);
  EXPECT_EQ(received.response.results(3).error_code(), 5);
  EXPECT_EQ(received.response.sources().at(std::string(64, 'd')), "__global__ void k() {}");
  // The views outlive the buffer and the result they came in.
  SharedBytes kept = received.binaries.at(std::string(64, 'a'));
  received = ReceivedBatch();
  EXPECT_EQ(kept->size(), 40000u);
  EXPECT_EQ((*kept)[39999], '\x7f');
}

TEST(ReceivedBatchTest, AnEmptyResponseIsEmpty) {
  grpc::ByteBuffer buffer = Received("", 1);
  ASSERT_OK_AND_ASSIGN(ReceivedBatch received, ParseBatchLookupResponse(buffer));
  EXPECT_TRUE(received.binaries.empty());
  EXPECT_EQ(received.response.results_size(), 0);
}

TEST(ReceivedBatchTest, ARepeatedShaKeepsItsLastCubinAndAnEntryWithoutOneIsEmpty) {
  v1::BatchLookupResponse first;
  (*first.mutable_binaries())["x"] = "first";
  v1::BatchLookupResponse second;
  (*second.mutable_binaries())["x"] = "second";
  // An entry with a key and no value.
  const std::string no_value = std::string("\x12\x03\x0a\x01y", 5);
  const std::string bytes = first.SerializeAsString() + second.SerializeAsString() + no_value;
  ExpectParsedAsProtobufDoes(bytes, 7);
  grpc::ByteBuffer buffer = Received(bytes, 7);
  ASSERT_OK_AND_ASSIGN(ReceivedBatch received, ParseBatchLookupResponse(buffer));
  EXPECT_EQ(*received.binaries.at("x"), "second");
  EXPECT_EQ(*received.binaries.at("y"), "");
}

// Every prefix of a response (a transfer cut anywhere), in slices of
// several sizes, is parsed as protobuf parses it: a whole shorter message,
// or DATA_LOSS.
TEST(ReceivedBatchTest, EveryCutIsAShorterMessageOrMalformedAsProtobufSays) {
  google::protobuf::LogSilencer quiet;  // protobuf's own parse logs what it refuses
  v1::BatchLookupResponse sample = Sample();
  (*sample.mutable_binaries())[std::string(64, 'a')] = std::string(300, 'z');
  const std::string bytes = sample.SerializeAsString();
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    for (size_t piece : {size_t{1}, size_t{13}, size_t{4096}}) {
      ExpectParsedAsProtobufDoes(bytes.substr(0, cut), piece);
    }
  }
}

// Bytes damaged at random never crash it: a response or DATA_LOSS.
TEST(ReceivedBatchTest, DamagedBytesAreAResponseOrMalformed) {
  google::protobuf::LogSilencer quiet;
  const std::string bytes = Sample().SerializeAsString();
  std::mt19937 random(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string damaged = bytes;
    for (int k = 0; k < 3; ++k) {
      damaged[random() % damaged.size()] = static_cast<char>(random());
    }
    grpc::ByteBuffer buffer = Received(damaged, 1 + random() % 5000);
    absl::StatusOr<ReceivedBatch> received = ParseBatchLookupResponse(buffer);
    if (!received.ok()) {
      EXPECT_EQ(received.status().code(), absl::StatusCode::kDataLoss);
      continue;
    }
    for (const auto& [sha, cubin] : received->binaries) ASSERT_NE(cubin, nullptr);
  }
}

}  // namespace
}  // namespace autotune::client
