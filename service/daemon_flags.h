// autotuned's command line and its config file, in one place so that the
// two cannot drift apart.
//
//   DaemonFlags flags;
//   CLI::App app{"autotuned: ..."};
//   AddDaemonFlags(app, flags);      // every flag, --config FILE and
//   app.parse(argc, argv);           //   --print-config; throws CLI::ParseError
//   ServerOptions options = flags.server;
//
// The config file (proto/daemon_config.proto, protobuf text format) has one
// field per flag, named like it with underscores. CLI11 reads it after the
// command line and fills only the options the command line left empty:
// flags win, a repeatable flag as a whole. Its values pass the same checks
// as the flags' (ranges, existing files, role names). A file that does not
// parse is a CLI::ConfigError saying "line L column C: <why>"; a value that
// fails its check is the flag's own error; ConfigErrorText() adds the file,
// and the field, to either.
//
// Every default is a constant of service/defaults.h (or of the layer that
// resolves it); `autotuned --print-config` prints every setting in effect,
// defaults included (EffectiveConfigText).
#ifndef AUTOTUNE_SERVICE_DAEMON_FLAGS_H_
#define AUTOTUNE_SERVICE_DAEMON_FLAGS_H_

#include <istream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "proto/daemon_config.pb.h"
#include "service/server.h"

namespace autotune::service {

struct DaemonFlags {
  ServerOptions server;
  std::string log_level = "info";
  std::string log_format = "text";  // or "json": one JSON object per line
  bool print_config = false;        // print every setting in effect and exit
};

// Adds every autotuned option to `app`, bound to `flags`, and makes
// `--config` read DaemonConfig text files. `flags` must outlive `app`.
void AddDaemonFlags(CLI::App& app, DaemonFlags& flags);

// Parses `text` as a DaemonConfig; the error says "line L column C: ...".
absl::StatusOr<config::v1::DaemonConfig> ParseDaemonConfig(const std::string& text);

// The options `app` was given, on the command line or in the config file,
// as a DaemonConfig. Options left at their defaults are not in it.
config::v1::DaemonConfig DaemonConfigOf(const CLI::App& app);

// Every setting in effect once `flags` are parsed (the command line, the
// config file and the defaults) as a DaemonConfig: each field is set, but
// for a string or repeated one left empty (not set, or a default resolved
// at start-up such as the kernels directory). The database and listen
// addresses are written resolved (DefaultDatabasePath(),
// DefaultServerAddress()).
config::v1::DaemonConfig EffectiveDaemonConfig(const DaemonFlags& flags);

// What --print-config prints: EffectiveDaemonConfig in the config file's
// format, one line per value in field order, with a comment line for each
// field left empty ("# tls_cert: not set"). It parses back to the same
// settings.
std::string EffectiveConfigText(const DaemonFlags& flags);

// The one-line message for a parse error of `app`: a config file error
// names the file, and a check that failed on a value the file gave names
// the file and its field.
std::string ConfigErrorText(const CLI::App& app, const CLI::ParseError& error,
                            const std::vector<std::string>& args);

// CLI11's config formatter for DaemonConfig text (set by AddDaemonFlags).
class DaemonConfigFormatter : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_DAEMON_FLAGS_H_
