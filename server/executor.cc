#include "server/executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute {

Executor::Executor(int threads, size_t max_queued_requests, int small_lane_threads,
                   size_t max_queued_small_requests)
    : max_queued_requests_(max_queued_requests),
      max_queued_small_requests_(max_queued_small_requests) {
  const int count = std::max(threads, 1);
  small_lane_threads_ = std::clamp(small_lane_threads, 0, count - 1);
  workers_.reserve(count);
  for (int i = 0; i < count; ++i) {
    const bool small_lane_only = i < small_lane_threads_;
    workers_.emplace_back([this, small_lane_only] { WorkerLoop(small_lane_only); });
  }
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

absl::Status Executor::SubmitRequest(Task task, Lane lane) {
  absl::MutexLock lock(&mu_);
  // Without reserved threads there is no small lane: every request is general.
  const bool small = lane == Lane::kSmall && small_lane_threads_ > 0;
  std::deque<Request>& queue = small ? small_ : general_;
  const size_t limit = small ? max_queued_small_requests_ : max_queued_requests_;
  if (queue.size() >= limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        small ? "small-request queue is full: " : "request queue is full: ", queue.size(),
        " requests waiting (", small ? "max_small_queue_depth " : "max_queue_depth ", limit,
        ")"));
  }
  queue.push_back({std::move(task), next_sequence_++});
  return absl::OkStatus();
}

void Executor::SubmitContinuation(Task task) {
  absl::MutexLock lock(&mu_);
  continuations_.push_back(std::move(task));
}

size_t Executor::queued_requests() const {
  absl::MutexLock lock(&mu_);
  return general_.size() + small_.size();
}

bool Executor::HasWork(bool small_lane_only) const {
  return !continuations_.empty() || !small_.empty() || (!small_lane_only && !general_.empty());
}

Executor::Task Executor::Take(bool small_lane_only) {
  if (!continuations_.empty()) {
    Task task = std::move(continuations_.front());
    continuations_.pop_front();
    return task;
  }
  // The older of the two requests at the heads of the lanes, so that general
  // threads serve requests in submission order.
  const bool general_first =
      !small_lane_only && !general_.empty() &&
      (small_.empty() || general_.front().sequence < small_.front().sequence);
  std::deque<Request>& lane = general_first ? general_ : small_;
  if (lane.empty()) return nullptr;
  Task task = std::move(lane.front().task);
  lane.pop_front();
  return task;
}

void Executor::WorkerLoop(bool small_lane_only) {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this, small_lane_only]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || HasWork(small_lane_only);
      };
      mu_.Await(absl::Condition(&ready));
      if (!HasWork(small_lane_only)) return;  // stopping and drained
      task = Take(small_lane_only);
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
