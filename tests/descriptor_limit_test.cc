// The server process under a small open-file limit (prlimit): registered
// shared-memory regions hold no file descriptor, and once the listener fails
// to accept for want of descriptors, health reads NOT_SERVING on the
// connections the server still has, until new clients can connect again.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace gpucompute {
namespace {

using grpc::health::v1::HealthCheckResponse;

constexpr int kOpenFileLimit = 256;

// The server binary under `prlimit --nofile=kOpenFileLimit` (soft and hard, so
// that the server cannot raise it).
std::unique_ptr<test::ServerProcess> StartLimited(std::vector<std::string> extra) {
  std::vector<std::string> flags = {absl::StrCat("--nofile=", kOpenFileLimit, ":", kOpenFileLimit),
                                    GPUCOMPUTE_SERVER_PATH};
  for (std::string& flag : test::LoopbackCpuFlags(std::move(extra))) flags.push_back(flag);
  return std::make_unique<test::ServerProcess>("/usr/bin/prlimit", std::move(flags));
}

TEST(DescriptorLimitTest, RegionsHoldNoFileDescriptors) {
  auto process = StartLimited({"--allow_shared_memory", "--max_shared_memory_regions_per_owner=0"});
  const int port = process->WaitUntilServing().grpc;
  ASSERT_GT(port, 0) << process->output();
  const std::string key = absl::StrCat("/gpucompute-descriptors-", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  client::Client client(client::MakeChannel(absl::StrCat("127.0.0.1:", port)));
  int registered = 0;
  for (; registered < 2 * kOpenFileLimit; ++registered) {
    auto region = client.RegisterSystemSharedMemory("many", key, 0, 4096);
    if (!region.ok()) {
      ADD_FAILURE() << "registration " << registered << ": " << region.status().message();
      break;
    }
  }
  EXPECT_EQ(registered, 2 * kOpenFileLimit);
  // New connections are still accepted.
  client::Client fresh(client::MakeChannel(absl::StrCat("localhost:", port)));
  EXPECT_TRUE(fresh.GetInfo().ok());
  shm_unlink(key.c_str());
}

TEST(DescriptorLimitTest, OutOfDescriptorsHealthIsNotServingUntilNewClientsConnectAgain) {
  auto process = StartLimited({"--allow_shared_memory"});
  const int port = process->WaitUntilServing().grpc;
  ASSERT_GT(port, 0) << process->output();
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  auto check = [&health] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    HealthCheckResponse response;
    const grpc::Status status = health->Check(&context, {}, &response);
    return status.ok() ? response.status() : HealthCheckResponse::UNKNOWN;
  };
  ASSERT_EQ(check(), HealthCheckResponse::SERVING);
  // More connections than the server has descriptors.
  std::vector<int> sockets;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  for (int i = 0; i < 2 * kOpenFileLimit; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockets.push_back(fd);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::SERVING;
  for (int i = 0; i < 50 && status == HealthCheckResponse::SERVING; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    status = check();
  }
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING) << process->output();
  for (int fd : sockets) close(fd);
  // The descriptors come back: the server accepts again and says so.
  for (int i = 0; i < 100 && status != HealthCheckResponse::SERVING; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    status = check();
  }
  EXPECT_EQ(status, HealthCheckResponse::SERVING) << process->output();
  client::Client fresh(client::MakeChannel(absl::StrCat("127.0.0.1:", port)));
  auto info = fresh.GetInfo();
  EXPECT_TRUE(info.ok()) << info.status().message() << "\n" << process->output();
  // Shared memory still knows who a connection taken this way is.
  const std::string key = absl::StrCat("/gpucompute-descriptors-after-", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  auto region = fresh.RegisterSystemSharedMemory("after", key, 0, 4096);
  EXPECT_TRUE(region.ok()) << region.status().message();
  shm_unlink(key.c_str());
}

}  // namespace
}  // namespace gpucompute
