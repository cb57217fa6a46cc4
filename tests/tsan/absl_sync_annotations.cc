// ThreadSanitizer builds only (-DAUTOTUNE_SANITIZE=thread): tells TSan
// about the ordering absl::Mutex, absl::CondVar and absl::Notification give.
// Debian's Abseil is not built with TSan, so its lock and unlock are
// invisible to it and every member they guard would show as a race. Each
// call our code makes to one of the functions below is redirected here by
// the linker (--wrap, the list in CMakeLists.txt), which runs the real
// function and adds a release before it or an acquire after it, on the
// object. Conditions that Abseil evaluates inside Await and LockWhen (with
// the lock held) are covered by .ci/sanitizer-suppressions/tsan.txt.
// Calls made inside other uninstrumented libraries (gRPC) are not seen.
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

extern "C" {
// Mutex: acquired after these return.
#define AFTER(sym)                \
  void __real_##sym(void* self);  \
  void __wrap_##sym(void* self) { \
    __real_##sym(self);           \
    __tsan_acquire(self);         \
  }
AFTER(_ZN4absl7debian35Mutex4LockEv)
AFTER(_ZN4absl7debian35Mutex10ReaderLockEv)
#define BEFORE(sym)               \
  void __real_##sym(void* self);  \
  void __wrap_##sym(void* self) { \
    __tsan_release(self);         \
    __real_##sym(self);           \
  }
BEFORE(_ZN4absl7debian35Mutex6UnlockEv)
BEFORE(_ZN4absl7debian35Mutex12ReaderUnlockEv)
BEFORE(_ZN4absl7debian312Notification6NotifyEv)
#define TRY(sym)                            \
  bool __real_##sym(void* self);            \
  bool __wrap_##sym(void* self) {           \
    const bool locked = __real_##sym(self); \
    if (locked) __tsan_acquire(self);       \
    return locked;                          \
  }
TRY(_ZN4absl7debian35Mutex7TryLockEv)
TRY(_ZN4absl7debian35Mutex13ReaderTryLockEv)
// LockWhen and Await with a condition: Await gives the lock up while it waits.
#define WHEN(sym)                                   \
  void __real_##sym(void* self, const void* cond);  \
  void __wrap_##sym(void* self, const void* cond) { \
    __real_##sym(self, cond);                       \
    __tsan_acquire(self);                           \
  }
WHEN(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE)
WHEN(_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE)
#define AWAIT(sym)                                  \
  void __real_##sym(void* self, const void* cond);  \
  void __wrap_##sym(void* self, const void* cond) { \
    __tsan_release(self);                           \
    __real_##sym(self, cond);                       \
    __tsan_acquire(self);                           \
  }
AWAIT(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE)
// The same with a timeout or deadline: the lock is held on return either way.
#define AWAIT_FOR(sym, T)                                    \
  bool __real_##sym(void* self, const void* cond, T limit);  \
  bool __wrap_##sym(void* self, const void* cond, T limit) { \
    __tsan_release(self);                                    \
    const bool met = __real_##sym(self, cond, limit);        \
    __tsan_acquire(self);                                    \
    return met;                                              \
  }
AWAIT_FOR(_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE, absl::Duration)
AWAIT_FOR(_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE, absl::Time)
#define WHEN_FOR(sym, T)                                     \
  bool __real_##sym(void* self, const void* cond, T limit);  \
  bool __wrap_##sym(void* self, const void* cond, T limit) { \
    const bool met = __real_##sym(self, cond, limit);        \
    __tsan_acquire(self);                                    \
    return met;                                              \
  }
WHEN_FOR(_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
         absl::Duration)
WHEN_FOR(_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE, absl::Time)
// CondVar::Wait(mu) gives mu up while it waits.
void __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* self, void* mu);
void __wrap__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* self, void* mu) {
  __tsan_release(mu);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(self, mu);
  __tsan_acquire(mu);
}
#define WAIT_FOR(sym, T)                                  \
  bool __real_##sym(void* self, void* mu, T limit);       \
  bool __wrap_##sym(void* self, void* mu, T limit) {      \
    __tsan_release(mu);                                   \
    const bool timed_out = __real_##sym(self, mu, limit); \
    __tsan_acquire(mu);                                   \
    return timed_out;                                     \
  }
WAIT_FOR(_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE, absl::Duration)
WAIT_FOR(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE, absl::Time)
#define NOTIFIED_FOR(sym, T)                               \
  bool __real_##sym(const void* self, T limit);            \
  bool __wrap_##sym(const void* self, T limit) {           \
    const bool notified = __real_##sym(self, limit);       \
    if (notified) __tsan_acquire(const_cast<void*>(self)); \
    return notified;                                       \
  }
NOTIFIED_FOR(_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
             absl::Duration)
NOTIFIED_FOR(_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE,
             absl::Time)
// Notification: what happened before Notify() is seen after a wait.
void __real__ZNK4absl7debian312Notification19WaitForNotificationEv(const void* self);
void __wrap__ZNK4absl7debian312Notification19WaitForNotificationEv(const void* self) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(self);
  __tsan_acquire(const_cast<void*>(self));
}
}
