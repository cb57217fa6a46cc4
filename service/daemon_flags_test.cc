#include "service/daemon_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using config::v1::DaemonConfig;
using google::protobuf::FieldDescriptor;
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

  // What --print-config shows: every value in effect, from either source.
  const DaemonConfig effective = DaemonConfigOf(app);
  EXPECT_EQ(effective.db(), "/var/lib/autotune/from-file.db");
  EXPECT_EQ(effective.readers(), 2);
  EXPECT_THAT(effective.listen(), ElementsAre("unix:///tmp/b.sock"));
  EXPECT_TRUE(effective.has_max_job_variants());
  EXPECT_EQ(effective.max_job_variants(), 0);
  EXPECT_DOUBLE_EQ(effective.health_interval(), 0.5);
  EXPECT_FALSE(effective.has_log_level());
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
