#include "service/daemon_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "base/gpu_lease.h"
#include "base/paths.h"
#include "base/temp_dir.h"
#include "cache/store.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kernels/profile_task.h"
#include "service/defaults.h"

namespace autotune::service {
namespace {

using config::v1::DaemonConfig;
using google::protobuf::FieldDescriptor;
using google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Parses `args` (without the program name) the way autotuned does; the
// error text, or "" when it parsed.
std::string Parse(CLI::App& app, std::vector<std::string> args) {
  std::vector<std::string> argv = {"autotuned"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> pointers;
  for (const std::string& arg : argv) pointers.push_back(arg.c_str());
  try {
    app.parse(static_cast<int>(pointers.size()), pointers.data());
  } catch (const CLI::ParseError& error) {
    return ConfigErrorText(app, error, args);
  }
  return "";
}

class DaemonFlagsTest : public ::testing::Test {
 protected:
  std::string WriteConfig(const std::string& text) {
    const std::string path = dir_.File(absl::StrCat("autotuned-", ++files_, ".textproto"));
    std::ofstream(path) << text;
    return path;
  }

  ::autotune::testing::TempDir dir_;
  int files_ = 0;
};

TEST(DaemonConfigTest, EveryFlagHasAFieldOfItsNameAndEveryFieldAFlag) {
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  const auto* descriptor = DaemonConfig::descriptor();
  std::vector<std::string> flag_fields;
  for (const CLI::Option* option : app.get_options()) {
    if (!option->get_configurable()) continue;  // --help, --config, --print-config
    const std::string field = absl::StrReplaceAll(option->get_single_name(), {{"-", "_"}});
    EXPECT_NE(descriptor->FindFieldByName(field), nullptr)
        << "--" << option->get_single_name() << " has no DaemonConfig field " << field;
    flag_fields.push_back(field);
  }
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    EXPECT_THAT(flag_fields, ::testing::Contains(field->name()))
        << "DaemonConfig." << field->name() << " has no flag";
    EXPECT_EQ(field->is_repeated(),
              app.get_option("--" + absl::StrReplaceAll(field->name(), {{"_", "-"}}))
                      ->get_items_expected_max() > 1)
        << field->name() << ": a repeated field is a repeatable flag, and only that";
    EXPECT_TRUE(field->is_repeated() || field->has_presence())
        << field->name() << " must be optional: a file that sets 0 or false must say so";
    const auto type = field->cpp_type();
    EXPECT_TRUE(type == FieldDescriptor::CPPTYPE_STRING || type == FieldDescriptor::CPPTYPE_BOOL ||
                type == FieldDescriptor::CPPTYPE_INT32 || type == FieldDescriptor::CPPTYPE_INT64 ||
                type == FieldDescriptor::CPPTYPE_DOUBLE)
        << field->name() << ": a type the formatter does not convert";
  }
}

TEST_F(DaemonFlagsTest, TheFileFillsWhatTheCommandLineLeavesAndFlagsWin) {
  const std::string config = WriteConfig(R"(
    # comments are allowed
    db: "/var/lib/autotune/from-file.db"
    listen: "unix:///run/autotune/a.sock"
    listen: "127.0.0.1:7000"
    readers: 8
    insecure: true
    variant_timeout: 2.5
    max_job_variants: 0
    peer_role: "gid:100=reader"
    anonymous_role: "reader"
    socket_mode: "0660"
    health_interval: 0.5
    log_format: "json"
  )");
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  ASSERT_EQ(Parse(app, {"--config", config, "--readers", "2", "--listen", "unix:///tmp/b.sock",
                        "--anonymous-role=none"}),
            "");
  const ServerOptions& options = flags.server;
  EXPECT_EQ(options.db_path, "/var/lib/autotune/from-file.db");
  EXPECT_EQ(options.readers, 2);
  EXPECT_THAT(options.listen, ElementsAre("unix:///tmp/b.sock"));  // replaced, not appended
  EXPECT_TRUE(options.insecure);
  EXPECT_DOUBLE_EQ(options.variant_timeout_s, 2.5);
  EXPECT_EQ(options.max_job_variants, 0);
  EXPECT_THAT(options.auth.peer_roles, ElementsAre("gid:100=reader"));
  EXPECT_EQ(options.auth.anonymous_role, "none");
  EXPECT_EQ(options.socket_mode, 0660u);
  EXPECT_EQ(options.health_interval, absl::Milliseconds(500));
  EXPECT_EQ(flags.log_format, "json");
  EXPECT_EQ(flags.log_level, "info");  // in neither: the default

  // The options given, from either source; the defaults are not in it.
  const DaemonConfig given = DaemonConfigOf(app);
  EXPECT_EQ(given.db(), "/var/lib/autotune/from-file.db");
  EXPECT_EQ(given.readers(), 2);
  EXPECT_THAT(given.listen(), ElementsAre("unix:///tmp/b.sock"));
  EXPECT_TRUE(given.has_max_job_variants());
  EXPECT_EQ(given.max_job_variants(), 0);
  EXPECT_DOUBLE_EQ(given.health_interval(), 0.5);
  EXPECT_FALSE(given.has_log_level());

  // What --print-config shows: every value in effect, from either source
  // or the defaults.
  const DaemonConfig effective = EffectiveDaemonConfig(flags);
  EXPECT_EQ(effective.db(), "/var/lib/autotune/from-file.db");
  EXPECT_EQ(effective.readers(), 2);
  EXPECT_THAT(effective.listen(), ElementsAre("unix:///tmp/b.sock"));
  EXPECT_TRUE(effective.has_max_job_variants());
  EXPECT_EQ(effective.max_job_variants(), 0);
  EXPECT_DOUBLE_EQ(effective.health_interval(), 0.5);
  EXPECT_EQ(effective.log_level(), "info");
  EXPECT_EQ(effective.quiet_wait(), kDefaultQuietWaitS);
}

TEST_F(DaemonFlagsTest, AFalseInTheFileTurnsAFlagOff) {
  const std::string config = WriteConfig("insecure: false\n");
  DaemonFlags flags;
  flags.server.insecure = true;
  CLI::App app;
  AddDaemonFlags(app, flags);
  ASSERT_EQ(Parse(app, {"--config", config}), "");
  EXPECT_FALSE(flags.server.insecure);
}

TEST_F(DaemonFlagsTest, AFileThatDoesNotParseNamesItsLineAndColumn) {
  const std::string config = WriteConfig("db: \"/x.db\"\n\n  reader: 3\n");
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  const std::string error = Parse(app, {"--config", config});
  EXPECT_THAT(error, HasSubstr("config file " + config));
  EXPECT_THAT(error, HasSubstr("line 3 column "));
  EXPECT_THAT(error, HasSubstr("reader"));
  EXPECT_EQ(flags.server.db_path, "");  // nothing taken from a bad file

  DaemonFlags typed;
  CLI::App typed_app;
  AddDaemonFlags(typed_app, typed);
  EXPECT_THAT(Parse(typed_app, {"--config", WriteConfig("readers: \"four\"\n")}),
              HasSubstr("line 1 column 10"));
}

TEST_F(DaemonFlagsTest, AValueThatFailsItsCheckNamesTheFileAndTheField) {
  const std::string config = WriteConfig("readers: 100\n");
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  const std::string error = Parse(app, {"--config", config});
  EXPECT_THAT(error, HasSubstr("config file " + config + ": readers: --readers"));
  EXPECT_THAT(error, HasSubstr("100"));

  DaemonFlags role_flags;
  CLI::App role_app;
  AddDaemonFlags(role_app, role_flags);
  EXPECT_THAT(Parse(role_app, {"--config", WriteConfig("anonymous_role: \"root\"\n")}),
              HasSubstr(": anonymous_role: --anonymous-role"));

  // The same bad value on the command line is the flag's own error.
  DaemonFlags cli_flags;
  CLI::App cli_app;
  AddDaemonFlags(cli_app, cli_flags);
  const std::string cli_error = Parse(cli_app, {"--config", config, "--readers", "99"});
  EXPECT_THAT(cli_error, ::testing::StartsWith("--readers"));
}

TEST_F(DaemonFlagsTest, AMissingConfigFileIsAnError) {
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  EXPECT_THAT(Parse(app, {"--config", dir_.File("absent.textproto")}),
              HasSubstr("absent.textproto"));
}

TEST(DaemonConfigTest, PrintConfigListsEveryDefaultWithTheValueOfItsConstant) {
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  ASSERT_EQ(Parse(app, {}), "");
  const DaemonConfig config = EffectiveDaemonConfig(flags);
  EXPECT_EQ(config.db(), DefaultDatabasePath());
  EXPECT_THAT(config.listen(), ElementsAre(DefaultServerAddress()));
  EXPECT_TRUE(config.has_insecure());
  EXPECT_FALSE(config.insecure());
  EXPECT_EQ(config.readers(), cache::kDefaultReaders);
  EXPECT_TRUE(config.has_compile_workers());
  EXPECT_EQ(config.compile_workers(), 0);  // one per core
  EXPECT_EQ(config.compile_memory_mb(), kDefaultCompileMemoryMb);
  EXPECT_EQ(config.compile_ahead(), kDefaultCompileAhead);
  EXPECT_TRUE(config.has_allow_unconfined_compiles());
  EXPECT_FALSE(config.allow_unconfined_compiles());
  EXPECT_EQ(config.variant_timeout(), kernels::kDefaultLaunchTimeoutS);
  EXPECT_EQ(config.lease_dir(), kDefaultLeaseDir);
  EXPECT_EQ(config.quiet_wait(), kDefaultQuietWaitS);
  EXPECT_EQ(config.tune_on_miss_per_hour(), kDefaultTuneOnMissPerHour);
  EXPECT_EQ(config.max_job_variants(), kDefaultMaxJobVariants);
  EXPECT_EQ(config.max_jobs_per_submitter(), kDefaultMaxJobsPerSubmitter);
  EXPECT_EQ(config.anonymous_role(), "none");
  EXPECT_EQ(config.socket_mode(), absl::StrFormat("%04o", kDefaultSocketMode));
  EXPECT_EQ(config.log_level(), "info");
  EXPECT_EQ(config.log_format(), "text");
  EXPECT_EQ(config.health_interval(), kDefaultHealthIntervalS);

  // The text: one line per setting, in the config file's format, and a
  // comment for each one not set.
  const std::string text = EffectiveConfigText(flags);
  for (const std::string& line : {
           absl::StrCat("readers: ", cache::kDefaultReaders),
           absl::StrCat("variant_timeout: ", kernels::kDefaultLaunchTimeoutS),
           absl::StrCat("lease_dir: \"", kDefaultLeaseDir, "\""),
           absl::StrCat("quiet_wait: ", kDefaultQuietWaitS),
           absl::StrCat("tune_on_miss_per_hour: ", kDefaultTuneOnMissPerHour),
           absl::StrCat("max_job_variants: ", kDefaultMaxJobVariants),
           absl::StrCat("max_jobs_per_submitter: ", kDefaultMaxJobsPerSubmitter),
           absl::StrFormat("socket_mode: \"%04o\"", kDefaultSocketMode),
           absl::StrCat("health_interval: ", kDefaultHealthIntervalS),
           std::string("insecure: false"),
           std::string("compile_workers: 0"),
           std::string("log_level: \"info\""),
           std::string("# tls_cert: not set"),
           std::string("# peer_role: not set"),
       }) {
    EXPECT_THAT(text, HasSubstr("\n" + line + "\n"));
  }
  const auto* descriptor = DaemonConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const std::string name = descriptor->field(i)->name();
    EXPECT_TRUE(absl::StrContains(text, "\n" + name + ": ") ||
                absl::StrContains(text, "\n# " + name + ": not set\n"))
        << name << " is not in --print-config's text:\n"
        << text;
  }
  // It parses back as a config file, to the same settings.
  absl::StatusOr<DaemonConfig> parsed = ParseDaemonConfig(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*parsed, config)) << text;
}

