#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "common/thread_name.h"

namespace gpucompute {

// One ParallelFor call. Shared by the caller and the workers that help it, so
// the last worker to finish a block may still touch it after the caller left.
struct ThreadPool::Job {
  Job(int64_t n, int64_t grain, const OpContext& ctx, absl::FunctionRef<void(int64_t, int64_t)> fn)
      : n(n), grain(grain), blocks((n + grain - 1) / grain), ctx(ctx), fn(fn) {}

  // Claims and runs blocks until none is left.
  void RunBlocks() {
    while (true) {
      const int64_t block = next_block.fetch_add(1, std::memory_order_relaxed);
      if (block >= blocks) return;
      if (cancelled.load(std::memory_order_relaxed) || ctx.IsCancelled()) {
        cancelled.store(true, std::memory_order_relaxed);
      } else {
        const int64_t begin = block * grain;
        fn(begin, std::min(n, begin + grain));
      }
      if (finished_blocks.fetch_add(1, std::memory_order_acq_rel) + 1 == blocks) {
        absl::MutexLock lock(&mu);
        done = true;
      }
    }
  }

  const int64_t n;
  const int64_t grain;
  const int64_t blocks;
  const OpContext& ctx;
  const absl::FunctionRef<void(int64_t, int64_t)> fn;
  std::atomic<int64_t> next_block{0};
  std::atomic<int64_t> finished_blocks{0};
  std::atomic<bool> cancelled{false};
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
};

ThreadPool::ThreadPool(int threads) {
  const int workers = std::max(threads, 1) - 1;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this] {
      NameThisThread("gc-cpu-pool");
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ThreadPool::HasWorkOrStopping));
      if (jobs_.empty()) return;  // stopping
      job = jobs_.front();
    }
    job->RunBlocks();
    Remove(job.get());
  }
}

bool ThreadPool::HasWorkOrStopping() const { return stopping_ || !jobs_.empty(); }

void ThreadPool::Remove(const Job* job) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(jobs_.begin(), jobs_.end(),
                         [job](const std::shared_ptr<Job>& queued) { return queued.get() == job; });
  if (it != jobs_.end()) jobs_.erase(it);
}

absl::Status ThreadPool::ParallelFor(int64_t n, int64_t grain, const OpContext& ctx,
                                     absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (ctx.IsCancelled()) return absl::CancelledError("operation cancelled before it started");
  if (n <= 0) return absl::OkStatus();
  grain = std::max<int64_t>(grain, 1);

  auto job = std::make_shared<Job>(n, grain, ctx, fn);
  // A single block, or no workers: the caller runs it all without queueing.
  const bool shared = job->blocks > 1 && !workers_.empty();
  if (shared) {
    absl::MutexLock lock(&mu_);
    jobs_.push_back(job);
  }
  job->RunBlocks();
  if (shared) {
    Remove(job.get());
    absl::MutexLock lock(&job->mu);
    job->mu.Await(absl::Condition(&job->done));
  }
  if (job->cancelled.load(std::memory_order_relaxed)) {
    return absl::CancelledError("operation cancelled while running");
  }
  return absl::OkStatus();
}

}  // namespace gpucompute
