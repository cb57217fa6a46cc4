// The compiles of a job that searches in rounds: what a round needs, and,
// while nothing is needed (the GPU is measuring), the compiles its searches
// expect to need next (Search::Ahead), so that the next round finds them
// done. One queue per job, its threads live as long as it does.
//
//   CompileQueue queue(parallelism, [&](const CompileUnit& unit, bool guess) {
//     return CompileOne(unit, store, pool, options);  // guess: keep no cubin
//   }, &cancel);
//   CompileResults ends = queue.Need(round_units, report);  // blocks
//   queue.Guess(next_units);  // returns at once; compiled in the background
//   ... screen the round ...
//
// Needed units go before every guess. A unit is compiled at most once: one
// needed while it is compiled as a guess is waited for, one compiled as a
// guess is handed over when needed. `on_end` is called once per unit Need
// returns, from Need's thread, as each ends (a guess compiled earlier: when
// it is needed), so a guess that is never needed is never reported, only
// counted (stats()).
//
// Thread-safety: Need and Guess from one thread at a time; stats() from any.
#ifndef AUTOTUNE_SERVICE_JOBS_COMPILE_QUEUE_H_
#define AUTOTUNE_SERVICE_JOBS_COMPILE_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/job_plan.h"

namespace autotune::service {

class CompileQueue {
 public:
  // Compiles one unit; `guess` is true for a unit no round has needed yet.
  using CompileFn = std::function<CompileEnd(const CompileUnit& unit, bool guess)>;
  using EndFn = std::function<void(const CompileUnit&, const CompileEnd&)>;

  // `parallelism` threads (at least 1), at most `guess_parallelism` of
  // them (at least 1) compiling guesses at once, so that guesses leave
  // cores to the GPU workers that measure meanwhile; none starts a compile
  // once `*cancel` is true.
  CompileQueue(int parallelism, int guess_parallelism, CompileFn compile,
               const std::atomic<bool>* cancel);
  // Waits for the compiles in flight; starts no other.
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  // Compiles `units` (each key once) ahead of every guess, or takes what a
  // guess made of them, and returns when every one has ended; with `cancel`
  // set, at once, leaving out the units not ended. A unit an earlier Need
  // returned is not returned again.
  CompileResults Need(const std::vector<CompileUnit>& units, const EndFn& on_end);

  // Replaces the guesses not started yet with `units`, likeliest first.
  // Units compiled, compiling or needed already are skipped.
  void Guess(std::vector<CompileUnit> units);

  struct Stats {
    int64_t needed = 0;   // units rounds asked for
    int64_t guessed = 0;  // compiles started as guesses
    int64_t used = 0;     // of them, needed by a round afterwards
  };
  Stats stats() const;

 private:
  struct Slot {
    bool done = false;
    bool guess = false;   // compiled as a guess
    bool needed = false;  // a round asked for it
    bool taken = false;   // Need returned it
    CompileUnit unit;
    CompileEnd end;
  };

  void Loop();
  // The next slot to compile, needed ones first; waits for one; nullptr
  // once the queue stops or the job is cancelled.
  Slot* NextSlot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnyDone(const std::vector<std::string>& keys) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int guess_parallelism_;
  const CompileFn compile_;
  const std::atomic<bool>* cancel_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::deque<std::string> needed_ ABSL_GUARDED_BY(mu_);  // keys not started
  std::deque<CompileUnit> guesses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Slot> slots_ ABSL_GUARDED_BY(mu_);  // started or needed
  Stats stats_ ABSL_GUARDED_BY(mu_);
  int guessing_ ABSL_GUARDED_BY(mu_) = 0;  // guesses compiling now
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_COMPILE_QUEUE_H_
