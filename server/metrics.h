// Prometheus metrics. One Metrics object owns the registry; every family and
// every labelled child is built in the constructor (fixed, low-cardinality label
// sets: operation, stage, direction, code, reason), so the hot path only touches
// cached pointers. Live state (memory, queue, buffers) is read at scrape time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"
#include "kernels/backend.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/rpc_labels.h"

namespace gpucompute {

// kPrepare: checking the request and reserving for it, on the gRPC thread.
enum class Stage { kQueue, kTransferIn, kCompute, kTransferOut, kStreamWrite, kPrepare };
inline constexpr int kStageCount = 6;

enum class Direction { kHostToDevice, kDeviceToHost };

enum class Rejection {
  kQueueFull, kDeadlineExceeded, kQuota, kUnavailable, kInFlightLimit, kDeviceQueueFull,
  kStreamIdle, kBufferCount, kMemoryBudget, kWorkLimit, kMetadataSize,
};
inline constexpr int kRejectionCount = 11;

struct BuildInfo {
  std::string version;
  std::string git_commit;
  std::string cuda_version;  // "none" without CUDA
  std::string backend;
};

// Read at every scrape.
struct LiveState {
  BackendStats backend;
  std::vector<DeviceDescription> devices;
  uint64_t stored_buffers = 0;
  uint64_t stored_buffer_bytes = 0;
  uint64_t shared_memory_regions = 0;
  uint64_t shared_memory_bytes = 0;
  uint64_t queued_requests = 0;
  int busy_general_threads = 0;
  int busy_small_lane_threads = 0;
};

// The counters of one label set by status code (label grpc_code, as gRPC's own
// grpc_server_handled_total has it), each a series from its first count on: a
// scrape shows the codes that happened, not 17 zeros per label set.
class CodeCounters {
 public:
  CodeCounters(prometheus::Family<prometheus::Counter>& family, prometheus::Labels labels);
  void Increment(grpc::StatusCode code);

 private:
  static constexpr int kCodes = 17;  // OK .. UNAUTHENTICATED
  prometheus::Counter& Get(grpc::StatusCode code);

  prometheus::Family<prometheus::Counter>& family_;
  const prometheus::Labels labels_;
  std::array<std::atomic<prometheus::Counter*>, kCodes> counters_{};
};

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build);
  ~Metrics();

  // Serves /metrics on `address` (host:port; port 0 picks one). Empty: none.
  // With `basic_auth_file` ("USER sha256:HEX" lines) scrapes need HTTP basic auth.
  absl::Status StartExposer(const std::string& address, const std::string& basic_auth_file,
                            std::function<LiveState()> live_state);
  int port() const;  // 0 when not exposed
  prometheus::Registry& registry() { return *registry_; }

  void RpcStarted(RpcMethod method);
  void RpcHandled(RpcMethod method, grpc::StatusCode code, absl::Duration elapsed);

  void RequestDone(Operation op, grpc::StatusCode code, absl::Duration total);
  void ObserveStage(Operation op, Stage stage, absl::Duration elapsed);
  // Requests that ran in one launch of `op` (1: alone; server/dynamic_batcher.h).
  void ObserveBatch(Operation op, int size);
  // A small request of `op` ran in place, on the gRPC thread it came on
  // (ServerConfig::in_place_work), with no executor hop.
  void RanInPlace(Operation op);
  void AddInFlight(Operation op, double delta);
  void Rejected(Rejection reason);
  void Transferred(Direction direction, uint64_t bytes, absl::Duration elapsed);
  void NetworkReceived(uint64_t bytes);
  void NetworkSent(uint64_t bytes);

 private:
  class LiveStateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<LiveStateCollector> live_collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string exposer_host_;  // the numeric address /metrics is bound to

  std::array<prometheus::Counter*, kRpcMethodCount> rpc_started_{};
  std::array<std::unique_ptr<CodeCounters>, kRpcMethodCount> rpc_handled_;
  std::array<prometheus::Histogram*, kRpcMethodCount> rpc_seconds_{};

  std::array<std::unique_ptr<CodeCounters>, kOperationCount> requests_;
  std::array<prometheus::Histogram*, kOperationCount> request_seconds_{};
  std::array<std::array<prometheus::Histogram*, kStageCount>, kOperationCount> stage_seconds_{};
  std::array<prometheus::Histogram*, kOperationCount> batch_size_{};
  std::array<prometheus::Counter*, kOperationCount> in_place_{};
  std::array<prometheus::Gauge*, kOperationCount> in_flight_{};
  std::array<prometheus::Gauge*, kOperationCount> first_request_seconds_{};
  std::array<std::atomic<bool>, kOperationCount> first_request_seen_{};
  std::array<prometheus::Counter*, kRejectionCount> rejections_{};
  std::array<prometheus::Counter*, 2> transfer_bytes_{};
  std::array<prometheus::Histogram*, 2> transfer_seconds_{};
  prometheus::Counter* network_received_ = nullptr;
  prometheus::Counter* network_sent_ = nullptr;
};

// The code a call ended with as its client sees it: a server learns only that
// the call was cancelled, also when it was the client's deadline that expired.
grpc::StatusCode OutcomeCode(grpc::StatusCode code, absl::Time start, absl::Time deadline);

// Records grpc_server_started_total at construction and handled/handling_seconds
// at Done(); one per RPC.
class RpcRecorder {
 public:
  RpcRecorder(Metrics& metrics, RpcMethod method, const grpc::ServerContextBase& context)
      : metrics_(metrics),
        method_(method),
        start_(absl::Now()),
        deadline_(absl::FromChrono(context.deadline())) {
    metrics_.RpcStarted(method_);
  }
  // Returns the code recorded: `code`, or DEADLINE_EXCEEDED for a cancellation
  // at the deadline (OutcomeCode).
  grpc::StatusCode Done(grpc::StatusCode code) {
    const grpc::StatusCode outcome = OutcomeCode(code, start_, deadline_);
    metrics_.RpcHandled(method_, outcome, absl::Now() - start_);
    return outcome;
  }
  absl::Time start() const { return start_; }

 private:
  Metrics& metrics_;
  RpcMethod method_;
  absl::Time start_;
  absl::Time deadline_;
};

// Counts the grpc.health.v1.Health calls, which gRPC's built-in health service
// answers without passing through our services, in the grpc_server_* families.
class HealthRpcCounter final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit HealthRpcCounter(Metrics& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  Metrics& metrics_;
};

}  // namespace gpucompute
