#include "client/cli/cli.h"

#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/paths.h"
#include "base/token.h"
#include "base/version.h"
#include "client/cli/cli_commands.h"
#include "client/cli/cli_flags.h"
#include "client/client.h"

namespace autotune::client {

void AddFilterFlags(CLI::App* app, FilterFlags& flags) {
  app->add_option("--family", flags.family, "Kernel family name");
  app->add_option("--hash", flags.hash, "Family content hash");
  app->add_option("--device", flags.device, "Device name, e.g. \"NVIDIA H200\"");
  app->add_option("--dims", flags.problem.dims,
                  "Problem dimensions, e.g. batch=8,heads=32 (with --dtype)");
  app->add_option("--dtype", flags.problem.dtype, "Data type, e.g. bf16 (with --dims)");
  app->add_option("--nvrtc-older-than", flags.nvrtc_older_than,
                  "Entries compiled by an NVRTC older than MAJOR.MINOR");
}

void AddJsonFlag(CLI::App* app, bool& json) {
  app->add_flag("--json", json, "Print the answer as protobuf JSON");
}

namespace {

struct GlobalFlags {
  std::string server = ClientServerAddress();
  double timeout_s = 10;
  bool tls = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file = [] {
    const char* path = std::getenv("AUTOTUNE_TOKEN_FILE");
    return std::string(path == nullptr ? "" : path);
  }();
};

// One line, whatever the message holds; a message of several problems (a
// family's checks) keeps one per line, each indented under the first.
std::string ErrorLines(absl::string_view message) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(message, absl::ByAnyChar("\r\n"))) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (!line.empty()) lines.push_back(absl::StrReplaceAll(line, {{"\t", " "}}));
  }
  return absl::StrJoin(lines, "\n  ");
}

int ReportError(std::ostream& err, absl::string_view command, const absl::Status& status) {
  err << "autotune: " << command << ": " << absl::StatusCodeToString(status.code()) << ": "
      << ErrorLines(WithWarmupFlags(status.message())) << "\n";
  return status.code() == absl::StatusCode::kUnavailable ? kExitUnreachable : kExitError;
}

ClientOptions ClientOptionsFromFlags(const GlobalFlags& flags) {
  ClientOptions options;
  options.address = flags.server;
  options.timeout = absl::Seconds(flags.timeout_s);
  if (flags.tls || !flags.tls_ca.empty() || !flags.tls_cert.empty() || !flags.tls_key.empty()) {
    options.tls = TlsOptions{flags.tls_ca, flags.tls_cert, flags.tls_key};
  }
  return options;
}

}  // namespace

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app("Ask the autotune daemon for tuned kernel configs and manage its cache.",
               "autotune");
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", kVersion);
  GlobalFlags global;
  app.add_option("--server", global.server,
                 "Daemon address: unix:///path or host:port (env AUTOTUNE_SERVER)")
      ->capture_default_str();
  app.add_option("--timeout", global.timeout_s,
                 "Deadline of each call in seconds (export/import: 10 min; warmup: none)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--tls", global.tls, "Use TLS with the system's root certificates");
  app.add_option("--tls-ca", global.tls_ca, "PEM root certificates (implies --tls)");
  app.add_option("--tls-cert", global.tls_cert, "PEM client certificate (with --tls-key)");
  app.add_option("--tls-key", global.tls_key, "PEM client private key (with --tls-cert)");
  app.add_option("--token-file", global.token_file,
                 "File holding a bearer token for the daemon (env AUTOTUNE_TOKEN_FILE)");

  const Streams io{out, err};
  const std::vector<Command> commands = {
      LookupCommand(app, io),     ListCommand(app, io),          ShowCommand(app, io),
      InvalidateCommand(app, io), StatsCommand(app, io),         KernelsCommand(app, io),
      RegisterCommand(app, io),   JobsCommand(app, io),          GcCommand(app, io),
      ExportCommand(app, io),     ImportCommand(app, io),        WarmupCommand(app, io),
      ReportCommand(app, io),     ExportConfigsCommand(app, io), TokenCommand(app, io),
      BackupCommand(app, io),     UnregisterCommand(app, io),    CheckCommand(app, io),
      AdminUrlCommand(app, io),   PlanCommand(app, io),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e, out, err);  // --help, --version
      return kExitOk;
    }
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    const std::string help = parsed.empty()
                                 ? "autotune --help"
                                 : absl::StrCat("autotune ", parsed[0]->get_name(), " --help");
    err << "autotune: " << (parsed.empty() ? "" : parsed[0]->get_name() + ": ") << e.what()
        << "; see " << help << "\n";
    return kExitUsage;
  }

  const Command* selected = nullptr;
  for (const Command& command : commands) {
    if (command.app->parsed()) selected = &command;
  }
  if (selected == nullptr) {
    err << "autotune: no command given; see autotune --help\n";
    return kExitUsage;
  }
  const std::string name = selected->app->get_name();
  if (global.tls_cert.empty() != global.tls_key.empty()) {
    err << "autotune: " << name << ": --tls-cert and --tls-key go together\n";
    return kExitUsage;
  }
  if (absl::Status prepared = selected->prepare(); !prepared.ok()) {
    err << "autotune: " << name << ": " << ErrorLines(prepared.message()) << "\n";
    return kExitUsage;
  }
  if (selected->run_offline && (!selected->is_offline || selected->is_offline())) {
    if (absl::Status status = selected->run_offline(); !status.ok()) {
      out.flush();
      return ReportError(err, name, status);
    }
    return kExitOk;
  }
  ClientOptions client_options = ClientOptionsFromFlags(global);
  if (!global.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(global.token_file);
    if (!token.ok()) {
      err << "autotune: " << name << ": --token-file: " << ErrorLines(token.status().message())
          << "\n";
      return kExitUsage;
    }
    client_options.token = *std::move(token);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) return ReportError(err, name, client.status());
  if (absl::Status status = selected->run(**client); !status.ok()) {
    out.flush();
    return ReportError(err, name, status);
  }
  return kExitOk;
}

}  // namespace autotune::client
