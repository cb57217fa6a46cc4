#include "base/subprocess.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"

extern char** environ;

namespace autotune {

int SpawnTiedToThisThread(const std::vector<char*>& args,
                          const std::vector<std::pair<int, int>>& dups, int death_signal,
                          pid_t* pid) {
  int report[2];  // the child writes exec's errno here; a good exec closes it
  if (pipe2(report, O_CLOEXEC) != 0) return errno;
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    const int error = errno;
    close(report[0]);
    close(report[1]);
    return error;
  }
  if (child == 0) {
    // Async-signal-safe calls only, until exec.
    prctl(PR_SET_PDEATHSIG, death_signal);
    if (getppid() != parent) _exit(127);  // the parent is gone already
    for (const auto& [from, to] : dups) dup2(from, to);
    execve(args[0], args.data(), environ);
    const int error = errno;
    (void)!write(report[1], &error, sizeof(error));
    _exit(127);
  }
  close(report[1]);
  int error = 0;
  ssize_t got;
  while ((got = read(report[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (got == static_cast<ssize_t>(sizeof(error))) {
    waitpid(child, nullptr, 0);
    return error;
  }
  *pid = child;
  return 0;
}

bool WaitForExit(pid_t pid, absl::Time deadline, int* status) {
  while (true) {
    const pid_t done = waitpid(pid, status, WNOHANG);
    if (done == pid) return true;
    if (done < 0 && errno != EINTR) {
      *status = -1;
      return true;
    }
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace autotune
