#include "client/cli_format.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TextTableTest, PadsColumnsAndTrimsTrailingSpaces) {
  TextTable table({"NAME", "COUNT", "NOTE"});
  table.SetAlign(1, TextTable::Align::kRight);
  table.AddRow({"flash_attn", "7", ""});
  table.AddRow({"gemm", "1234", "two\nlines"});
  std::ostringstream out;
  table.Print(out);
  EXPECT_EQ(out.str(),
            "NAME        COUNT  NOTE\n"
            "flash_attn      7\n"
            "gemm         1234  two lines\n");
}

TEST(TextTableTest, MissingCellsPrintEmpty) {
  TextTable table({"A", "B"});
  table.AddRow({"x"});
  std::ostringstream out;
  table.Print(out);
  EXPECT_EQ(out.str(), "A  B\nx\n");
}

TEST(FormatTest, NumbersForPeople) {
  EXPECT_EQ(FormatMicros(12.3456), "12.35");
  EXPECT_EQ(FormatMicros(0), "-");
  EXPECT_EQ(FormatMargin(0.032), "+3.2%");
  EXPECT_EQ(FormatMargin(0), "-");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(FormatPhase(v1::SERIAL_VALIDATION), "serial_validation");
  EXPECT_EQ(FormatPhase(v1::PHASE_UNSPECIFIED), "-");
  EXPECT_EQ(FirstLine("first\nsecond", 80), "first");
  EXPECT_EQ(FirstLine("abcdefghij", 8), "abcde...");
}

v1::Entry SampleEntry() {
  v1::Entry entry;
  entry.set_family("flash_attn");
  (*entry.mutable_problem()->mutable_dims())["heads"] = 32;
  (*entry.mutable_problem()->mutable_dims())["batch"] = 16;
  entry.mutable_problem()->set_dtype(v1::BFLOAT16);
  entry.mutable_device()->set_name("NVIDIA H200");
  entry.mutable_device()->set_compute_capability(90);
  entry.mutable_device()->set_sm_count(132);
  (*entry.mutable_config()->mutable_params())["BLOCK_N"] = 64;
  (*entry.mutable_config()->mutable_params())["BLOCK_M"] = 128;
  entry.mutable_timing()->set_median_us(41.256);
  entry.set_margin(0.045);
  entry.set_phase(v1::SERIAL_VALIDATION);
  entry.set_tuned_at("2026-11-29T10:00:00Z");
  return entry;
}

TEST(PrintEntryTableTest, OneRowPerEntryUnderTheHeader) {
  google::protobuf::RepeatedPtrField<v1::Entry> entries;
  *entries.Add() = SampleEntry();
  std::ostringstream out;
  PrintEntryTable(entries, out);
  EXPECT_EQ(out.str(),
            "FAMILY      DIMS               DTYPE  DEVICE       CONFIG                  MEDIAN_US  "
            "MARGIN  PHASE              TUNED_AT\n"
            "flash_attn  batch=16,heads=32  bf16   NVIDIA H200  BLOCK_M=128,BLOCK_N=64      41.26  "
            " +4.5%  serial_validation  2026-11-29T10:00:00Z\n");
}

TEST(PrintLookupResponseTest, NearestShowsTheDistancePerDimension) {
  v1::LookupRequest request;
  request.set_family("flash_attn");
  (*request.mutable_problem()->mutable_dims())["batch"] = 12;
  (*request.mutable_problem()->mutable_dims())["heads"] = 32;
  request.mutable_problem()->set_dtype(v1::BFLOAT16);
  v1::LookupResponse response;
  response.set_match(v1::NEAREST);
  *response.mutable_entry() = SampleEntry();
  v1::DimDistance* distance = response.add_distance();
  distance->set_name("batch");
  distance->set_requested(12);
  distance->set_tuned(16);

  std::ostringstream out;
  PrintLookupResponse(request, response, out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("NEAREST  flash_attn  batch=12,heads=32  bf16\n"));
  EXPECT_THAT(text, HasSubstr("batch: requested 12, tuned 16"));
  EXPECT_THAT(text, HasSubstr("BLOCK_M=128,BLOCK_N=64"));
  EXPECT_THAT(text, HasSubstr("41.26 us median"));
  EXPECT_THAT(text, HasSubstr("+4.5% over the runner-up"));
  EXPECT_THAT(text, HasSubstr("NVIDIA H200 (sm_90, 132 SMs)"));
}

TEST(PrintLookupResponseTest, MissShowsTheReasonAndNoConfig) {
  v1::LookupRequest request;
  request.set_family("flash_attn");
  (*request.mutable_problem()->mutable_dims())["batch"] = 8;
  request.mutable_problem()->set_dtype(v1::FLOAT16);
  v1::LookupResponse response;
  response.set_match(v1::MISS);
  response.set_miss_reason("no entry for fp16 on NVIDIA H200");
  response.set_miss_kind(v1::MISS_OTHER_DEVICE);

  std::ostringstream out;
  PrintLookupResponse(request, response, out);
  EXPECT_THAT(out.str(), HasSubstr("MISS  flash_attn  batch=8  fp16\n"));
  EXPECT_THAT(out.str(), HasSubstr("why          other-device ("));
  EXPECT_THAT(out.str(), HasSubstr("reason       no entry for fp16 on NVIDIA H200"));
  EXPECT_THAT(out.str(), Not(HasSubstr("config")));
}

