#include "service/jobs/compile_queue.h"

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::service {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

CompileUnit KeyUnit(const std::string& key) {
  CompileUnit unit;
  unit.key = key;
  return unit;
}

std::vector<CompileUnit> Units(const std::vector<std::string>& keys) {
  std::vector<CompileUnit> units;
  for (const std::string& key : keys) units.push_back(KeyUnit(key));
  return units;
}

// A compile function for the queue: records what it compiled, in order, and
// holds the keys given to Hold until they are let go.
class Compiler {
 public:
  CompileQueue::CompileFn Fn() {
    return [this](const CompileUnit& unit, bool guess) {
      absl::Notification* gate = nullptr;
      {
        absl::MutexLock lock(&mu_);
        started_.push_back(unit.key);
        guesses_[unit.key] = guess;
        auto it = gates_.find(unit.key);
        if (it != gates_.end()) gate = it->second.get();
      }
      if (gate != nullptr) gate->WaitForNotification();
      CompileEnd end;
      end.status = v1::OK;
      end.binary_sha256 = "sha-" + unit.key;
      absl::MutexLock lock(&mu_);
      ended_.push_back(unit.key);
      return end;
    };
  }
  void Hold(const std::string& key) {
    absl::MutexLock lock(&mu_);
    gates_[key] = std::make_unique<absl::Notification>();
  }
  void Release(const std::string& key) {
    absl::MutexLock lock(&mu_);
    gates_.at(key)->Notify();
  }
  // Waits (up to 10 s) until `n` compiles have started / ended.
  bool WaitStarted(size_t n) { return Wait(&started_, n); }
  bool WaitEnded(size_t n) { return Wait(&ended_, n); }
  std::vector<std::string> started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  bool guess(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return guesses_.at(key);
  }

 private:
  bool Wait(const std::vector<std::string>* list, size_t n) {
    absl::MutexLock lock(&mu_);
    const auto enough = [&] { return list->size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

  absl::Mutex mu_;
  std::vector<std::string> started_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ended_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> guesses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<absl::Notification>> gates_ ABSL_GUARDED_BY(mu_);
};

// What Need reported, in the order it reported it.
struct Reported {
  std::vector<std::string> keys;
  CompileQueue::EndFn Fn() {
    return [this](const CompileUnit& unit, const CompileEnd& end) {
      EXPECT_EQ(end.binary_sha256, "sha-" + unit.key);
      keys.push_back(unit.key);
    };
  }
};

TEST(CompileQueueTest, WhatARoundNeedsGoesBeforeEveryGuess) {
  Compiler compiler;
  compiler.Hold("g1");
  std::atomic<bool> cancel{false};
  CompileQueue queue(1, 1, compiler.Fn(), &cancel);
  queue.Guess(Units({"g1", "g2", "g3"}));
  ASSERT_TRUE(compiler.WaitStarted(1));  // g1, held
  Reported reported;
  CompileResults ends;
  std::thread round([&] { ends = queue.Need(Units({"n1", "n2"}), reported.Fn()); });
  while (queue.stats().needed < 2) absl::SleepFor(absl::Milliseconds(1));
  compiler.Release("g1");
  round.join();
  EXPECT_THAT(reported.keys, ElementsAre("n1", "n2"));
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends["n1"].status, v1::OK);
  ASSERT_TRUE(compiler.WaitEnded(5));  // the guesses go on once nothing is needed
  EXPECT_THAT(compiler.started(), ElementsAre("g1", "n1", "n2", "g2", "g3"));
  EXPECT_TRUE(compiler.guess("g2"));
  EXPECT_FALSE(compiler.guess("n1"));
  EXPECT_EQ(queue.stats().guessed, 3);
  EXPECT_EQ(queue.stats().used, 0);
}

TEST(CompileQueueTest, AGuessIsCompiledOnceAndReportedOnlyWhenARoundNeedsIt) {
  Compiler compiler;
  std::atomic<bool> cancel{false};
  CompileQueue queue(2, 2, compiler.Fn(), &cancel);
  queue.Guess(Units({"a", "b"}));
  ASSERT_TRUE(compiler.WaitEnded(2));
  Reported reported;
  CompileResults ends = queue.Need(Units({"a", "c"}), reported.Fn());
  EXPECT_THAT(reported.keys, UnorderedElementsAre("a", "c"));  // b: never needed, never reported
  EXPECT_EQ(ends.count("b"), 0u);
  EXPECT_EQ(ends["a"].binary_sha256, "sha-a");
  EXPECT_THAT(compiler.started(), UnorderedElementsAre("a", "b", "c"));  // a once
  EXPECT_EQ(queue.stats().guessed, 2);
  EXPECT_EQ(queue.stats().used, 1);
  // Needed again, or guessed again: neither compiled nor returned twice.
  queue.Guess(Units({"a", "c"}));
  EXPECT_THAT(queue.Need(Units({"a"}), reported.Fn()), IsEmpty());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(compiler.started(), UnorderedElementsAre("a", "b", "c"));
}

TEST(CompileQueueTest, AUnitNeededWhileItsGuessCompilesIsWaitedForNotCompiledAgain) {
  Compiler compiler;
  compiler.Hold("a");
  std::atomic<bool> cancel{false};
  CompileQueue queue(2, 2, compiler.Fn(), &cancel);
  queue.Guess(Units({"a"}));
  ASSERT_TRUE(compiler.WaitStarted(1));
  Reported reported;
  std::atomic<bool> returned{false};
  std::thread round([&] {
    queue.Need(Units({"a"}), reported.Fn());
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(returned);
  compiler.Release("a");
  round.join();
  EXPECT_THAT(reported.keys, ElementsAre("a"));
  EXPECT_THAT(compiler.started(), ElementsAre("a"));
  EXPECT_EQ(queue.stats().used, 1);
}

TEST(CompileQueueTest, NewGuessesReplaceTheOnesNotStarted) {
  Compiler compiler;
  compiler.Hold("g1");
  std::atomic<bool> cancel{false};
  CompileQueue queue(1, 1, compiler.Fn(), &cancel);
  queue.Guess(Units({"g1", "g2", "g3"}));
  ASSERT_TRUE(compiler.WaitStarted(1));
  queue.Guess(Units({"g4", "g1"}));  // g1 is compiling: not started twice
  compiler.Release("g1");
  ASSERT_TRUE(compiler.WaitEnded(2));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(compiler.started(), ElementsAre("g1", "g4"));
}

TEST(CompileQueueTest, GuessesLeaveThreadsFreeForWhatIsNeeded) {
  Compiler compiler;
  compiler.Hold("g1");
  std::atomic<bool> cancel{false};
  CompileQueue queue(3, 1, compiler.Fn(), &cancel);  // one guess at a time
  queue.Guess(Units({"g1", "g2"}));
  ASSERT_TRUE(compiler.WaitStarted(1));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(compiler.started(), ElementsAre("g1"));  // g2 waits though threads are free
  Reported reported;
  queue.Need(Units({"n1", "n2"}), reported.Fn());  // the two free threads take them
  EXPECT_THAT(reported.keys, UnorderedElementsAre("n1", "n2"));
  compiler.Release("g1");
  ASSERT_TRUE(compiler.WaitEnded(4));
  const std::vector<std::string> started = compiler.started();
  ASSERT_EQ(started.size(), 4u);
  EXPECT_EQ(started.front(), "g1");
  EXPECT_THAT(std::vector<std::string>(started.begin() + 1, started.end() - 1),
              UnorderedElementsAre("n1", "n2"));
  EXPECT_EQ(started.back(), "g2");
}

TEST(CompileQueueTest, ACancelledJobStartsNothingAndNeedReturns) {
  Compiler compiler;
  compiler.Hold("a");
  std::atomic<bool> cancel{false};
  CompileQueue queue(1, 1, compiler.Fn(), &cancel);
  Reported reported;
  CompileResults ends;
  std::thread round([&] { ends = queue.Need(Units({"a", "b"}), reported.Fn()); });
  ASSERT_TRUE(compiler.WaitStarted(1));
  cancel = true;
  compiler.Release("a");
  round.join();
  // a ended (reported, or left out if Need saw the cancel first); b never started.
  EXPECT_EQ(ends.count("b"), 0u);
  EXPECT_THAT(compiler.started(), ElementsAre("a"));
}

}  // namespace
}  // namespace autotune::service
