#include "tests/testing/server_fixture.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "tests/testing/eventually.h"

namespace gpucompute::test {
namespace {
constexpr std::chrono::seconds kConnectTimeout{10};
}  // namespace

std::string DistinctBytes(uint64_t bytes) {
  std::string data(bytes, '\0');
  for (uint64_t i = 0; i < bytes / 4; ++i) {
    const uint32_t v = static_cast<uint32_t>(i * 2654435761u);
    std::memcpy(data.data() + i * 4, &v, 4);
  }
  return data;
}

ServerConfig LoopbackConfig() {
  ServerConfig config;
  config.address = "127.0.0.1:0";
  config.metrics_address = "";
  config.backend.kind = BackendKind::kCpu;
  return config;
}

bool OnCuda() {
  const char* backend = std::getenv("GPUCOMPUTE_TEST_BACKEND");
  return backend != nullptr && std::string(backend) == "cuda";
}

void ServerOnTestBackendTest::SetUp() {
  ServerConfig config = LoopbackConfig();
  if (OnCuda()) config.backend.kind = BackendKind::kCuda;
  auto server = TestServer::Start(config);
  if (OnCuda() && !server.ok()) GTEST_SKIP() << server.status().message();
  ASSERT_TRUE(server.ok()) << server.status().message();
  server_ = *std::move(server);
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
  const std::string host = config.address.substr(0, config.address.rfind(':'));
  std::unique_ptr<TestServer> test_server(new TestServer(std::move(server), host));
  // Connected before the test's first call, so that no call's deadline is spent on the
  // connection: a 300 ms call (RpcOutcomeMetricsTest) once expired on a loaded 2-core CI
  // runner before the server had seen it. The channel is plaintext: a TLS server's tests
  // make their own.
  const bool plaintext = config.security.tls_cert_file.empty();
  if (plaintext && !test_server->channel_->WaitForConnected(std::chrono::system_clock::now() + kConnectTimeout)) {
    return absl::UnavailableError(absl::StrCat("the test channel to ", test_server->target(), " did not connect within ",
                                               absl::FormatDuration(absl::FromChrono(kConnectTimeout))));
  }
  return test_server;
}

TestServer::TestServer(std::unique_ptr<GpuComputeServer> server, std::string host)
    : server_(std::move(server)),
      host_(std::move(host)),
      channel_(client::MakeChannel(target())),
      client_(std::make_unique<client::Client>(channel_)),
      compute_(v1::Compute::NewStub(channel_)),
      buffers_(v1::Buffers::NewStub(channel_)) {}

std::string TestServer::target() const { return absl::StrCat(host_, ":", server_->port()); }

uint64_t TestServer::AwaitHostBudgetUsed(uint64_t bytes) const {
  return EventuallyEquals([this] { return HostBudgetUsed(); }, bytes);
}

}  // namespace gpucompute::test
