// In-flight limits, global and per connection: a request holds a Ticket from
// admission until its reactor is done. Streams that wait on their client
// (Upload, StreamingCompute) are counted by an Admission of their own, so that
// open but idle streams cannot take the places of requests. Per device: an operation holds a
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

// One counted place in a limiter (Admission or DeviceQueues), given back exactly
// once: when destroyed, or when another is moved onto it.
template <typename Limiter, typename Key>
class HeldPlace {
 public:
  HeldPlace() = default;
  HeldPlace(HeldPlace&& other) noexcept { *this = std::move(other); }
  HeldPlace& operator=(HeldPlace&& other) noexcept {
    if (this != &other) {
      Release();
      limiter_ = std::exchange(other.limiter_, nullptr);
      key_ = std::move(other.key_);
    }
    return *this;
  }
  ~HeldPlace() { Release(); }
  // What the place is counted under (Admission: the connection's peer).
  const Key& key() const { return key_; }

 private:
  friend Limiter;
  HeldPlace(Limiter* limiter, Key key) : limiter_(limiter), key_(std::move(key)) {}
  void Release() {
    if (limiter_ != nullptr) limiter_->Leave(key_);
    limiter_ = nullptr;
  }
  Limiter* limiter_ = nullptr;
  Key key_{};
};

class Admission {
 public:
  using Ticket = HeldPlace<Admission, std::string>;

  // `what` names what is counted in messages, `flag` and `per_connection_flag`
  // the limits' flags.
  Admission(int64_t max_in_flight, int64_t max_in_flight_per_connection,
            std::string what = "requests in flight", std::string flag = "max_in_flight",
            std::string per_connection_flag = "max_in_flight_per_connection")
      : max_in_flight_(max_in_flight), max_per_connection_(max_in_flight_per_connection),
        what_(std::move(what)), flag_(std::move(flag)),
        per_connection_flag_(std::move(per_connection_flag)) {}

  // `peer` identifies the connection (grpc::ServerContext::peer()).
  absl::StatusOr<Ticket> Enter(const std::string& peer);
  int64_t in_flight() const;

 private:
  friend Ticket;
  void Leave(const std::string& peer);

  const int64_t max_in_flight_;
  const int64_t max_per_connection_;
  const std::string what_;
  const std::string flag_;
  const std::string per_connection_flag_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int64_t> by_peer_ ABSL_GUARDED_BY(mu_);
};

// Operations placed on each device at once: copying operands in, waiting for the
// device or running on it. Bounds how many executor threads one slow or backed-up
// device can hold while requests for the others wait.
class DeviceQueues {
 public:
  using Slot = HeldPlace<DeviceQueues, int>;

  explicit DeviceQueues(int64_t max_depth) : max_depth_(max_depth) {}

  // `label` names the device in the message ("cuda:0").
  absl::StatusOr<Slot> Enter(int device, absl::string_view label);
  int64_t depth(int device) const;

 private:
  friend Slot;
  void Leave(int device);

  const int64_t max_depth_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, int64_t> depth_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute
