#include "server/executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute {

Executor::Executor(int threads, size_t max_queued_requests)
    : max_queued_requests_(max_queued_requests) {
  const int count = std::max(threads, 1);
  workers_.reserve(count);
  for (int i = 0; i < count; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

absl::Status Executor::SubmitRequest(Task task) {
  absl::MutexLock lock(&mu_);
  if (queued_requests_ >= max_queued_requests_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request queue is full: ", queued_requests_, " requests waiting (max_queue_depth ",
        max_queued_requests_, ")"));
  }
  ++queued_requests_;
  queue_.push_back({std::move(task), true});
  return absl::OkStatus();
}

void Executor::SubmitContinuation(Task task) {
  absl::MutexLock lock(&mu_);
  // Continuations go first: finishing admitted work frees memory soonest.
  queue_.push_front({std::move(task), false});
}

size_t Executor::queued_requests() const {
  absl::MutexLock lock(&mu_);
  return queued_requests_;
}

void Executor::WorkerLoop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      Entry entry = std::move(queue_.front());
      queue_.pop_front();
      if (entry.is_request) --queued_requests_;
      task = std::move(entry.task);
    }
    std::move(task)();
  }
}

Timer::Timer() : thread_([this] { Loop(); }) {}

Timer::~Timer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    woken_ = true;
  }
  thread_.join();
}

Timer::Id Timer::Schedule(absl::Time deadline, Callback callback) {
  absl::MutexLock lock(&mu_);
  const Id id = next_id_++;
  auto [it, inserted] = order_.emplace(deadline, id);
  if (it == order_.begin()) woken_ = true;
  pending_.emplace(id, std::make_pair(deadline, std::move(callback)));
  return id;
}

void Timer::Cancel(Id id) {
  Callback dropped;  // destroyed after the lock
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  order_.erase({it->second.first, id});
  dropped = std::move(it->second.second);
  pending_.erase(it);
}

void Timer::Loop() {
  mu_.Lock();
  while (!stopping_) {
    const absl::Time next = order_.empty() ? absl::InfiniteFuture() : order_.begin()->first;
    if (absl::Now() < next) {
      woken_ = false;
      mu_.AwaitWithDeadline(absl::Condition(&woken_), next);
      continue;
    }
    const Id id = order_.begin()->second;
    order_.erase(order_.begin());
    {
      auto node = pending_.extract(id);
      mu_.Unlock();
      std::move(node.mapped().second)();
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace gpucompute