TEST(PrintEntryDetailTest, MarksTheWinnerAndListsFinalistsFirst) {
  v1::GetEntryResponse response;
  *response.mutable_entry() = SampleEntry();
  v1::Measurement* screen = response.add_measurements();
  screen->set_status(v1::OK);
  screen->set_phase(v1::SCREEN);
  (*screen->mutable_config()->mutable_params())["BLOCK_M"] = 64;
  screen->mutable_timing()->set_median_us(30);
  v1::Measurement* broken = response.add_measurements();
  broken->set_status(v1::WRONG_RESULT);
  broken->set_phase(v1::SCREEN);
  broken->set_family(response.entry().family());
  broken->set_detail(response.entry().family() +
                     " m=64 bf16 [BLOCK_M=32]: validate seed 2: max error 0.5 at index 17\nmore");
  broken->set_max_error(0.5);
  v1::Measurement* winner = response.add_measurements();
  winner->set_status(v1::OK);
  winner->set_phase(v1::SERIAL_VALIDATION);
  *winner->mutable_config() = response.entry().config();
  winner->mutable_timing()->set_median_us(41.256);

  std::ostringstream out;
  PrintEntryDetail(response, out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("3 measurements\n"));
  const size_t winner_at = text.find("*  OK            serial_validation");
  const size_t screen_at = text.find("OK            screen");
  const size_t broken_at = text.find("WRONG_RESULT  screen");
  ASSERT_NE(winner_at, std::string::npos) << text;
  ASSERT_NE(screen_at, std::string::npos) << text;
  ASSERT_NE(broken_at, std::string::npos) << text;
  EXPECT_LT(winner_at, screen_at);
  EXPECT_LT(screen_at, broken_at);
  // The context the columns already show is not repeated.
  EXPECT_THAT(text, HasSubstr("  0.5  validate seed 2: max error 0.5 at index 17\n"));
}

TEST(PrintJsonTest, PrintsProtoFieldNamesAndDefaults) {
  v1::LookupResponse response;
  response.set_match(v1::MISS);
  std::ostringstream out;
  ASSERT_TRUE(PrintJson(response, out).ok());
  EXPECT_THAT(out.str(), HasSubstr("\"match\": \"MISS\""));
  EXPECT_THAT(out.str(), HasSubstr("\"miss_reason\": \"\""));
  v1::LookupResponse parsed;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(out.str(), &parsed).ok());
  EXPECT_EQ(parsed.match(), v1::MISS);
}

TEST(FormatJobCountsTest, MentionsOnlyWhatHappened) {
  v1::JobCounts counts;
  counts.set_problems(4);
  counts.set_variants(100);
  counts.set_compiled(100);
  counts.set_measured(90);
  counts.set_ok(88);
  counts.set_wrong_result(2);
  EXPECT_EQ(FormatJobCounts(counts),
            "4 problems, 100 variants: 100 compiled, 90 measured: 88 ok, 2 wrong result");

  v1::JobCounts compile_only;
  compile_only.set_problems(4);
  compile_only.set_variants(48);
  compile_only.set_compiles(26);
  compile_only.set_compiled(20);
  compile_only.set_compile_cache_hits(4);
  compile_only.set_compile_errors(2);
  compile_only.set_compile_timeouts(1);
  EXPECT_EQ(FormatJobCounts(compile_only),
            "4 problems, 48 variants (26 distinct compiles): 20 compiled (4 cache hits, 2 errors, "
            "1 timeouts)");
}

TEST(FormatDeviceTest, LeavesOutUnsetParts) {
  v1::Device device;
  device.set_name("NVIDIA H200");
  EXPECT_EQ(FormatDevice(device), "NVIDIA H200");
  device.set_compute_capability(90);
  device.set_sm_count(132);
  EXPECT_EQ(FormatDevice(device), "NVIDIA H200 (sm_90, 132 SMs)");
}

TEST(PrintLookupResponseTest, ADeclaredTieSaysSo) {
  v1::LookupRequest request;
  request.set_family("flash_attn");
  v1::LookupResponse response;
  response.set_match(v1::EXACT);
  v1::Entry& entry = *response.mutable_entry();
  entry.set_tie(true);
  entry.set_tied(3);
  entry.set_margin(-0.002);
  std::ostringstream out;
  PrintLookupResponse(request, response, out);
  EXPECT_THAT(out.str(), HasSubstr("margin       tie among 3 configs within the noise"));
  EXPECT_THAT(out.str(), HasSubstr("next best -0.2%"));
}

}  // namespace
}  // namespace autotune::client
