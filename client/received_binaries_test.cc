#include "client/received_binaries.h"

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
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

v1::GetBinariesResponse Sample() {
  v1::GetBinariesResponse response;
  (*response.mutable_binaries())[std::string(64, 'a')] = std::string(40000, '\x7f');
  (*response.mutable_binaries())[std::string(64, 'b')] = "short cubin";
  (*response.mutable_binaries())[std::string(64, 'c')] = "";
  response.add_missing(std::string(64, 'd'));
  response.add_missing(std::string(64, 'e'));
  return response;
}

// ParseGetBinariesResponse of `bytes` received in slices of `piece` bytes,
// into `blocks`.
absl::StatusOr<ReceivedBinaries> Parse(const std::string& bytes, size_t piece,
                                       CubinBlocks& blocks) {
  grpc::ByteBuffer buffer = Received(bytes, piece);
  ReceivedBinaries received;
  RETURN_IF_ERROR(ParseGetBinariesResponse(buffer, blocks, &received));
  return received;
}

// What protobuf itself makes of `bytes`, and what ParseGetBinariesResponse
// does, agree.
void ExpectParsedAsProtobufDoes(const std::string& bytes, size_t piece) {
  CubinBlocks blocks(1 << 20);
  absl::StatusOr<ReceivedBinaries> ours = Parse(bytes, piece, blocks);
  v1::GetBinariesResponse theirs;
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
  EXPECT_THAT(ours->missing, ElementsAreArray(theirs.missing()));
}

TEST(ReceivedBinariesTest, TheCubinsAreViewsIntoOneBlockAndMissingIsKept) {
  CubinBlocks blocks(1 << 20);
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries received,
                       Parse(Sample().SerializeAsString(), 1000, blocks));
  ASSERT_EQ(received.binaries.size(), 3u);
  EXPECT_EQ(*received.binaries.at(std::string(64, 'a')), std::string(40000, '\x7f'));
  EXPECT_EQ(*received.binaries.at(std::string(64, 'b')), "short cubin");
  EXPECT_EQ(*received.binaries.at(std::string(64, 'c')), "");
  EXPECT_THAT(received.missing, ElementsAre(std::string(64, 'd'), std::string(64, 'e')));
  // One block: the cubins lie one after the other in it, each at a
  // multiple of 256 bytes.
  const char* a = received.binaries.at(std::string(64, 'a'))->data();
  const char* b = received.binaries.at(std::string(64, 'b'))->data();
  EXPECT_EQ(std::abs(b - a), b > a ? 40192 : 256);
  for (const auto& [sha, cubin] : received.binaries) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cubin->data()) % 256, 0u) << sha;
  }
  // The views outlive the buffer and the result they came in.
  SharedBytes kept = received.binaries.at(std::string(64, 'a'));
  received = ReceivedBinaries();
  EXPECT_EQ(kept->size(), 40000u);
  EXPECT_EQ((*kept)[39999], '\x7f');
}

TEST(ReceivedBinariesTest, AnswersFillABlockOneAfterTheOtherThenStartANewOne) {
  CubinBlocks blocks(100000);  // room for two answers of 40,000 bytes, not three
  ReceivedBinaries received;
  for (char name : {'p', 'q', 'r'}) {
    v1::GetBinariesResponse answer;
    (*answer.mutable_binaries())[std::string(64, name)] = std::string(40000, name);
    answer.add_missing(std::string(1, name));
    grpc::ByteBuffer buffer = Received(answer.SerializeAsString(), 4096);
    ASSERT_OK(ParseGetBinariesResponse(buffer, blocks, &received));
  }
  const char* p = received.binaries.at(std::string(64, 'p'))->data();
  const char* q = received.binaries.at(std::string(64, 'q'))->data();
  const char* r = received.binaries.at(std::string(64, 'r'))->data();
  EXPECT_EQ(q - p, 40192);               // the next multiple of 256 in the same block
  EXPECT_TRUE(r < p || r >= q + 40000);  // another block
  for (char name : {'p', 'q', 'r'}) {
    EXPECT_EQ(*received.binaries.at(std::string(64, name)), std::string(40000, name));
  }
  EXPECT_THAT(received.missing, ElementsAre("p", "q", "r"));
}

TEST(ReceivedBinariesTest, AMalformedAnswerAddsNothing) {
  google::protobuf::LogSilencer quiet;
  CubinBlocks blocks(1 << 20);
  ReceivedBinaries received;
  const std::string bytes = Sample().SerializeAsString();
  grpc::ByteBuffer cut = Received(bytes.substr(0, bytes.size() - 1), 100);
  EXPECT_THAT(ParseGetBinariesResponse(cut, blocks, &received),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("the service's GetBinaries answer is malformed")));
  EXPECT_TRUE(received.binaries.empty());
  EXPECT_TRUE(received.missing.empty());
}

TEST(ReceivedBinariesTest, AnEmptyResponseIsEmpty) {
  CubinBlocks blocks(1 << 20);
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries received, Parse("", 1, blocks));
  EXPECT_TRUE(received.binaries.empty());
  EXPECT_TRUE(received.missing.empty());
}

TEST(ReceivedBinariesTest, ARepeatedShaKeepsItsLastCubinAndAnEntryWithoutOneIsEmpty) {
  v1::GetBinariesResponse first;
  (*first.mutable_binaries())["x"] = "first";
  v1::GetBinariesResponse second;
  (*second.mutable_binaries())["x"] = "second";
  // An entry with a key and no value.
  const std::string no_value = std::string("\x0a\x03\x0a\x01y", 5);
  const std::string bytes = first.SerializeAsString() + second.SerializeAsString() + no_value;
  ExpectParsedAsProtobufDoes(bytes, 7);
  CubinBlocks blocks(1 << 20);
  ASSERT_OK_AND_ASSIGN(ReceivedBinaries received, Parse(bytes, 7, blocks));
  EXPECT_EQ(*received.binaries.at("x"), "second");
  EXPECT_EQ(*received.binaries.at("y"), "");
}

// Every prefix of a response (a transfer cut anywhere), in slices of
// several sizes, is parsed as protobuf parses it: a whole shorter message,
// or DATA_LOSS.
TEST(ReceivedBinariesTest, EveryCutIsAShorterMessageOrMalformedAsProtobufSays) {
  google::protobuf::LogSilencer quiet;  // protobuf's own parse logs what it refuses
  v1::GetBinariesResponse sample = Sample();
  (*sample.mutable_binaries())[std::string(64, 'a')] = std::string(300, 'z');
  const std::string bytes = sample.SerializeAsString();
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    for (size_t piece : {size_t{1}, size_t{13}, size_t{4096}}) {
      ExpectParsedAsProtobufDoes(bytes.substr(0, cut), piece);
    }
  }
}

// Bytes damaged at random never crash it: a response or DATA_LOSS.
TEST(ReceivedBinariesTest, DamagedBytesAreAResponseOrMalformed) {
  google::protobuf::LogSilencer quiet;
  const std::string bytes = Sample().SerializeAsString();
  std::mt19937 random(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string damaged = bytes;
    for (int k = 0; k < 3; ++k) {
      damaged[random() % damaged.size()] = static_cast<char>(random());
    }
    CubinBlocks blocks(1 << 20);
    absl::StatusOr<ReceivedBinaries> received = Parse(damaged, 1 + random() % 5000, blocks);
    if (!received.ok()) {
      EXPECT_EQ(received.status().code(), absl::StatusCode::kDataLoss);
      continue;
    }
    for (const auto& [sha, cubin] : received->binaries) ASSERT_NE(cubin, nullptr);
  }
}

}  // namespace
}  // namespace autotune::client
