// ThreadSanitizer annotations for Debian's (uninstrumented) Abseil Mutex, CondVar
// and Notification; LD_PRELOADed by scripts/sanitizers.sh tsan.
//
// Debian builds libabsl_synchronization without -fsanitize=thread, so its mutex
// is built on atomics and futexes that TSan does not see: every access guarded by
// an absl::Mutex (ours, and gRPC's, whose grpc_core::Mutex and gpr_mu wrap it)
// would be reported as a race. Abseil compiled with TSan annotates these calls
// itself (ABSL_TSAN_MUTEX_* in mutex.cc); this library does the same from the
// outside: it interposes the exported entry points, tells TSan about the lock or
// unlock, and calls the real function (dlsym RTLD_NEXT). Calls from inside the
// Abseil library go through the PLT too, so Notification's own locking is seen.
// While a real call runs, TSan is inside a mutex operation and ignores memory
// accesses, as with Abseil's own annotations (conditions evaluated by the thread
// that unlocks, the deadlock detector's graph).
//
// The *WithTimeout variants are not wrapped: they tail-call their *WithDeadline
// twin through the PLT, which is.
//
// The names are Abseil 20220623 as Debian 12 builds it (inline namespace
// debian3). A process that does not use Abseil never calls these; one without
// the TSan runtime gets no annotations (the __tsan_* symbols are weak).
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" {
void __tsan_mutex_destroy(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_pre_lock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion) __attribute__((weak));
int __tsan_mutex_pre_unlock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_unlock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

// sanitizer/tsan_interface.h
constexpr unsigned kReadLock = 1u << 3;
constexpr unsigned kTryLock = 1u << 4;
constexpr unsigned kTryLockFailed = 1u << 5;
constexpr unsigned kNotStatic = 1u << 8;

// absl::Mutex is one std::atomic<intptr_t> (mu_); kMuWriter marks a writer holding it.
constexpr intptr_t kMuWriter = 0x0008;
// absl::Time: an absl::Duration {int64_t, uint32_t}, trivially copyable (passed in
// two registers); Condition is passed by reference.
struct Time {
  int64_t hi;
  uint32_t lo;
};
struct Condition;
struct Mutex {
  std::atomic<intptr_t> mu;
};
struct CondVar;
struct Notification {
  Mutex mutex;
  std::atomic<bool> notified_yet;
};

bool Annotating() { return __tsan_mutex_pre_lock != nullptr; }

void PreLock(Mutex* m, unsigned flags) {
  if (Annotating()) __tsan_mutex_pre_lock(m, flags);
}
void PostLock(Mutex* m, unsigned flags) {
  if (Annotating()) __tsan_mutex_post_lock(m, flags, 0);
}
void PreUnlock(Mutex* m, unsigned flags) {
  if (Annotating()) __tsan_mutex_pre_unlock(m, flags);
}
void PostUnlock(Mutex* m, unsigned flags) {
  if (Annotating()) __tsan_mutex_post_unlock(m, flags);
}
// How a thread holds `m` (it does, when it waits on it): as a writer or a reader.
unsigned HeldFlags(Mutex* m) {
  return (m->mu.load(std::memory_order_relaxed) & kMuWriter) != 0 ? 0 : kReadLock;
}

template <typename Fn>
Fn Real(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found after this library\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

#define REAL(type, symbol)                             \
  static const auto real = Real<type>(symbol);         \
  (void)0

}  // namespace

// Each wrapper carries the mangled name of the member function it replaces.
#define SHIM(ret, cname, symbol, ...) \
  extern "C" ret cname(__VA_ARGS__) __asm__(symbol) __attribute__((visibility("default")))

// --- Mutex: lock and unlock.
SHIM(void, ShimLock, "_ZN4absl7debian35Mutex4LockEv", Mutex* m);
void ShimLock(Mutex* m) {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  PreLock(m, 0);
  real(m);
  PostLock(m, 0);
}

SHIM(void, ShimReaderLock, "_ZN4absl7debian35Mutex10ReaderLockEv", Mutex* m);
void ShimReaderLock(Mutex* m) {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  PreLock(m, kReadLock);
  real(m);
  PostLock(m, kReadLock);
}

SHIM(bool, ShimTryLock, "_ZN4absl7debian35Mutex7TryLockEv", Mutex* m);
bool ShimTryLock(Mutex* m) {
  REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  PreLock(m, kTryLock);
  const bool locked = real(m);
  PostLock(m, locked ? kTryLock : kTryLock | kTryLockFailed);
  return locked;
}

SHIM(bool, ShimReaderTryLock, "_ZN4absl7debian35Mutex13ReaderTryLockEv", Mutex* m);
bool ShimReaderTryLock(Mutex* m) {
  REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  PreLock(m, kReadLock | kTryLock);
  const bool locked = real(m);
  PostLock(m, locked ? kReadLock | kTryLock : kReadLock | kTryLock | kTryLockFailed);
  return locked;
}

SHIM(void, ShimUnlock, "_ZN4absl7debian35Mutex6UnlockEv", Mutex* m);
void ShimUnlock(Mutex* m) {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  PreUnlock(m, 0);
  real(m);
  PostUnlock(m, 0);
}

