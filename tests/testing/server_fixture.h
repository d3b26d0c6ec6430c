// A real server in this process on a loopback port chosen by the kernel (port 0),
// with a channel, the client and the raw stubs; shut down when it goes away.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/server.h"

namespace gpucompute::test {

// Bytes that differ at every 4-byte offset (a misplaced range of a striped
// transfer shows).
std::string DistinctBytes(uint64_t bytes);

// Serves on 127.0.0.1:0 without a metrics endpoint, on the CPU backend; tests
// change what they exercise.
ServerConfig LoopbackConfig();
// LoopbackConfig with a /metrics endpoint on 127.0.0.1 and a port of the kernel's choosing.
ServerConfig LoopbackConfigWithMetrics();
// GPUCOMPUTE_TEST_BACKEND=cuda runs a suite that asks on the CUDA backend (ctest
// label gpu); otherwise its servers use the CPU backend.
bool OnCuda();

class TestServer;

// A test with one loopback server (LoopbackConfig) on the suite's backend: CUDA under
// OnCuda (the test skipped where no GPU is usable), else the CPU.
class ServerOnTestBackendTest : public ::testing::Test {
 protected:
  void SetUp() override;
  std::unique_ptr<TestServer> server_;
};

class TestServer {
 public:
  // `backend` replaces the one `config.backend` would create (e.g. a fault-injecting one).
  static absl::StatusOr<std::unique_ptr<TestServer>> Start(
      const ServerConfig& config, std::optional<BackendSelection> backend = std::nullopt);

  GpuComputeServer& server() { return *server_; }
  int port() const { return server_->port(); }
  std::string target() const;  // "<config.address's host>:<port>", e.g. "127.0.0.1:50123"
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  client::Client& client() { return *client_; }
  v1::Compute::Stub& compute() { return *compute_; }
  v1::Buffers::Stub& buffers() { return *buffers_; }
  uint64_t PoolUsedBytes() const { return server_->backend_stats().devices.at(0).pool_used_bytes; }
  // What the host memory budget holds now.
  uint64_t HostBudgetUsed() const { return server_->backend_stats().memory_budgets.at(0).used_bytes; }
  // Polls until the host budget holds `bytes` (at most 10 s); what it holds then.
  uint64_t AwaitHostBudgetUsed(uint64_t bytes) const;

 private:
  TestServer(std::unique_ptr<GpuComputeServer> server, std::string host);

  std::unique_ptr<GpuComputeServer> server_;
  std::string host_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<v1::Compute::Stub> compute_;
  std::unique_ptr<v1::Buffers::Stub> buffers_;
};

}  // namespace gpucompute::test
