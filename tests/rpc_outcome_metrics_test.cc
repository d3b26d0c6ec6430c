// The grpc_server_* and gpucompute_requests_total families, read over HTTP from
// /metrics: a client's expired deadline counts as DEADLINE_EXCEEDED (the server
// only sees a cancellation), and health calls are counted too.
#include <chrono>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "kernels/testing/fault_injection.h"
#include "tests/testing/eventually.h"
#include "tests/testing/faulty_server.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

// The value of the sample of `family` whose labels include every `labels`
// pair (written k="v"); -1 when there is none.
double Sample(const std::string& text, const std::string& family,
              std::initializer_list<std::string> labels) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!absl::StartsWith(line, family + "{")) continue;
    bool all = true;
    for (const std::string& label : labels) all = all && absl::StrContains(line, label);
    double value = 0;
    if (all && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) return value;
  }
  return -1;
}

class RpcOutcomeMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config = test::LoopbackConfigWithMetrics();
    config.grace_period = absl::Seconds(5);
    auto server = test::StartWithFaults(config, faults_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }

  std::string Metrics() const { return test::ScrapeMetricsBody(server_->server().metrics_port()); }

  // Scrapes until `family{labels}` reads `value`, within 10 s; the last value read.
  double ScrapeUntil(const std::string& family, std::initializer_list<std::string> labels,
                     double value) {
    return test::EventuallyEquals([&] { return Sample(Metrics(), family, labels); }, value);
  }

  std::shared_ptr<InjectedFaults> faults_ = std::make_shared<InjectedFaults>();
  std::unique_ptr<test::TestServer> server_;
};

TEST_F(RpcOutcomeMetricsTest, ExpiredDeadlineCountsAsDeadlineExceeded) {
  // The device hangs until the client's deadline has passed.
  faults_->PauseOperations();
  v1::NormalizeRequest request;
  *request.mutable_input() = test::Operand(test::F64(std::vector<double>(8, 2.0), {8}));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  auto reader = server_->compute().Normalize(&context, request);
  v1::ResultChunk chunk;
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::DEADLINE_EXCEEDED);
  faults_->ResumeOperations();

  EXPECT_EQ(ScrapeUntil("grpc_server_handled_total",
                        {"grpc_code=\"DEADLINE_EXCEEDED\"", "grpc_method=\"Normalize\""}, 1),
            1);
  // Never counted: no series at all (-1), or 0.
  EXPECT_LE(Sample(Metrics(), "grpc_server_handled_total",
                   {"grpc_code=\"CANCELLED\"", "grpc_method=\"Normalize\""}),
            0);
  EXPECT_EQ(Sample(Metrics(), "gpucompute_requests_total",
                   {"grpc_code=\"DEADLINE_EXCEEDED\"", "operation=\"normalize\""}),
            1);
}

TEST_F(RpcOutcomeMetricsTest, HealthChecksAreCounted) {
  auto health = grpc::health::v1::Health::NewStub(server_->channel());
  for (const char* service : {"", "", "no.such.Service"}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    health->Check(&context, request, &response);
  }
  const std::string health_check = "grpc_service=\"grpc.health.v1.Health\"";
  EXPECT_EQ(ScrapeUntil("grpc_server_handled_total",
                        {health_check, "grpc_method=\"Check\"", "grpc_code=\"NOT_FOUND\""}, 1),
            1);
  const std::string text = Metrics();
  EXPECT_EQ(Sample(text, "grpc_server_started_total", {health_check, "grpc_method=\"Check\""}), 3);
  EXPECT_EQ(Sample(text, "grpc_server_handled_total",
                   {health_check, "grpc_method=\"Check\"", "grpc_code=\"OK\""}),
            2);
  EXPECT_EQ(Sample(text, "grpc_server_handling_seconds_count",
                   {health_check, "grpc_method=\"Check\""}),
            3);
}

}  // namespace
}  // namespace gpucompute
