// Child processes that end with the thread that started them, for the
// programs that run a daemon of their own (`autotune tune --local`) and for
// the tests that run the real binaries.
//
//   std::vector<char*> args = {path, "--flag", nullptr};
//   pid_t pid;
//   if (int error = SpawnTiedToThisThread(args, {{log, STDOUT_FILENO}}, SIGTERM, &pid)) ...
//   ...
//   int status;
//   if (!WaitForExit(pid, absl::Now() + absl::Seconds(30), &status)) ...still running...
//
// The child receives `death_signal` when the thread that started it ends,
// whatever ends it, SIGKILL included (PR_SET_PDEATHSIG): a command killed
// outright leaves no daemon running. Start children from a thread that
// outlives them (the main thread), and wait for them.
#ifndef AUTOTUNE_BASE_SUBPROCESS_H_
#define AUTOTUNE_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace autotune {

// Runs `args` (args[0] a path, no PATH search; the last element nullptr)
// with this process's environment, each (from, to) of `dups` dup2'ed in the
// child before exec. 0 with *pid set, or an errno: fork failed, or the
// child's exec did (the child is then already reaped).
int SpawnTiedToThisThread(const std::vector<char*>& args,
                          const std::vector<std::pair<int, int>>& dups, int death_signal,
                          pid_t* pid);

// Waits, looking every 10 ms, until the child `pid` has ended or `deadline`
// has passed (absl::Now(): look once; absl::InfiniteFuture(): until it
// ends). True when it ended, reaped, with *status what waitpid() said; true
// too when it cannot be waited for (not a child of this process, or reaped
// already), *status then -1 (neither WIFEXITED nor WIFSIGNALED); false when
// it was still running at the deadline.
bool WaitForExit(pid_t pid, absl::Time deadline, int* status);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_SUBPROCESS_H_
