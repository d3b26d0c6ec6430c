// SIGTERM with --drain_delay, on the real process: health reads NOT_SERVING on a
// NEW connection while the port still accepts (before, the listener closed at
// once and such a probe got "connection refused"), then the process exits 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A client that holds a connection open and idle, and never closes it after the
// GOAWAY, does not hold the drain for the whole grace period.
TEST(DrainTest, AnIdleConnectionDoesNotHoldTheDrainForTheGracePeriod) {
  test::ServerProcess process(GPUCOMPUTE_SERVER_PATH,
                              test::LoopbackCpuFlags({"--grace_period=20s"}));
  const int port = process.WaitUntilServing().grpc;
  ASSERT_GT(port, 0) << process.output();
  // An HTTP/2 client preface and SETTINGS, then silence.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                              std::string("\0\0\0\x04\0\0\0\0\0", 9);
  ASSERT_EQ(send(fd, preface.data(), preface.size(), 0), static_cast<ssize_t>(preface.size()));
  absl::SleepFor(absl::Milliseconds(200));
  process.Signal(SIGTERM);
  const absl::Time signalled = absl::Now();
  EXPECT_EQ(process.WaitForExit(absl::Seconds(30)), 0) << process.output();
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(10));
  close(fd);
}

}  // namespace
}  // namespace gpucompute