SHIM(void, ShimReaderUnlock, "_ZN4absl7debian35Mutex12ReaderUnlockEv", Mutex* m);
void ShimReaderUnlock(Mutex* m) {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  PreUnlock(m, kReadLock);
  real(m);
  PostUnlock(m, kReadLock);
}

// --- Mutex: lock when a condition holds (returns with the lock held either way).
#define LOCK_WHEN(cname, symbol, flags)                                    \
  SHIM(void, cname, symbol, Mutex* m, const Condition& c);                 \
  void cname(Mutex* m, const Condition& c) {                               \
    REAL(void (*)(Mutex*, const Condition&), symbol);                      \
    PreLock(m, flags);                                                     \
    real(m, c);                                                            \
    PostLock(m, flags);                                                    \
  }
#define LOCK_WHEN_UNTIL(cname, symbol, type, flags)                        \
  SHIM(bool, cname, symbol, Mutex* m, const Condition& c, type t);         \
  bool cname(Mutex* m, const Condition& c, type t) {                       \
    REAL(bool (*)(Mutex*, const Condition&, type), symbol);                \
    PreLock(m, flags);                                                     \
    const bool r = real(m, c, t);                                          \
    PostLock(m, flags);                                                    \
    return r;                                                              \
  }
LOCK_WHEN(ShimLockWhen, "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE", 0)
LOCK_WHEN(ShimReaderLockWhen, "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE",
          kReadLock)
LOCK_WHEN_UNTIL(ShimLockWhenWithDeadline,
                "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE", Time,
                0)
LOCK_WHEN_UNTIL(ShimReaderLockWhenWithDeadline,
                "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE",
                Time, kReadLock)

// --- Mutex: await a condition while holding the lock (released while waiting).
SHIM(void, ShimAwait, "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE", Mutex* m,
     const Condition& c);
void ShimAwait(Mutex* m, const Condition& c) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  const unsigned flags = HeldFlags(m);
  PreUnlock(m, flags);
  PostUnlock(m, flags);
  PreLock(m, flags);
  real(m, c);
  PostLock(m, flags);
}
#define AWAIT_UNTIL(cname, symbol, type)                                   \
  SHIM(bool, cname, symbol, Mutex* m, const Condition& c, type t);         \
  bool cname(Mutex* m, const Condition& c, type t) {                       \
    REAL(bool (*)(Mutex*, const Condition&, type), symbol);                \
    const unsigned flags = HeldFlags(m);                                   \
    PreUnlock(m, flags);                                                   \
    PostUnlock(m, flags);                                                  \
    PreLock(m, flags);                                                     \
    const bool r = real(m, c, t);                                          \
    PostLock(m, flags);                                                    \
    return r;                                                              \
  }
AWAIT_UNTIL(ShimAwaitWithDeadline,
            "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE", Time)

// --- CondVar: wait releases the mutex and takes it again.
SHIM(void, ShimCondVarWait, "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE", CondVar* cv, Mutex* m);
void ShimCondVarWait(CondVar* cv, Mutex* m) {
  REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  const unsigned flags = HeldFlags(m);
  PreUnlock(m, flags);
  PostUnlock(m, flags);
  PreLock(m, flags);
  real(cv, m);
  PostLock(m, flags);
}
#define CONDVAR_WAIT_UNTIL(cname, symbol, type)                            \
  SHIM(bool, cname, symbol, CondVar* cv, Mutex* m, type t);                \
  bool cname(CondVar* cv, Mutex* m, type t) {                              \
    REAL(bool (*)(CondVar*, Mutex*, type), symbol);                        \
    const unsigned flags = HeldFlags(m);                                   \
    PreUnlock(m, flags);                                                   \
    PostUnlock(m, flags);                                                  \
    PreLock(m, flags);                                                     \
    const bool r = real(cv, m, t);                                         \
    PostLock(m, flags);                                                    \
    return r;                                                              \
  }
CONDVAR_WAIT_UNTIL(ShimCondVarWaitWithDeadline,
                   "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE", Time)

// --- Mutex destruction: TSan forgets the mutex (its memory may hold another one next).
SHIM(void, ShimMutexDtor, "_ZN4absl7debian35MutexD1Ev", Mutex* m);
void ShimMutexDtor(Mutex* m) {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35MutexD1Ev");
  if (__tsan_mutex_destroy != nullptr) __tsan_mutex_destroy(m, kNotStatic);
  real(m);
}
SHIM(void, ShimMutexDtor2, "_ZN4absl7debian35MutexD2Ev", Mutex* m);
void ShimMutexDtor2(Mutex* m) {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35MutexD2Ev");
  if (__tsan_mutex_destroy != nullptr) __tsan_mutex_destroy(m, kNotStatic);
  real(m);
}

// --- Notification: HasBeenNotified() is an inline acquire load of notified_yet_,
// which pairs with the release store inside Notify(); make that store visible.
SHIM(void, ShimNotify, "_ZN4absl7debian312Notification6NotifyEv", Notification* n);
void ShimNotify(Notification* n) {
  REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  if (__tsan_release != nullptr) __tsan_release(&n->notified_yet);
  real(n);
}
