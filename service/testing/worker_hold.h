// A point where the stand-in profile worker (fake_profile_worker.cc) holds
// a phase open for a test, through FAKE_WORKER_HOLD: the worker writes
// `held` in the hold's folder and answers nothing until the test says go.
// A test that must act while a job is in a phase (submit a second job, see
// two GPUs busy at once, kill the daemon) holds the job there instead of
// hoping a poll comes before the phase ends.
//
//   WorkerHold hold(dir + "/hold", "screen", 2);
//   setenv("FAKE_WORKER_HOLD", hold.spec().c_str(), 1);  // before the workers start
//   ...start the job...
//   ASSERT_TRUE(hold.WaitHeld());
//   ...act while the job cannot go past the second screened variant...
//   hold.Go();
//
// The destructor says go too, so a test that fails early leaves no worker
// holding. Several holds go in one FAKE_WORKER_HOLD, comma-separated.
#ifndef AUTOTUNE_SERVICE_TESTING_WORKER_HOLD_H_
#define AUTOTUNE_SERVICE_TESTING_WORKER_HOLD_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace autotune::testing {

class WorkerHold {
 public:
  // Holds before the `outcome`-th variant outcome (from 1) of `phase`
  // ("screen" or "serial") of a worker process, only on the GPU of
  // `ordinal` when it is not negative. Makes `dir`, which must not exist.
  WorkerHold(std::string dir, absl::string_view phase, int outcome, int ordinal = -1)
      : dir_(std::move(dir)),
        spec_(absl::StrCat(dir_, ":", phase, ":", outcome,
                           ordinal < 0 ? "" : absl::StrCat(":", ordinal))) {
    made_ = mkdir(dir_.c_str(), 0700) == 0;
  }
  ~WorkerHold() { Go(); }
  WorkerHold(const WorkerHold&) = delete;
  WorkerHold& operator=(const WorkerHold&) = delete;

  // The hold as FAKE_WORKER_HOLD names it. Empty when `dir` could not be made.
  std::string spec() const { return made_ ? spec_ : ""; }

  bool held() const { return access((dir_ + "/held").c_str(), F_OK) == 0; }

  // Until a worker holds here, or `timeout`. Whether one does.
  bool WaitHeld(absl::Duration timeout = absl::Minutes(2)) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (!held() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    return held();
  }

  // The context of the task held ("modes n=256 fp32"), empty before.
  std::string HeldContext() const {
    std::string context;
    if (FILE* file = std::fopen((dir_ + "/held").c_str(), "r"); file != nullptr) {
      char line[512];
      if (std::fgets(line, sizeof(line), file) != nullptr) context = line;
      std::fclose(file);
    }
    while (!context.empty() && context.back() == '\n') context.pop_back();
    return context;
  }

  // The file whose making says go, for another process to make.
  std::string go_file() const { return dir_ + "/go"; }

  // Lets the worker go on, and every worker that comes here later pass.
  void Go() {
    if (!made_ || gone_) return;
    if (FILE* file = std::fopen(go_file().c_str(), "w"); file != nullptr) {
      std::fclose(file);
      gone_ = true;
    }
  }

 private:
  std::string dir_;
  std::string spec_;
  bool made_ = false;
  bool gone_ = false;
};

}  // namespace autotune::testing

#endif  // AUTOTUNE_SERVICE_TESTING_WORKER_HOLD_H_
