#include "tests/testing/server_fixture.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/impl/codegen/grpc_library.h"

namespace gpucompute::test {

std::string DistinctBytes(uint64_t bytes) {
  std::string data(bytes, '\0');
  for (uint64_t i = 0; i < bytes / 4; ++i) {
    const uint32_t v = static_cast<uint32_t>(i * 2654435761u);
    std::memcpy(data.data() + i * 4, &v, 4);
  }
  return data;
}

void KeepGrpcInitialized() {
  static const auto* const kept = new grpc::GrpcLibraryCodegen();
  (void)kept;
}

ServerConfig LoopbackConfig() {
  ServerConfig config;
  config.address = "127.0.0.1:0";
  config.metrics_address = "";
  config.backend.kind = BackendKind::kCpu;
  return config;
}

ServerConfig LoopbackConfigWithMetrics() {
  ServerConfig config = LoopbackConfig();
  config.metrics_address = "127.0.0.1:0";
  return config;
}

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::Start(
    const ServerConfig& config, std::optional<BackendSelection> backend) {
  GC_ASSIGN_OR_RETURN(std::unique_ptr<GpuComputeServer> server,
                      backend.has_value() ? GpuComputeServer::Start(config, *std::move(backend))
                                          : GpuComputeServer::Start(config));
  return std::unique_ptr<TestServer>(new TestServer(std::move(server)));
}

TestServer::TestServer(std::unique_ptr<GpuComputeServer> server)
    : server_(std::move(server)),
      channel_(client::MakeChannel(target())),
      client_(std::make_unique<client::Client>(channel_)),
      compute_(v1::Compute::NewStub(channel_)),
      buffers_(v1::Buffers::NewStub(channel_)) {}

std::string TestServer::target() const { return absl::StrCat("127.0.0.1:", server_->port()); }

}  // namespace gpucompute::test
