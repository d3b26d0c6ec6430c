// The server's own threads for compute and copies: gRPC reactions only hand work
// over, they never block (but for a tiny request that finds the executor idle,
// which runs in place: BeginInPlace). Admission is bounded; continuations of
// admitted work (result chunks, upload chunks) are always accepted so a stream
// never stalls.
// Some threads form a reserved lane that takes only small requests and
// continuations, so that long operations holding every other thread cannot
// make a tiny request (or the result chunks of any request) wait behind them.
// Each lane has its own queue bound, so that large or hostile work filling the
// general queue cannot refuse the small requests either. Within a lane, clients
// (connections) take turns, and a full queue makes room for a client with fewer
// requests waiting by dropping the newest request of the client with the most,
// so that one client flooding a lane can neither refuse nor delay the others.
// With a spin time, a small-lane thread that runs out of work watches for new
// work that long before it sleeps: a request arriving meanwhile starts without
// the wake-up of a sleeping thread (tens of microseconds), and the general
// threads are not woken for work a spinning thread will take.
// A tiny request that finds nothing waiting may instead run in place, on the
// thread it arrived on (BeginInPlace): queueing it would only add that wake-up,
// and as many run in place at once as the small lane has threads.
#pragma once

#include <atomic>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpucompute {

class Executor {
 public:
  using Task = absl::AnyInvocable<void() &&>;
  // A request's work: runs with OkStatus once a thread takes it, or with
  // RESOURCE_EXHAUSTED when it is dropped from a full queue for another client.
  using RequestTask = absl::AnyInvocable<void(absl::Status) &&>;
  // kSmall: short work that the reserved threads may take too.
  enum class Lane { kGeneral, kSmall };

  // `small_lane_threads` of the `threads` take only small requests and
  // continuations; at least one thread stays general. Up to
  // `max_queued_requests` general and `max_queued_small_requests` small
  // requests may wait, each lane counted on its own. With no small-lane
  // thread every request is general. A small-lane thread out of work watches for
  // a submission `small_lane_spin` long before it sleeps. `on_thread_start` (if set)
  // runs first on each thread: what a thread's first task would otherwise set up.
  Executor(int threads, size_t max_queued_requests, int small_lane_threads,
           size_t max_queued_small_requests, absl::Duration small_lane_spin = absl::ZeroDuration(),
           std::function<void()> on_thread_start = nullptr);
  // Both lanes bounded by `max_queued_requests`.
  Executor(int threads, size_t max_queued_requests, int small_lane_threads = 0)
      : Executor(threads, max_queued_requests, small_lane_threads, max_queued_requests) {}
  // Runs every task still queued, then joins.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // A new request of `client` (the connection it came on): RESOURCE_EXHAUSTED
  // when its lane's queue is full and no client has more requests waiting than
  // this one would.
  absl::Status SubmitRequest(RequestTask task, absl::string_view client,
                             Lane lane = Lane::kGeneral);
  // Follow-up work of an admitted request.
  void SubmitContinuation(Task task);

  size_t queued_requests() const;
  // Threads running a task now: the reserved small-lane ones, or the general ones.
  int busy_threads(Lane lane) const;
  // Whether the caller may run a tiny request in place now, skipping the queues:
  // nothing waits in them and fewer than small_lane_threads requests run in
  // place. When true, the caller runs it, then calls EndInPlace.
  bool BeginInPlace();
  void EndInPlace();
  int threads() const { return static_cast<int>(workers_.size()); }
  int small_lane_threads() const { return small_lane_threads_; }

 private:
  struct Request {
    RequestTask task;
    uint64_t sequence;  // submission order across both lanes
  };
  // One lane's waiting requests: each client's in submission order, and the
  // clients with requests waiting in the order of their turns.
  struct LaneQueue {
    absl::flat_hash_map<std::string, std::deque<Request>> by_client;
    std::deque<std::string> turns;
    size_t size = 0;

    void Push(absl::string_view client, Request request);
    // The oldest request of the client whose turn it is; the client goes to
    // the back of the turns if it has more.
    Request PopNextTurn();
    // The newest request of the client with the most waiting, if that is more
    // than `count_after_push`: the one to drop for a client that would then
    // have `count_after_push` waiting.
    std::optional<Request> PopNewestOfHeaviest(size_t count_after_push);
    size_t WaitingFor(absl::string_view client) const;
    // Submission order of the request PopNextTurn would return.
    uint64_t NextSequence() const;
  };
  // The next task a worker of the small lane (or a general one) may run, taken
  // off its queue; empty when there is none.
  Task Take(bool small_lane_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWork(bool small_lane_only) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a worker should wake: a general one leaves to the spinning threads
  // as much small work as they can take.
  bool Ready(bool small_lane_only) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a new task for the spinning threads (with mu_ held).
  void Submitted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With mu_ held, no work there: watches for a submission for small_lane_spin_
  // outside the lock; returns with mu_ held again.
  void SpinForWork() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop(bool small_lane_only);

  const size_t max_queued_requests_;
  const size_t max_queued_small_requests_;
  int small_lane_threads_ = 0;
  const absl::Duration small_lane_spin_;
  // Tasks ever submitted: what a spinning thread watches.
  std::atomic<uint64_t> submissions_{0};
  mutable absl::Mutex mu_;
  size_t spinners_ ABSL_GUARDED_BY(mu_) = 0;
  int in_place_ ABSL_GUARDED_BY(mu_) = 0;  // requests running in place now
  int busy_small_lane_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_general_ ABSL_GUARDED_BY(mu_) = 0;
  // Continuations go first: finishing admitted work frees memory soonest.
  std::deque<Task> continuations_ ABSL_GUARDED_BY(mu_);
  LaneQueue general_ ABSL_GUARDED_BY(mu_);
  LaneQueue small_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// Runs callbacks at their deadlines on a thread of its own, so that a reaction
// can arm a timeout without blocking. Callbacks must be short and must not block.
class Timer {
 public:
  using Id = uint64_t;
  using Callback = absl::AnyInvocable<void() &&>;

  Timer();
  // Drops the callbacks not run yet, then joins.
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  Id Schedule(absl::Time deadline, Callback callback);
  // Drops the callback unless it already ran or is running.
  void Cancel(Id id);

 private:
  void Loop();

  absl::Mutex mu_;
  std::set<std::pair<absl::Time, Id>> order_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Id, std::pair<absl::Time, Callback>> pending_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The deadline the loop sleeps until (a callback cancelled since may have
  // set it), InfinitePast while it is awake: only an earlier deadline wakes it,
  // so that scheduling a later one (the common case: now + a fixed timeout)
  // costs no wake-up.
  absl::Time sleeping_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Set for an earlier deadline or on stop: the loop waits again.
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucompute
