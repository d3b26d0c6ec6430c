// In-flight limits, global and per connection: a request holds a Ticket from
// admission until its reactor is done. Per device: an operation holds a
// DeviceQueues::Slot while it is placed on a device. Over a limit:
// RESOURCE_EXHAUSTED naming it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute {

class Admission {
 public:
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        Release();
        admission_ = std::exchange(other.admission_, nullptr);
        peer_ = std::move(other.peer_);
      }
      return *this;
    }
    ~Ticket() { Release(); }

   private:
    friend class Admission;
    Ticket(Admission* admission, std::string peer)
        : admission_(admission), peer_(std::move(peer)) {}
    void Release() {
      if (admission_ != nullptr) admission_->Leave(peer_);
      admission_ = nullptr;
    }
    Admission* admission_ = nullptr;
    std::string peer_;
  };

  Admission(int64_t max_in_flight, int64_t max_in_flight_per_connection)
      : max_in_flight_(max_in_flight), max_per_connection_(max_in_flight_per_connection) {}

  // `peer` identifies the connection (grpc::ServerContext::peer()).
  absl::StatusOr<Ticket> Enter(const std::string& peer);
  int64_t in_flight() const;

 private:
  void Leave(const std::string& peer);

  const int64_t max_in_flight_;
  const int64_t max_per_connection_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int64_t> by_peer_ ABSL_GUARDED_BY(mu_);
};

// Operations placed on each device at once: copying operands in, waiting for the
// device or running on it. Bounds how many executor threads one slow or backed-up
// device can hold while requests for the others wait.
class DeviceQueues {
 public:
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept { *this = std::move(other); }
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        Release();
        queues_ = std::exchange(other.queues_, nullptr);
        device_ = other.device_;
      }
      return *this;
    }
    ~Slot() { Release(); }

   private:
    friend class DeviceQueues;
    Slot(DeviceQueues* queues, int device) : queues_(queues), device_(device) {}
    void Release() {
      if (queues_ != nullptr) queues_->Leave(device_);
      queues_ = nullptr;
    }
    DeviceQueues* queues_ = nullptr;
    int device_ = 0;
  };

  explicit DeviceQueues(int64_t max_depth) : max_depth_(max_depth) {}

  // `label` names the device in the message ("cuda:0").
  absl::StatusOr<Slot> Enter(int device, absl::string_view label);
  int64_t depth(int device) const;

 private:
  void Leave(int device);

  const int64_t max_depth_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, int64_t> depth_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute
