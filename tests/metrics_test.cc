// Scrapes /metrics over HTTP after a known sequence of requests and checks the
// exact counts, and that histogram counts match the requests made.
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;

// "name{labels}" -> value, for every sample line.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config = test::LoopbackConfigWithMetrics();
    auto server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    ASSERT_GT(server_->server().metrics_port(), 0);
    client_ = &server_->client();
  }

  double Sample(const std::map<std::string, double>& samples, const std::string& key) {
    auto it = samples.find(key);
    EXPECT_NE(it, samples.end()) << "missing series " << key;
    return it == samples.end() ? -1 : it->second;
  }

  std::unique_ptr<test::TestServer> server_;
  client::Client* client_ = nullptr;
};

TEST_F(MetricsTest, CountsMatchAKnownSequenceOfRequests) {
  const v1::Tensor row = test::F64({1, 2, 3, 4}, {4});  // 32 bytes of float64
  v1::NormalizeRequest good;
  *good.mutable_input()->mutable_tensor() = row;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client_->Normalize(good).ok());
  v1::NormalizeRequest bad;
  *bad.mutable_input()->mutable_tensor() = test::F64({0, 0}, {2});
  ASSERT_EQ(client_->Normalize(bad).status().code(), absl::StatusCode::kInvalidArgument);
  auto uploaded = client_->Upload("u", row);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status().message();
  ASSERT_TRUE(client_->Download(uploaded->id()).ok());
  ASSERT_TRUE(client_->GetInfo().ok());

  const std::string text = test::ScrapeMetricsBody(server_->server().metrics_port());
  ASSERT_FALSE(text.empty());
  const auto samples = ParseSamples(text);

  const std::string normalize_rpc =
      R"(grpc_method="Normalize",grpc_service="gpucompute.v1.Compute",grpc_type="server_stream")";
  EXPECT_EQ(Sample(samples, "grpc_server_started_total{" + normalize_rpc + "}"), 4);
  EXPECT_EQ(Sample(samples, R"(grpc_server_handled_total{grpc_code="OK",)" + normalize_rpc + "}"), 3);
  EXPECT_EQ(Sample(samples, R"(grpc_server_handled_total{grpc_code="INVALID_ARGUMENT",)" +
                                normalize_rpc + "}"),
            1);
  EXPECT_EQ(Sample(samples, "grpc_server_handling_seconds_count{" + normalize_rpc + "}"), 4);
  EXPECT_EQ(Sample(samples, R"(grpc_server_handled_total{grpc_code="OK",grpc_method="GetInfo",grpc_service="gpucompute.v1.Server",grpc_type="unary"})"),
            1);

  EXPECT_EQ(Sample(samples, R"(gpucompute_requests_total{grpc_code="OK",operation="normalize"})"), 3);
  EXPECT_EQ(Sample(samples,
                   R"(gpucompute_requests_total{grpc_code="INVALID_ARGUMENT",operation="normalize"})"),
            1);
  EXPECT_EQ(Sample(samples, R"(gpucompute_requests_total{grpc_code="OK",operation="upload"})"), 1);
  EXPECT_EQ(Sample(samples, R"(gpucompute_requests_total{grpc_code="OK",operation="download"})"), 1);
  EXPECT_EQ(Sample(samples, R"(gpucompute_request_duration_seconds_count{operation="normalize"})"), 4);
  for (const char* stage : {"queue", "transfer_in", "compute", "transfer_out", "stream_write"}) {
    EXPECT_EQ(Sample(samples, absl::StrCat(R"(gpucompute_stage_duration_seconds_count{operation="normalize",stage=")",
                                           stage, "\"}")),
              3)
        << stage;
  }
  EXPECT_EQ(Sample(samples, R"(gpucompute_requests_in_flight{operation="normalize"})"), 0);
  // 4 inline normalize inputs (3 x 32 + 16 bytes) and one 32-byte upload went in.
  EXPECT_EQ(Sample(samples, R"(gpucompute_transfer_bytes_total{direction="host_to_device"})"),
            3 * 32 + 16 + 32);
  // 3 results of 32 bytes and the 32-byte download came out.
  EXPECT_EQ(Sample(samples, R"(gpucompute_transfer_bytes_total{direction="device_to_host"})"),
            4 * 32);
  EXPECT_EQ(Sample(samples, "gpucompute_network_sent_bytes_total"), 4 * 32);
  EXPECT_EQ(Sample(samples, "gpucompute_stored_buffers"), 1);
  EXPECT_EQ(Sample(samples, "gpucompute_stored_buffer_bytes"), 32);
  EXPECT_EQ(Sample(samples, R"(gpucompute_rejections_total{reason="queue_full"})"), 0);
  EXPECT_THAT(text, ::testing::HasSubstr("gpucompute_build_info{backend=\"cpu\""));
  EXPECT_EQ(Sample(samples, R"(gpucompute_device_healthy{device="cpu"})"), 1);
}

TEST(MetricsAuthTest, BasicAuthGuardsTheEndpoint) {
  const std::string path = ::testing::TempDir() + "/metrics-users.txt";
  // "prom" with password "secret", stored as its SHA-256.
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("prom sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\n", f);
  std::fclose(f);
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.metrics_basic_auth_file = path;
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->server().metrics_port();
  EXPECT_THAT(test::ScrapeMetrics(port), ::testing::StartsWith("HTTP/1.1 401"));
  // base64("prom:wrong") and base64("prom:secret")
  EXPECT_THAT(test::ScrapeMetrics(port, "Authorization: Basic cHJvbTp3cm9uZw==\r\n"),
              ::testing::StartsWith("HTTP/1.1 401"));
  const std::string ok = test::ScrapeMetrics(port, "Authorization: Basic cHJvbTpzZWNyZXQ=\r\n");
  EXPECT_THAT(ok, ::testing::StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(ok, ::testing::HasSubstr("gpucompute_build_info"));
}

}  // namespace
}  // namespace gpucompute