TEST_F(DaemonFlagsTest, PrintConfigShowsEverySettingAsGiven) {
  // Every field, none at its default: --print-config reads each from its
  // own option (a field added later must be added here too).
  const std::string file = WriteConfig("");
  DaemonConfig given;
  given.set_db("/srv/autotune/cache.db");
  given.add_listen("unix:///srv/autotune/a.sock");
  given.add_listen("127.0.0.1:7000");
  given.set_insecure(true);
  given.set_tls_cert(file);
  given.set_tls_key(file);
  given.set_tls_client_ca(file);
  given.set_readers(9);
  given.add_kernels("/srv/autotune/kernels");
  given.add_kernels("none");
  given.set_worker("/srv/autotune/worker");
  given.set_profile_worker(file);
  given.set_compile_workers(3);
  given.set_compile_memory_mb(1024);
  given.set_allow_unconfined_compiles(true);
  given.set_compile_ahead(0);
  given.set_gpus("0,1");
  given.set_variant_timeout(2.5);
  given.set_lease_dir("/srv/autotune/leases");
  given.set_quiet_wait(30);
  given.set_tune_on_miss_per_hour(0);
  given.set_max_job_variants(7);
  given.set_max_jobs_per_submitter(2);
  given.set_token_file(file);
  given.add_peer_role("uid:1000=tuner");
  given.add_peer_role("gid:100=reader");
  given.add_cert_role("ci=tuner");
  given.set_anonymous_role("reader");
  given.set_http_listen("127.0.0.1:9464");
  given.add_http_allow_host("autotune.internal");
  given.set_audit_log("none");
  given.set_backup_dir("/srv/autotune/backups");
  given.set_socket_mode("0660");
  given.set_log_level("debug");
  given.set_log_format("json");
  given.set_health_interval(0.5);
  const auto* descriptor = DaemonConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    EXPECT_TRUE(field->is_repeated() ? given.GetReflection()->FieldSize(given, field) > 0
                                     : given.GetReflection()->HasField(given, field))
        << field->name() << " is not set in this test";
  }
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(given, &text));

  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  ASSERT_EQ(Parse(app, {"--config", WriteConfig(text)}), "");
  const DaemonConfig effective = EffectiveDaemonConfig(flags);
  EXPECT_TRUE(MessageDifferencer::Equals(effective, given)) << "given:\n"
                                                            << given.DebugString() << "in effect:\n"
                                                            << effective.DebugString();
  absl::StatusOr<DaemonConfig> printed = ParseDaemonConfig(EffectiveConfigText(flags));
  ASSERT_TRUE(printed.ok()) << printed.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*printed, given));
}

