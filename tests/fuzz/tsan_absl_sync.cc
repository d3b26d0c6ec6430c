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
//
// The same way, the end of this file wraps gRPC's completion-queue entry points
// (grpc_call_start_batch, grpc_server_request_*call, grpc_completion_queue_next
// and _pluck) to tell TSan about the happens-before edge gRPC guarantees between
// starting an operation with a tag and receiving that tag's completion, and
// ServerCallbackCall::CallOnCancel / ScheduleOnDone to restore the acq_rel
// decrement of a callback call's reaction counter that libgrpc++ does out of
// TSan's sight (see the sections below).
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <grpc/grpc.h>  // declarations only: nothing is linked from gRPC

extern "C" {
void __tsan_mutex_destroy(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_pre_lock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion) __attribute__((weak));
int __tsan_mutex_pre_unlock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_mutex_post_unlock(void* addr, unsigned flags) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
void __tsan_acquire(void* addr) __attribute__((weak));
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

// --- gRPC completion queues: the happens-before edge of a tag.
//
// gRPC's contract: everything a thread did before handing a tag to
// grpc_call_start_batch (or to a server's request_call) happens before the thread
// that receives that tag's completion from grpc_completion_queue_next/pluck. gRPC
// keeps it with locks and atomics inside libgrpc, which TSan does not see, so the
// state our reactors hand over through StartRead/StartWrite/Finish (written on an
// executor thread, read again in OnReadDone/OnWriteDone on a gRPC thread) and the
// CallOpSet / CallbackWithSuccessTag state of gRPC's own header code (compiled into
// our binaries) looked unsynchronized. Release on the tag before the real call and
// acquire on it when its completion comes back. Only that edge is added: an access
// made after StartRead/StartWrite, or on a thread that did not receive the tag, is
// still reported.
//
// Debian's gRPC 1.51 runs callback-API completions (servers' reactors, the callback
// client) through libgrpc++'s "callback alternative" queue: threads that call
// grpc_completion_queue_next and then run the tag's functor, so next covers them.
// The sync APIs use next (servers) and pluck (clients). A gRPC whose iomgr runs
// callback queues natively would call the functors from inside libgrpc instead;
// those completions would not be annotated here.
namespace {
void ReleaseTag(void* tag) {
  if (__tsan_release != nullptr && tag != nullptr) __tsan_release(tag);
}
grpc_event AcquireTag(grpc_event event) {
  if (__tsan_acquire != nullptr && event.type == GRPC_OP_COMPLETE && event.tag != nullptr) {
    __tsan_acquire(event.tag);
  }
  return event;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) grpc_call_error grpc_call_start_batch(
    grpc_call* call, const grpc_op* ops, size_t nops, void* tag, void* reserved) {
  REAL(grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*),
       "grpc_call_start_batch");
  ReleaseTag(tag);
  return real(call, ops, nops, tag, reserved);
}

extern "C" __attribute__((visibility("default"))) grpc_call_error grpc_server_request_call(
    grpc_server* server, grpc_call** call, grpc_call_details* details,
    grpc_metadata_array* request_metadata, grpc_completion_queue* cq_bound_to_call,
    grpc_completion_queue* cq_for_notification, void* tag_new) {
  REAL(grpc_call_error (*)(grpc_server*, grpc_call**, grpc_call_details*, grpc_metadata_array*,
                           grpc_completion_queue*, grpc_completion_queue*, void*),
       "grpc_server_request_call");
  ReleaseTag(tag_new);
  return real(server, call, details, request_metadata, cq_bound_to_call, cq_for_notification,
              tag_new);
}

extern "C" __attribute__((visibility("default"))) grpc_call_error
grpc_server_request_registered_call(grpc_server* server, void* registered_method,
                                    grpc_call** call, gpr_timespec* deadline,
                                    grpc_metadata_array* request_metadata,
                                    grpc_byte_buffer** optional_payload,
                                    grpc_completion_queue* cq_bound_to_call,
                                    grpc_completion_queue* cq_for_notification, void* tag_new) {
  REAL(grpc_call_error (*)(grpc_server*, void*, grpc_call**, gpr_timespec*, grpc_metadata_array*,
                           grpc_byte_buffer**, grpc_completion_queue*, grpc_completion_queue*,
                           void*),
       "grpc_server_request_registered_call");
  ReleaseTag(tag_new);
  return real(server, registered_method, call, deadline, request_metadata, optional_payload,
              cq_bound_to_call, cq_for_notification, tag_new);
}

extern "C" __attribute__((visibility("default"))) grpc_event grpc_completion_queue_next(
    grpc_completion_queue* cq, gpr_timespec deadline, void* reserved) {
  REAL(grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*),
       "grpc_completion_queue_next");
  return AcquireTag(real(cq, deadline, reserved));
}

