#include "server/executor.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace gpucompute {

Executor::Executor(int threads, size_t max_queued_requests, int small_lane_threads,
                   size_t max_queued_small_requests, absl::Duration small_lane_spin,
                   std::function<void()> on_thread_start)
    : max_queued_requests_(max_queued_requests),
      max_queued_small_requests_(max_queued_small_requests),
      small_lane_spin_(small_lane_spin) {
  const int count = std::max(threads, 1);
  small_lane_threads_ = std::clamp(small_lane_threads, 0, count - 1);
  workers_.reserve(count);
  for (int i = 0; i < count; ++i) {
    const bool small_lane_only = i < small_lane_threads_;
    workers_.emplace_back([this, small_lane_only, on_thread_start] {
      NameThisThread(small_lane_only ? "gc-exec-small" : "gc-exec");
      if (on_thread_start) on_thread_start();
      WorkerLoop(small_lane_only);
    });
  }
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

absl::Status Executor::SubmitRequest(RequestTask task, absl::string_view client, Lane lane) {
  absl::MutexLock lock(&mu_);
  // Without reserved threads there is no small lane: every request is general.
  const bool small = lane == Lane::kSmall && small_lane_threads_ > 0;
  LaneQueue& queue = small ? small_ : general_;
  const size_t limit = small ? max_queued_small_requests_ : max_queued_requests_;
  if (queue.size >= limit) {
    const absl::string_view full = small ? "small-request queue is full" : "request queue is full";
    const absl::string_view flag = small ? "max_small_queue_depth " : "max_queue_depth ";
    const size_t waiting = queue.WaitingFor(client);
    std::optional<Request> dropped = queue.PopNewestOfHeaviest(waiting + 1);
    if (!dropped.has_value()) {
      return absl::ResourceExhaustedError(absl::StrCat(full, ": ", queue.size,
                                                       " requests waiting (", flag, limit,
                                                       "), ", waiting, " from this connection"));
    }
    // Told on a worker thread, not inside the caller's reaction.
    continuations_.push_back(
        [task = std::move(dropped->task),
         status = absl::ResourceExhaustedError(absl::StrCat(
             full, " (", flag, limit,
             "): this request was dropped for one from a connection with fewer waiting"))]() mutable {
          std::move(task)(status);
        });
  }
  queue.Push(client, {std::move(task), next_sequence_++});
  Submitted();
  return absl::OkStatus();
}

void Executor::SubmitContinuation(Task task) {
  absl::MutexLock lock(&mu_);
  continuations_.push_back(std::move(task));
  Submitted();
}

void Executor::Submitted() { submissions_.fetch_add(1, std::memory_order_release); }

size_t Executor::queued_requests() const {
  absl::MutexLock lock(&mu_);
  return general_.size + small_.size;
}

int Executor::busy_threads(Lane lane) const {
  absl::MutexLock lock(&mu_);
  return lane == Lane::kSmall ? busy_small_lane_ : busy_general_;
}

bool Executor::BeginInPlace() {
  absl::MutexLock lock(&mu_);
  if (stopping_ || in_place_ >= small_lane_threads_ || HasWork(/*small_lane_only=*/false)) {
    return false;
  }
  ++in_place_;
  return true;
}

void Executor::EndInPlace() {
  absl::MutexLock lock(&mu_);
  --in_place_;
}

bool Executor::HasWork(bool small_lane_only) const {
  return !continuations_.empty() || small_.size > 0 || (!small_lane_only && general_.size > 0);
}

bool Executor::Ready(bool small_lane_only) const {
  if (stopping_) return true;
  if (small_lane_only) return HasWork(true);
  return general_.size > 0 || continuations_.size() + small_.size > spinners_;
}

Executor::Task Executor::Take(bool small_lane_only) {
  if (!continuations_.empty()) {
    Task task = std::move(continuations_.front());
    continuations_.pop_front();
    return task;
  }
  // The older of the two requests whose turn it is, so that general threads
  // serve the lanes in submission order.
  const bool general_first =
      !small_lane_only && general_.size > 0 &&
      (small_.size == 0 || general_.NextSequence() < small_.NextSequence());
  LaneQueue& lane = general_first ? general_ : small_;
  if (lane.size == 0) return nullptr;
  return [task = lane.PopNextTurn().task]() mutable { std::move(task)(absl::OkStatus()); };
}

void Executor::LaneQueue::Push(absl::string_view client, Request request) {
  std::deque<Request>& waiting = by_client[client];
  if (waiting.empty()) turns.emplace_back(client);
  waiting.push_back(std::move(request));
  ++size;
}

Executor::Request Executor::LaneQueue::PopNextTurn() {
  std::string client = std::move(turns.front());
  turns.pop_front();
  auto it = by_client.find(client);
  Request request = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    by_client.erase(it);
  } else {
    turns.push_back(std::move(client));
  }
  --size;
  return request;
}

std::optional<Executor::Request> Executor::LaneQueue::PopNewestOfHeaviest(
    size_t count_after_push) {
  auto heaviest = by_client.end();
  for (auto it = by_client.begin(); it != by_client.end(); ++it) {
    if (heaviest == by_client.end() || it->second.size() > heaviest->second.size()) heaviest = it;
  }
  if (heaviest == by_client.end() || heaviest->second.size() <= count_after_push) {
    return std::nullopt;
  }
  // The heaviest keeps more than count_after_push >= 1 requests: its turn stays.
  Request request = std::move(heaviest->second.back());
  heaviest->second.pop_back();
  --size;
  return request;
}

size_t Executor::LaneQueue::WaitingFor(absl::string_view client) const {
  auto it = by_client.find(client);
  return it == by_client.end() ? 0 : it->second.size();
}

uint64_t Executor::LaneQueue::NextSequence() const {
  return by_client.find(turns.front())->second.front().sequence;
}

void Executor::SpinForWork() {
  ++spinners_;
  const uint64_t seen = submissions_.load(std::memory_order_acquire);
  mu_.Unlock();
  const absl::Time until = absl::Now() + small_lane_spin_;
  while (submissions_.load(std::memory_order_acquire) == seen && absl::Now() < until) {
    std::this_thread::yield();
  }
  mu_.Lock();
  // Cleared in the critical section that takes the work, so that no general
  // thread is woken for it in between.
  --spinners_;
}

void Executor::WorkerLoop(bool small_lane_only) {
  const bool spin = small_lane_only && small_lane_spin_ > absl::ZeroDuration();
  const auto ready = [this, small_lane_only]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return Ready(small_lane_only);
  };
  mu_.Lock();
  while (true) {
    if (spin && !stopping_ && !HasWork(small_lane_only)) SpinForWork();
    mu_.Await(absl::Condition(&ready));
    if (!HasWork(small_lane_only)) break;  // stopping and drained
    {
      Task task = Take(small_lane_only);
      ++(small_lane_only ? busy_small_lane_ : busy_general_);
      mu_.Unlock();
      std::move(task)();
    }  // the task's captures go before the lock is taken again
    mu_.Lock();
    --(small_lane_only ? busy_small_lane_ : busy_general_);
  }
  mu_.Unlock();
}

Timer::Timer()
    : thread_([this] {
        NameThisThread("gc-timer");
        Loop();
      }) {}

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
  order_.emplace(deadline, id);
  if (deadline < sleeping_until_) woken_ = true;
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
      sleeping_until_ = next;
      mu_.AwaitWithDeadline(absl::Condition(&woken_), next);
      sleeping_until_ = absl::InfinitePast();
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
