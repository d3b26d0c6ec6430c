// Copies received result payloads into their place on a thread of its own.
//
// In gRPC's synchronous API the thread that waits in Read also reads the socket and
// parses HTTP/2; copying each payload out on that thread kept the socket unread
// for the copy's duration (a one-stream download ran at the speed of one thread
// doing both). With a PayloadCopier the reading thread queues the copy and goes
// back to the socket; at most kMaxQueued messages (their slices held) wait.
#pragma once

#include <cstdint>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/v1/bulk_wire.h"

namespace gpucompute::client {

class PayloadCopier {
 public:
  static constexpr size_t kMaxQueued = 8;

  PayloadCopier();
  // Finishes the queued copies first.
  ~PayloadCopier();
  PayloadCopier(const PayloadCopier&) = delete;
  PayloadCopier& operator=(const PayloadCopier&) = delete;

  // Queues the copy of bytes [start, start + size) of `message` to `destination`;
  // waits while kMaxQueued copies are queued.
  void Copy(v1::wire::MessageBytes message, uint64_t start, uint64_t size, char* destination);
  // Returns once every queued copy is done.
  void Drain();

 private:
  struct Job {
    v1::wire::MessageBytes message{grpc::ByteBuffer()};
    uint64_t start = 0;
    uint64_t size = 0;
    char* destination = nullptr;
  };
  void Run();
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<Job> queued_ ABSL_GUARDED_BY(mu_);
  bool copying_ ABSL_GUARDED_BY(mu_) = false;  // a job taken off the queue, not done
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucompute::client
