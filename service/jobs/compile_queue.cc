#include "service/jobs/compile_queue.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/time/time.h"

namespace autotune::service {
namespace {

// How often a waiting thread looks at the job's cancel flag, which nothing
// signals.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(100);

}  // namespace

CompileQueue::CompileQueue(int parallelism, int guess_parallelism, CompileFn compile,
                           const std::atomic<bool>* cancel)
    : guess_parallelism_(std::max(1, guess_parallelism)),
      compile_(std::move(compile)),
      cancel_(cancel) {
  for (int i = 0; i < std::max(1, parallelism); ++i) threads_.emplace_back([this] { Loop(); });
}

CompileQueue::~CompileQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  for (std::thread& thread : threads_) thread.join();
}

CompileQueue::Slot* CompileQueue::NextSlot() {
  while (true) {
    if (stop_ || *cancel_) return nullptr;
    if (!needed_.empty()) {
      Slot* slot = &slots_.at(needed_.front());  // std::map: stays where it is
      needed_.pop_front();
      return slot;
    }
    if (!guesses_.empty() && guessing_ < guess_parallelism_) {
      CompileUnit unit = std::move(guesses_.front());
      guesses_.pop_front();
      auto [it, added] = slots_.try_emplace(unit.key);
      if (!added) continue;  // needed since it was guessed
      it->second.guess = true;
      it->second.unit = std::move(unit);
      ++stats_.guessed;
      ++guessing_;
      return &it->second;
    }
    changed_.WaitWithTimeout(&mu_, kCancelPoll);
  }
}

void CompileQueue::Loop() {
  while (true) {
    Slot* slot = nullptr;
    bool guess = false;
    {
      absl::MutexLock lock(&mu_);
      slot = NextSlot();
      if (slot == nullptr) return;
      guess = slot->guess;
    }
    // The unit is written once, before its slot is handed out.
    CompileEnd end = compile_(slot->unit, guess);
    absl::MutexLock lock(&mu_);
    slot->end = std::move(end);
    slot->done = true;
    if (guess) --guessing_;
    changed_.SignalAll();
  }
}

CompileResults CompileQueue::Need(const std::vector<CompileUnit>& units, const EndFn& on_end) {
  std::vector<std::string> waiting;
  {
    absl::MutexLock lock(&mu_);
    for (const CompileUnit& unit : units) {
      auto [it, added] = slots_.try_emplace(unit.key);
      Slot& slot = it->second;
      if (slot.needed) continue;  // listed twice, or returned before
      slot.needed = true;
      ++stats_.needed;
      if (added) {
        slot.unit = unit;
        needed_.push_back(unit.key);
      } else if (slot.guess) {
        ++stats_.used;
      }
      waiting.push_back(unit.key);
    }
    changed_.SignalAll();
  }
  CompileResults results;
  while (!waiting.empty()) {
    std::vector<std::pair<const CompileUnit*, CompileEnd>> ended;
    {
      absl::MutexLock lock(&mu_);
      while (!AnyDone(waiting) && !*cancel_) changed_.WaitWithTimeout(&mu_, kCancelPoll);
      std::vector<std::string> still;
      for (std::string& key : waiting) {
        Slot& slot = slots_.at(key);
        if (!slot.done) {
          still.push_back(std::move(key));
          continue;
        }
        slot.taken = true;
        ended.emplace_back(&slot.unit, std::move(slot.end));
      }
      waiting = std::move(still);
      if (ended.empty() && *cancel_) break;
    }
    for (auto& [unit, end] : ended) {
      on_end(*unit, end);
      results[unit->key] = std::move(end);
    }
  }
  return results;
}

bool CompileQueue::AnyDone(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (slots_.at(key).done) return true;
  }
  return false;
}

void CompileQueue::Guess(std::vector<CompileUnit> units) {
  absl::MutexLock lock(&mu_);
  guesses_.clear();
  std::set<std::string> listed;
  for (CompileUnit& unit : units) {
    if (slots_.contains(unit.key) || !listed.insert(unit.key).second) continue;
    guesses_.push_back(std::move(unit));
  }
  changed_.SignalAll();
}

CompileQueue::Stats CompileQueue::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace autotune::service
