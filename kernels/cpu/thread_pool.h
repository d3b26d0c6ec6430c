// A fixed pool of worker threads shared by every request on the CPU backend.
// ParallelFor splits [0, n) into blocks; the calling thread claims blocks too,
// so a request always makes progress even when every worker is busy with other
// requests (no deadlock, and nested calls are safe).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"

namespace gpucompute {

class ThreadPool {
 public:
  // `threads` counts the caller: threads - 1 workers are started (at least 0).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) in blocks of `grain` elements (the last one
  // shorter). Polls ctx.IsCancelled() before each block; once it is set, the
  // remaining blocks are skipped and the result is CANCELLED. Returns after
  // every started block has finished.
  absl::Status ParallelFor(int64_t n, int64_t grain, const OpContext& ctx,
                           absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  struct Job;

  void WorkerLoop();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(const Job* job);

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace gpucompute
