// The whole server: backend (warmed before serving), buffer store, executor,
// services, metrics endpoint, health and reflection.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kernels/backend.h"
#include "kernels/memory/memory_budget.h"
#include "server/config.h"

namespace gpucompute {

class Admission;
class DeviceQueues;
class BufferStore;
class Executor;
class Metrics;
struct ServiceContext;
class ComputeService;
class BuffersService;
class InfoService;
class SharedMemoryRegistry;
class SharedMemoryService;

class GpuComputeServer {
 public:
  // Creates the backend, binds both ports and reports SERVING.
  static absl::StatusOr<std::unique_ptr<GpuComputeServer>> Start(const ServerConfig& config);
  // The same with a backend made by the caller (tests inject faults through it).
  static absl::StatusOr<std::unique_ptr<GpuComputeServer>> Start(const ServerConfig& config,
                                                                  BackendSelection backend);
  ~GpuComputeServer();

  int port() const { return port_; }
  int metrics_port() const;
  const std::string& backend_note() const { return backend_note_; }
  std::string backend_name() const;
  // Prefix of every buffer id this server issues (ServerInfo.instance_id).
  const std::string& instance_id() const;

  // Health NOT_SERVING and new requests UNAVAILABLE while the port still
  // accepts, so that probes on new connections read NOT_SERVING (--drain_delay).
  void StopServing();
  // StopServing; admitted requests get up to `grace` to finish with the port still
  // open, then the port closes and RPCs left are cancelled at the same deadline.
  // Returns when all are done.
  void Drain(absl::Duration grace);
  // False once the backend has no healthy device left; health turns NOT_SERVING
  // within kHealthPollInterval of that.
  bool BackendHealthy() const;
  static constexpr absl::Duration kHealthPollInterval = absl::Milliseconds(100);
  BackendStats backend_stats() const;

 private:
  GpuComputeServer() = default;
  // Reports NOT_SERVING once the backend turns unhealthy (a sticky device error).
  void WatchBackendHealth();
  void StopHealthWatcher();

  ServerConfig config_;
  std::string backend_note_;
  std::atomic<bool> draining_{false};
  // Declaration order is teardown order reversed: the gRPC server stops first,
  // then the executor drains, then stored buffers are freed, then the backend.
  std::unique_ptr<Backend> backend_;
  // ServerConfig::charge_process_memory's charge, held for the server's life.
  MemoryBudget::Charge process_memory_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<BufferStore> store_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<DeviceQueues> device_queues_;
  std::unique_ptr<SharedMemoryRegistry> shared_memory_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ServiceContext> context_;
  std::unique_ptr<ComputeService> compute_service_;
  std::unique_ptr<BuffersService> buffers_service_;
  std::unique_ptr<InfoService> info_service_;
  std::unique_ptr<SharedMemoryService> shared_memory_service_;
  std::unique_ptr<grpc::Service> reflection_v1_;
  std::unique_ptr<grpc::Service> reflection_v1alpha_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification stop_watching_;
  std::thread health_watcher_;
};

}  // namespace gpucompute
