// gRPC's listener (1.51) stops for good once accept4 fails, as when the process
// runs out of file descriptors (grpc_log_watch.h sees it). A plaintext server
// then takes its port over: it stops gRPC's listening socket (shutdown, which
// leaves gRPC's descriptor valid for gRPC to close), listens on the same address
// itself and hands each connection it accepts to gRPC (AddInsecureChannelFromFd,
// whose calls name their peer "fd:N"). When accept fails for want of
// descriptors it waits and tries again, and says so (accepting()), so that
// health reads NOT_SERVING exactly while new clients cannot connect.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace gpucompute {

class RecoveryListener {
 public:
  // Takes over the listening sockets of this process on `port` for `server`.
  static absl::StatusOr<std::unique_ptr<RecoveryListener>> TakeOver(grpc::Server* server, int port);
  // Stops accepting and closes its listening sockets.
  ~RecoveryListener();
  RecoveryListener(const RecoveryListener&) = delete;
  RecoveryListener& operator=(const RecoveryListener&) = delete;

  // False while the last accept failed for want of descriptors.
  bool accepting() const { return accepting_.load(); }

 private:
  RecoveryListener(grpc::Server* server, std::vector<int> listeners, int wake_read, int wake_write);
  void Run();

  grpc::Server* const server_;
  const std::vector<int> listeners_;
  const int wake_read_;   // a byte here stops Run
  const int wake_write_;
  std::atomic<bool> accepting_{true};
  std::thread thread_;
};

}  // namespace gpucompute
