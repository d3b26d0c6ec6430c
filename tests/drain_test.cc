// SIGTERM with --drain_delay, on the real process: health reads NOT_SERVING on a
// NEW connection while the port still accepts (before, the listener closed at
// once and such a probe got "connection refused"), then the process exits 0.
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using grpc::health::v1::HealthCheckResponse;

// A health Check on a fresh channel (a new connection): its status, or the error.
absl::StatusOr<HealthCheckResponse::ServingStatus> CheckOnNewConnection(int port) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest request;
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response.status();
}

// A Normalize on a fresh channel: its final status.
grpc::Status NormalizeOnNewConnection(int port) {
  auto stub = v1::Compute::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                       grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::NormalizeRequest request;
  *request.mutable_input() = test::Operand(test::F64({3.0, 4.0}, {1, 2}));
  auto reader = stub->Normalize(&context, request);
  v1::ResultChunk chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

std::vector<std::string> Flags(absl::Duration drain_delay) {
  return test::LoopbackCpuFlags(
      {"--grace_period=5s", absl::StrCat("--drain_delay=", absl::FormatDuration(drain_delay))});
}

TEST(DrainTest, DuringTheDrainDelayNewConnectionsReadNotServingThenTheProcessExitsZero) {
  constexpr absl::Duration kDelay = absl::Seconds(3);
  test::ServerProcess process(GPUCOMPUTE_SERVER_PATH, Flags(kDelay));
  const int port = process.WaitUntilServing().grpc;
  ASSERT_GT(port, 0) << process.output();
  auto serving = CheckOnNewConnection(port);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_EQ(*serving, HealthCheckResponse::SERVING);

  process.Signal(SIGTERM);
  const absl::Time signalled = absl::Now();
  ASSERT_TRUE(process.WaitForLine("draining: health NOT_SERVING", absl::Seconds(2)).has_value())
      << process.output();
  auto draining = CheckOnNewConnection(port);
  ASSERT_TRUE(draining.ok()) << draining.status();
  EXPECT_EQ(*draining, HealthCheckResponse::NOT_SERVING);
  const grpc::Status refused = NormalizeOnNewConnection(port);
  EXPECT_EQ(refused.error_code(), grpc::UNAVAILABLE) << refused.error_message();
  EXPECT_LT(absl::Now() - signalled, kDelay) << "checks ran past the delay; the test is too slow";

  EXPECT_EQ(process.WaitForExit(absl::Seconds(30)), 0) << process.output();
  EXPECT_GE(absl::Now() - signalled, kDelay);
}

TEST(DrainTest, ASecondSignalCutsTheDrainDelayShort) {
  test::ServerProcess process(GPUCOMPUTE_SERVER_PATH, Flags(absl::Seconds(120)));
  ASSERT_GT(process.WaitUntilServing().grpc, 0) << process.output();
  process.Signal(SIGTERM);
  ASSERT_TRUE(process.WaitForLine("draining: health NOT_SERVING", absl::Seconds(2)).has_value());
  process.Signal(SIGTERM);
  EXPECT_EQ(process.WaitForExit(absl::Seconds(30)), 0) << process.output();
}

}  // namespace
}  // namespace gpucompute
