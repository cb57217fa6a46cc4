// The `autotune` subcommands, for the command table in cli.cc, and what they
// share. Private to the CLI: cli.cc, cli_lookup.cc, cli_jobs.cc,
// cli_admin.cc, cli_check.cc and cli_plan.cc.
//
// Each factory adds its subcommand to `root` and returns how to prepare and
// run it. A command that asks the daemon once ends in PrintAnswer:
//
//   command.run = [s, io](Client& client) {
//     return PrintAnswer(client.Stats(v1::StatsRequest()), s->json, io.out, PrintStats);
//   };
#ifndef AUTOTUNE_CLIENT_CLI_CLI_COMMANDS_H_
#define AUTOTUNE_CLIENT_CLI_CLI_COMMANDS_H_

#include <functional>
#include <ostream>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/cli_flags.h"
#include "client/cli/cli_format.h"
#include "client/client.h"

namespace autotune::client {

// One subcommand. CLI11 fills its flags; `prepare` checks them and builds the
// request without contacting anyone, so its errors are usage errors; `run`
// talks to the server and prints the answer.
struct Command {
  CLI::App* app = nullptr;
  std::function<absl::Status()> prepare = [] { return absl::OkStatus(); };  // nothing to check
  std::function<absl::Status(Client&)> run;
  // Instead of `run`, for a command that needs no daemon to be running
  // (check, warmup --local): always, or when `is_offline` says so.
  std::function<absl::Status()> run_offline;
  std::function<bool()> is_offline;
};

// Where command output goes: answers to `out`, progress of long commands to
// `err` when `out` carries JSON.
struct Streams {
  std::ostream& out;
  std::ostream& err;
};

// The selectors of ls, invalidate and export: --family, --hash, --device,
// --dims, --dtype, --nvrtc-older-than.
void AddFilterFlags(CLI::App* app, FilterFlags& flags);
void AddJsonFlag(CLI::App* app, bool& json);

// Prints the daemon's answer: as protobuf JSON under --json, else as
// `print_text(response, out)` writes it for people.
template <typename Response, typename PrintText>
absl::Status PrintAnswer(const Response& response, bool json, std::ostream& out,
                         PrintText&& print_text) {
  if (json) return PrintJson(response, out);
  print_text(response, out);
  return absl::OkStatus();
}

// The same for a call's result: an error is returned as it is and nothing
// is printed.
template <typename Response, typename PrintText>
absl::Status PrintAnswer(const absl::StatusOr<Response>& response, bool json, std::ostream& out,
                         PrintText&& print_text) {
  if (!response.ok()) return response.status();
  return PrintAnswer(*response, json, out, print_text);
}

// cli_lookup.cc: answers from the cache.
Command LookupCommand(CLI::App& root, Streams io);  // lookup
Command ListCommand(CLI::App& root, Streams io);    // ls
Command ShowCommand(CLI::App& root, Streams io);    // show

// cli_jobs.cc: warmup jobs.
Command WarmupCommand(CLI::App& root, Streams io);  // warmup
Command JobsCommand(CLI::App& root, Streams io);    // jobs
Command ReportCommand(CLI::App& root, Streams io);  // report

// cli_admin.cc: the daemon's families, the cache's contents and access.
Command RegisterCommand(CLI::App& root, Streams io);       // register
Command KernelsCommand(CLI::App& root, Streams io);        // kernels
Command InvalidateCommand(CLI::App& root, Streams io);     // invalidate
Command StatsCommand(CLI::App& root, Streams io);          // stats
Command GcCommand(CLI::App& root, Streams io);             // gc
Command ExportCommand(CLI::App& root, Streams io);         // export
Command ImportCommand(CLI::App& root, Streams io);         // import
Command ExportConfigsCommand(CLI::App& root, Streams io);  // export-configs
Command BackupCommand(CLI::App& root, Streams io);         // backup
Command TokenCommand(CLI::App& root, Streams io);          // token new
Command UnregisterCommand(CLI::App& root, Streams io);     // unregister
Command AdminUrlCommand(CLI::App& root, Streams io);       // admin-url

// cli_check.cc: a family checked and compiled here, with no daemon.
Command CheckCommand(CLI::App& root, Streams io);  // check

// cli_plan.cc: a model's warmup manifest, written here with no daemon.
Command PlanCommand(CLI::App& root, Streams io);  // plan

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_CLI_COMMANDS_H_
