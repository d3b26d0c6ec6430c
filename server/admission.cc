#include "server/admission.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpucompute {

absl::StatusOr<Admission::Ticket> Admission::Enter(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  if (in_flight_ >= max_in_flight_) {
    return absl::ResourceExhaustedError(absl::StrCat("server has ", in_flight_, " ", what_, " (",
                                                     flag_, " ", max_in_flight_, ")"));
  }
  int64_t& mine = by_peer_[peer];
  if (mine >= max_per_connection_) {
    return absl::ResourceExhaustedError(absl::StrCat("this connection has ", mine, " ", what_,
                                                     " (", per_connection_flag_, " ",
                                                     max_per_connection_, ")"));
  }
  ++mine;
  ++in_flight_;
  return Ticket(this, peer);
}

void Admission::Leave(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  auto it = by_peer_.find(peer);
  if (--it->second == 0) by_peer_.erase(it);
}

int64_t Admission::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

absl::StatusOr<DeviceQueues::Slot> DeviceQueues::Enter(int device, absl::string_view label) {
  absl::MutexLock lock(&mu_);
  int64_t& depth = depth_[device];
  if (depth >= max_depth_) {
    return absl::ResourceExhaustedError(absl::StrCat("device ", label, " has ", depth,
                                                     " operations queued or running (max_device_queue_depth ",
                                                     max_depth_, ")"));
  }
  ++depth;
  return Slot(this, device);
}

void DeviceQueues::Leave(int device) {
  absl::MutexLock lock(&mu_);
  --depth_[device];
}

int64_t DeviceQueues::depth(int device) const {
  absl::MutexLock lock(&mu_);
  auto it = depth_.find(device);
  return it == depth_.end() ? 0 : it->second;
}

}  // namespace gpucompute