extern "C" __attribute__((visibility("default"))) grpc_event grpc_completion_queue_pluck(
    grpc_completion_queue* cq, void* tag, gpr_timespec deadline, void* reserved) {
  REAL(grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*),
       "grpc_completion_queue_pluck");
  return AcquireTag(real(cq, tag, deadline, reserved));
}

// --- gRPC callback servers: OnDone after the last reaction.
//
// A callback call counts its outstanding reactions in
// ServerCallbackCall::callbacks_outstanding_ (an acq_rel fetch_sub after each
// reaction); whoever brings it to zero calls ScheduleOnDone, which runs OnDone (our
// reactors delete themselves there) inline or on gRPC's executor. Most decrements
// are gRPC header code compiled into our binaries, which TSan sees. One is not:
// ServerCallbackCall::CallOnCancel (libgrpc++) runs the reactor's OnCancel in an
// executor closure that then decrements the counter inside libgrpc++,
// uninstrumented. Both halves of that fetch_sub were lost, and OnDone's
// `delete this` (and the destruction of the reactor's absl::Mutex) was reported
// against the reactor's own accesses in OnCancel, or in an OnWriteDone whose
// release the OnCancel thread's decrement should have passed on (faults_test,
// a client disconnecting mid-download). Restored here:
// - acquire: ScheduleOnDone is only called by the thread whose decrement reached
//   zero, so it acquires on the counter first;
// - release: CallOnCancel gets a stand-in reactor whose OnCancel runs the real one
//   and then releases on the counter; the closure decrements right after it returns.
// The ServerCallbackCall layout (vtable pointer, then std::atomic_int
// on_cancel_conditions_remaining_ and callbacks_outstanding_) is gRPC 1.51's
// grpcpp/support/server_callback.h; libgrpc++'s closure does `lock subl $1, 0xc(%reg)`.
#include <grpcpp/support/server_callback.h>

static_assert(sizeof(grpc::internal::ServerCallbackCall) == 16,
              "ServerCallbackCall layout changed: update kCallbacksOutstandingOffset");

namespace {
constexpr size_t kCallbacksOutstandingOffset = 12;

void* CallbacksOutstanding(void* call) {
  return static_cast<char*>(call) + kCallbacksOutstandingOffset;
}

// Stands in for the reactor in CallOnCancel, which only asks it InternalInlineable()
// and calls OnCancel() once (inline or from the closure); OnDone goes to the call's
// own reactor, never here.
class CancelReaction final : public grpc::internal::ServerReactor {
 public:
  CancelReaction(grpc::internal::ServerReactor* reactor, void* call)
      : reactor_(reactor), call_(call) {}
  void OnDone() override {}
  void OnCancel() override {
    grpc::internal::ServerReactor* reactor = reactor_;
    void* call = call_;
    delete this;
    reactor->OnCancel();
    if (__tsan_release != nullptr) __tsan_release(CallbacksOutstanding(call));
  }
  bool InternalInlineable() override { return reactor_->InternalInlineable(); }

 private:
  grpc::internal::ServerReactor* const reactor_;
  void* const call_;
};
}  // namespace

SHIM(void, ShimScheduleOnDone, "_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb",
     void* call, bool inline_ondone);
void ShimScheduleOnDone(void* call, bool inline_ondone) {
  REAL(void (*)(void*, bool), "_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb");
  if (__tsan_acquire != nullptr) __tsan_acquire(CallbacksOutstanding(call));
  real(call, inline_ondone);
}

SHIM(void, ShimCallOnCancel,
     "_ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_13ServerReactorE", void* call,
     grpc::internal::ServerReactor* reactor);
void ShimCallOnCancel(void* call, grpc::internal::ServerReactor* reactor) {
  REAL(void (*)(void*, grpc::internal::ServerReactor*),
       "_ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_13ServerReactorE");
  real(call, __tsan_release != nullptr ? new CancelReaction(reactor, call) : reactor);
}
