// The `autotune` command line: lookups, cache administration and warmup jobs
// against a running autotuned. `autotune --help` lists the subcommands.
#ifndef AUTOTUNE_CLIENT_CLI_CLI_H_
#define AUTOTUNE_CLIENT_CLI_CLI_H_

#include <ostream>

namespace autotune::client {

// Exit statuses scripts can rely on.
enum CliExitCode : int {
  kExitOk = 0,           // success; a lookup MISS is an answer, so it is 0 too
  kExitError = 1,        // the server (or a file) answered with an error
  kExitUsage = 2,        // bad flags or flag values; nothing was sent
  kExitUnreachable = 3,  // the daemon could not be reached
};

// Runs one command line. Answers go to `out`; errors go to `err` as one line,
// "autotune: lookup: NOT_FOUND: unknown family 'foo'". `import -` reads
// stdin. Returns the exit status.
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_CLI_H_
