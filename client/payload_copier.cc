#include "client/payload_copier.h"

#include <utility>

#include "common/thread_name.h"

namespace gpucompute::client {

PayloadCopier::PayloadCopier() : thread_([this] { Run(); }) {}

PayloadCopier::~PayloadCopier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void PayloadCopier::Copy(v1::wire::MessageBytes message, uint64_t start, uint64_t size,
                         char* destination) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::deque<Job>* queued) { return queued->size() < kMaxQueued; }, &queued_));
  queued_.push_back({std::move(message), start, size, destination});
}

void PayloadCopier::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &PayloadCopier::IdleLocked));
}

bool PayloadCopier::IdleLocked() const { return queued_.empty() && !copying_; }

void PayloadCopier::Run() {
  NameThisThread("gc-copier");
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PayloadCopier* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !self->queued_.empty() || self->stopping_;
          },
          this));
      // Stopping still finishes what was queued: its destinations wait for it.
      if (queued_.empty()) return;
      job = std::move(queued_.front());
      queued_.pop_front();
      copying_ = true;
    }
    job.message.CopyOut(job.start, job.size, job.destination);
    absl::MutexLock lock(&mu_);
    copying_ = false;
  }
}

}  // namespace gpucompute::client
