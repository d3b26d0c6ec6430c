// Dynamic batching, as Triton's dynamic batcher: small requests of one operation
// whose BatchPlan keys match (prepared_operation.h: dtype, options, shapes but for the
// leading extent) and that wait together run as one launch, and each gets its
// own part of the result, a batch being at most --max_batch_size requests and
// --small_request_work units. A batch is what arrived while its first request
// waited for a small-lane executor thread (in turn with the other small
// requests), or, with a window, what arrived within it after the first. The
// window only holds requests while others of their key are running: a request
// with none of its kind queued or running goes to the executor at once, so
// batching costs a lone caller nothing; when it is tiny (--in_place_work) and
// no request waits for a thread, it runs in place instead, on the caller's
// thread (Executor::BeginInPlace), sparing it a thread's wake-up. Each request
// keeps its own status, timing and cancellation: one cancelled or past its
// deadline before the launch leaves the batch; when the batched launch fails,
// each request runs alone, so that a bad one fails alone with its own message.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/executor.h"
#include "server/rpc_labels.h"
#include "server/prepared_operation.h"
#include "server/service_context.h"

namespace gpucompute {

// One request waiting in the batcher.
struct BatchMember {
  Operation op;
  PreparedOperation prepared;  // prepared.batch is set
  std::shared_ptr<const void> request;  // what the inline operands point into
  // The connection it came on: requests batch with others of their connection,
  // so that clients keep taking turns in the executor's queues (executor.h).
  std::string client;
  const std::atomic<bool>* cancelled = nullptr;
  absl::Time deadline = absl::InfiniteFuture();
  // Called exactly once, on an executor thread: the request's result or error
  // and when its work started.
  absl::AnyInvocable<void(absl::StatusOr<StreamSource>, absl::Time started)> deliver;
};

class DynamicBatcher {
 public:
  // Uses service.config's batching flags; `service` outlives the executor's tasks.
  explicit DynamicBatcher(ServiceContext& service);
  // Hands every waiting batch to the executor (which runs it before it stops).
  ~DynamicBatcher();
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Whether a request of `work` units with this plan (and output options) may batch.
  bool Accepts(const PreparedOperation& prepared, bool keep_on_device) const;
  // Queues `member` (or runs it in place, delivering before it returns);
  // RESOURCE_EXHAUSTED (counted as queue_full) when as many requests of its
  // connection wait in the batcher as their lane's queue may hold
  // (max_small_queue_depth, or max_queue_depth without a small lane).
  absl::Status Submit(BatchMember member);
  // Requests waiting to be batched.
  size_t waiting() const;

 private:
  // The batches waiting, shared with the executor tasks that drain them.
  struct State {
    explicit State(ServiceContext& s) : service(s) {}
    ServiceContext& service;
    absl::Mutex mu;
    // Per client and key: the requests waiting, and whether a drain of them is
    // scheduled.
    struct Group {
      std::string client;
      std::vector<BatchMember> members;
      bool drain_scheduled = false;
    };
    absl::flat_hash_map<std::string, Group> groups ABSL_GUARDED_BY(mu);
    // Per key: the batches (lone requests included) running now.
    absl::flat_hash_map<std::string, int> running ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<std::string, size_t> waiting_by_client ABSL_GUARDED_BY(mu);
    size_t waiting ABSL_GUARDED_BY(mu) = 0;

    // Takes `count` waiting requests of `client` off the counts.
    void Left(const std::string& client, size_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };

  // The executor task that drains `key` (or refuses its requests when the
  // executor drops it for another client's).
  static Executor::RequestTask DrainTask(std::shared_ptr<State> state, std::string key);
  // Submits the drain of `key` when its window ends.
  void ScheduleWindow(const std::string& key, const std::string& client);
  // The requests of `key` get `status` (the executor refused their drain).
  static void Refuse(State& state, const std::string& key, const absl::Status& status);
  // On an executor thread: takes up to max_batch_size requests of `key`, runs
  // them (counted as running meanwhile) and delivers each its outcome.
  static void Drain(const std::shared_ptr<State>& state, const std::string& key);
  // What one member gets.
  struct Outcome {
    BatchMember* member;
    absl::StatusOr<StreamSource> source;
  };
  // Runs `members` (one key) as one launch: each member's part, or its own error.
  static std::vector<Outcome> Run(ServiceContext& service, std::vector<BatchMember>& members,
                                  absl::Time started);
  static absl::StatusOr<StreamSource> RunAlone(ServiceContext& service, BatchMember& member);

  std::shared_ptr<State> state_;
  // Only with a window: fires each batch's drain when its window ends. Its
  // callbacks hold state_; it stops before state_ is let go.
  std::unique_ptr<Timer> timer_;
};

}  // namespace gpucompute