TEST(DaemonConfigTest, TheHintOfEverySettingNamesItsFlag) {
  DaemonFlags flags;
  CLI::App app;
  AddDaemonFlags(app, flags);
  const auto* descriptor = DaemonConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const std::string hint = DaemonSettingHint(descriptor->field(i)->name());
    absl::string_view flag = hint;
    ASSERT_TRUE(absl::ConsumePrefix(&flag, "autotuned ")) << hint;
    EXPECT_NE(app.get_option_no_throw(std::string(flag)), nullptr) << hint;
  }
  // The settings the core's errors name are the config file's fields.
  for (const char* setting :
       {"max_job_variants", "max_jobs_per_submitter", "tune_on_miss_per_hour", "quiet_wait"}) {
    EXPECT_NE(descriptor->FindFieldByName(setting), nullptr) << setting;
  }
  EXPECT_EQ(DaemonSettingHint("max_job_variants"), "autotuned --max-job-variants");
}

TEST(DaemonConfigTest, PrintedConfigParsesBack) {
  DaemonConfig config;
  config.set_db("/a b/\"quoted\".db");
  config.add_listen("unix:///x");
  config.set_quiet_wait(1e-9);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(config, &text));
  absl::StatusOr<DaemonConfig> parsed = ParseDaemonConfig(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->db(), config.db());
  EXPECT_EQ(parsed->quiet_wait(), 1e-9);
}

}  // namespace
}  // namespace autotune::service
