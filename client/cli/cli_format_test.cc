#include "client/cli/cli_format.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

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
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(2940), "2,940");
  EXPECT_EQ(FormatCount(-1234567), "-1,234,567");
  EXPECT_EQ(FormatSeconds(0.42), "0.4 s");
  EXPECT_EQ(FormatSeconds(9.94), "9.9 s");
  EXPECT_EQ(FormatSeconds(9.96), "10 s");
  EXPECT_EQ(FormatSeconds(41.3), "41 s");
  EXPECT_EQ(FormatSeconds(125), "2 min 05 s");
  EXPECT_EQ(FormatSeconds(3725), "1 h 02 min");
  EXPECT_EQ(FormatSeconds(-3), "0.0 s");
}

TEST(FormatTest, ConfigsAreSortedByNameAndSpaceSeparated) {
  v1::Config config;
  (*config.mutable_params())["THREADS"] = 256;
  (*config.mutable_params())["BLOCK_V"] = 64;
  EXPECT_EQ(FormatConfig(config), "BLOCK_V=64 THREADS=256");
  EXPECT_EQ(FormatConfig(v1::Config()), "");
}

v1::Entry FormatSampleEntry() {
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
  *entries.Add() = FormatSampleEntry();
  std::ostringstream out;
  PrintEntryTable(entries, out);
  EXPECT_EQ(out.str(),
            "FAMILY      DIMS               DTYPE  DEVICE       CONFIG                  MEDIAN_US  "
            "MARGIN  PHASE              TUNED_AT\n"
            "flash_attn  batch=16,heads=32  bf16   NVIDIA H200  BLOCK_M=128 BLOCK_N=64      41.26  "
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
  *response.mutable_entry() = FormatSampleEntry();
  v1::DimDistance* distance = response.add_distance();
  distance->set_name("batch");
  distance->set_requested(12);
  distance->set_tuned(16);

  std::ostringstream out;
  PrintLookupResponse(request, response, out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("NEAREST  flash_attn  batch=12,heads=32  bf16\n"));
  EXPECT_THAT(text, HasSubstr("batch: requested 12, tuned 16"));
  EXPECT_THAT(text, HasSubstr("config       BLOCK_M=128 BLOCK_N=64\n"));
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

  // With the family's default, its config and launch for this problem (what
  // a caller runs on a MISS), as the JSON has them.
  (*response.mutable_default_config()->mutable_params())["BLOCK_M"] = 64;
  response.mutable_default_launch()->add_grid(8);
  response.mutable_default_launch()->add_block(128);
  response.mutable_default_launch()->set_dynamic_shared_bytes(4096);
  std::ostringstream with_default;
  PrintLookupResponse(request, response, with_default);
  EXPECT_THAT(with_default.str(), HasSubstr("default      BLOCK_M=64\n"));
  EXPECT_THAT(with_default.str(),
              HasSubstr("default launch grid 8, block 128, 4096 B dynamic shared memory\n"));
}

v1::Measurement* AddMeasurement(v1::GetEntryResponse& response, v1::Phase phase,
                                v1::VariantStatus status, int64_t block_n, double median_us) {
  v1::Measurement* m = response.add_measurements();
  m->set_family(response.entry().family());
  m->set_phase(phase);
  m->set_status(status);
  (*m->mutable_config()->mutable_params())["BLOCK_M"] = 128;
  (*m->mutable_config()->mutable_params())["BLOCK_N"] = block_n;
  m->mutable_timing()->set_median_us(median_us);
  return m;
}

// A tie among three serial candidates, decided for the second fastest; a
// screen of twelve valid variants and three rejected ones.
v1::GetEntryResponse SampleEvidence() {
  v1::GetEntryResponse response;
  v1::Entry& entry = *response.mutable_entry();
  entry = FormatSampleEntry();
  entry.set_tie(true);
  entry.set_tied(3);
  entry.set_margin(-0.002);
  entry.mutable_timing()->set_min_us(40.9);
  entry.mutable_timing()->set_q3_us(41.5);
  entry.mutable_timing()->set_achieved_gbps(812.3);
  entry.set_candidates(3);
  entry.set_rounds(24);
  entry.set_noise(0.0031);
  entry.set_throttled_rounds(2);
  entry.set_stop("noise below 0.5%");
  entry.set_contended(true);
  entry.set_contention("pid 4121 (2.0 GiB), utilization 97%");
  entry.mutable_limits()->set_copy_gbps(934.5);
  entry.mutable_limits()->set_peak_bandwidth_gbps(4800);
  entry.mutable_limits()->set_default_sm_clock_mhz(1980);
  entry.mutable_limits()->set_min_sm_clock_mhz(1755);
  entry.mutable_limits()->set_max_sm_clock_mhz(1980);

  for (int64_t block_n = 1; block_n <= 12; ++block_n) {
    AddMeasurement(response, v1::SCREEN, v1::OK, block_n, 40 + block_n)
        ->mutable_timing()
        ->set_cv(0.01);
  }
  v1::Measurement* wrong = AddMeasurement(response, v1::SCREEN, v1::WRONG_RESULT, 32, 0);
  wrong->set_detail(entry.family() +
                    " batch=16,heads=32 bf16 [BLOCK_M=128 BLOCK_N=32]: validate seed 2: max "
                    "error 0.5 at index 17\nmore");
  wrong->set_max_error(0.5);
  AddMeasurement(response, v1::SCREEN, v1::WRONG_RESULT, 48, 0);
  AddMeasurement(response, v1::COMPILE, v1::COMPILE_ERROR, 96, 0)
      ->set_detail("error: too many resources requested");

  const struct {
    int64_t block_n;
    double median, min, q3;
  } serial[] = {{64, 41.256, 40.9, 41.5}, {2, 41.2, 40.8, 41.6}, {3, 41.4, 41.0, 41.7}};
  for (const auto& s : serial) {
    v1::Measurement* m =
        AddMeasurement(response, v1::SERIAL_VALIDATION, v1::OK, s.block_n, s.median);
    m->mutable_timing()->set_min_us(s.min);
    m->mutable_timing()->set_q3_us(s.q3);
    m->set_rounds(24);
    m->set_noise(0.003);
  }
  (*response.mutable_entry()->mutable_config()->mutable_params())["BLOCK_N"] = 64;
  return response;
}

TEST(PrintEntryDetailTest, ExplainsWhyTheEntryWon) {
  std::ostringstream out;
  PrintEntryDetail(SampleEvidence(), out);
  const std::string text = out.str();
  EXPECT_THAT(text,
              HasSubstr("  config       BLOCK_M=128 BLOCK_N=64\n"
                        "  time         41.26 us median (min 40.90)\n"
                        "  interval     [40.90, 41.50] us (min, q3)\n"
                        "  throughput   812.3 GB/s (87% of the 934.5 GB/s measured copy rate)\n"
                        "  margin       tie among 3 configs within the noise, decided by the "
                        "tie-break (next best -0.2%)\n"
                        "  serial       3 candidates, 24 rounds, noise 0.31%, 2 rounds dropped "
                        "for a throttled clock; stop: noise below 0.5%\n"
                        "  contended    CONTENDED: measured with another compute process on "
                        "the GPU: pid 4121 (2.0 GiB), utilization 97%\n"
                        "  limits       copy 934.5 GB/s, peak 4800.0 GB/s; SM clock 1980 MHz "
                        "default, 1755-1980 MHz over the rounds\n"))
      << text;
  EXPECT_THAT(text,
              HasSubstr("Serial validation: 3 candidates, timed together\n"
                        "   CONFIG                  MEDIAN_US  VS_WINNER  [MIN, Q3]       ROUNDS  "
                        "NOISE  STATUS  NOTE\n"))
      << text;
  // Sorted by median; the winner is marked, the others say how far off.
  const size_t fastest = text.find(
      "   BLOCK_M=128 BLOCK_N=2       41.20     -0.14%  [40.80, 41.60]      24  0.30%  OK\n");
  const size_t winner = text.find(
      "*  BLOCK_M=128 BLOCK_N=64      41.26             [40.90, 41.50]      24  0.30%  OK\n");
  const size_t third = text.find(
      "   BLOCK_M=128 BLOCK_N=3       41.40     +0.35%  [41.00, 41.70]      24  0.30%  OK\n");
  ASSERT_NE(fastest, std::string::npos) << text;
  ASSERT_NE(winner, std::string::npos) << text;
  ASSERT_NE(third, std::string::npos) << text;
  EXPECT_LT(fastest, winner);
  EXPECT_LT(winner, third);

  EXPECT_THAT(text, HasSubstr("Screen: fastest 10 of 12 valid variants\n"));
  EXPECT_THAT(text, HasSubstr("   BLOCK_M=128 BLOCK_N=10      50.00  1.00%\n"));
  EXPECT_THAT(text, Not(HasSubstr("BLOCK_N=11 ")));
  EXPECT_THAT(text, HasSubstr("\n15 variants: OK 12, COMPILE_ERROR 1, WRONG_RESULT 2\n"));
  EXPECT_THAT(text, HasSubstr("Rejected: 3\n"));
  // The context the columns already show is not repeated.
  EXPECT_THAT(text, HasSubstr("WRONG_RESULT   screen   BLOCK_M=128 BLOCK_N=32      0.5  validate "
                              "seed 2: max error 0.5 at index 17\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("COMPILE_ERROR  compile  BLOCK_M=128 BLOCK_N=96        -  error: too "
                              "many resources requested\n"));
}

TEST(PrintEntryDetailTest, AScreenedEntryHasNoSerialTable) {
  v1::GetEntryResponse response;
  *response.mutable_entry() = FormatSampleEntry();
  response.mutable_entry()->set_phase(v1::SCREEN);
  AddMeasurement(response, v1::SCREEN, v1::OK, 64, 41.256);
  std::ostringstream out;
  PrintEntryDetail(response, out);
  EXPECT_THAT(out.str(), HasSubstr("Serial validation: none (chosen on the screen's timing)\n"));
  EXPECT_THAT(out.str(), HasSubstr("*  BLOCK_M=128 BLOCK_N=64      41.26"));
  EXPECT_THAT(out.str(), Not(HasSubstr("Rejected")));
  EXPECT_THAT(out.str(), Not(HasSubstr("  serial  ")));
  EXPECT_THAT(out.str(), Not(HasSubstr("contended")));
}

TEST(PrintEntryDetailTest, ListsTenRejectedVariantsAndCountsTheRest) {
  v1::GetEntryResponse response;
  *response.mutable_entry() = FormatSampleEntry();
  for (int64_t block_n = 1; block_n <= 12; ++block_n) {
    AddMeasurement(response, v1::SCREEN, v1::TIMEOUT, block_n, 0);
  }
  std::ostringstream out;
  PrintEntryDetail(response, out);
  EXPECT_THAT(out.str(), HasSubstr("Rejected: first 10 of 12\n"));
  EXPECT_THAT(out.str(), HasSubstr("12 variants: TIMEOUT 12\n"));
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

// The daemon names job options by field; every field has its warmup flag,
// so no message can name one the CLI user cannot set.
TEST(WarmupFlagTest, EveryJobOptionHasItsFlag) {
  const google::protobuf::Descriptor* options = v1::JobOptions::descriptor();
  for (int i = 0; i < options->field_count(); ++i) {
    EXPECT_THAT(WarmupFlag(options->field(i)->name()), StartsWith("--"))
        << options->field(i)->name();
  }
  EXPECT_EQ(WarmupFlag("no_such_option"), "");
}

TEST(WarmupFlagTest, MessagesGetTheFlagAfterEachOptionTheyName) {
  EXPECT_EQ(WithWarmupFlags("measure anyway with JobOptions.force (entries are then marked "
                            "CONTENDED); or raise JobOptions.quiet_wait_s."),
            "measure anyway with JobOptions.force (autotune warmup --force) (entries are then "
            "marked CONTENDED); or raise JobOptions.quiet_wait_s (autotune warmup --quiet-wait).");
  EXPECT_EQ(WithWarmupFlags("JobOptions.forced and JobOptions.x stay as they are"),
            "JobOptions.forced and JobOptions.x stay as they are");
  EXPECT_EQ(WithWarmupFlags("no option named"), "no option named");
}

}  // namespace
}  // namespace autotune::client
