// The server's own threads for compute and copies: gRPC reactions only hand work
// over, they never block. Admission is bounded; continuations of admitted work
// (result chunks, upload chunks) are always accepted so a stream never stalls.
#pragma once

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute {

class Executor {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  Executor(int threads, size_t max_queued_requests);
  // Runs every task still queued, then joins.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // A new request: RESOURCE_EXHAUSTED when max_queued_requests are already waiting.
  absl::Status SubmitRequest(Task task);
  // Follow-up work of an admitted request.
  void SubmitContinuation(Task task);

  size_t queued_requests() const;
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Entry {
    Task task;
    bool is_request;
  };
  void WorkerLoop();

  const size_t max_queued_requests_;
  mutable absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace gpucompute
