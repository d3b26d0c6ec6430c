// What a newcomer meets when starting the real server binary: a busy port is a
// start-up error, --help lists the server's flags, the log says which backend
// serves and why.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test::ServerProcess;

// gRPC binds with SO_REUSEPORT unless told not to: the second server used to
// start and split the traffic with the first.
TEST(StartupTest, BusyGrpcPortIsAStartUpErrorNamingIt) {
  ServerProcess first(GPUCOMPUTE_SERVER_PATH, test::LoopbackCpuFlags());
  const int port = first.WaitUntilServing().grpc;
  ASSERT_GT(port, 0) << first.output();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ServerProcess second(GPUCOMPUTE_SERVER_PATH,
                       {"--address=" + address, "--metrics_address=", "--backend=cpu"});
  EXPECT_EQ(second.WaitForExit(absl::Seconds(30)), 1) << second.output();
  EXPECT_THAT(second.output(), HasSubstr(absl::StrCat("cannot listen on address ", address)));
}

TEST(StartupTest, BusyMetricsPortIsAStartUpErrorNamingIt) {
  ServerProcess first(GPUCOMPUTE_SERVER_PATH, {"--address=127.0.0.1:0",
                                               "--metrics_address=127.0.0.1:0", "--backend=cpu"});
  const int port = first.WaitUntilServing().metrics;
  ASSERT_GT(port, 0) << first.output();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ServerProcess second(GPUCOMPUTE_SERVER_PATH,
                       {"--address=127.0.0.1:0", "--metrics_address=" + address, "--backend=cpu"});
  EXPECT_EQ(second.WaitForExit(absl::Seconds(30)), 1) << second.output();
  EXPECT_THAT(second.output(), HasSubstr(absl::StrCat("metrics_address ", address)));
}

// Plain --help used to print "No flags matched" and exit 1.
TEST(StartupTest, HelpListsTheServerFlagsWithDefaultsAndExitsZero) {
  ServerProcess help(GPUCOMPUTE_SERVER_PATH, {"--help"});
  EXPECT_EQ(help.WaitForExit(absl::Seconds(30)), 0) << help.output();
  EXPECT_THAT(help.output(), HasSubstr("--address (gRPC listen address"));
  EXPECT_THAT(help.output(), HasSubstr("default: \"localhost:50051\""));
  EXPECT_THAT(help.output(), HasSubstr("--max_queue_depth ("));
  EXPECT_THAT(help.output(), HasSubstr("default: 256;"));
  EXPECT_THAT(help.output(), Not(HasSubstr("No flags matched")));
}

// Without a GPU, the log says so in plain words (a CUDA build used to lead with
// "CUDA driver version is insufficient").
TEST(StartupTest, WithoutAGpuTheLogSaysTheCpuBackendServes) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       {"--address=127.0.0.1:0", "--metrics_address=", "--backend=auto"});
  const std::optional<std::string> line = server.WaitForLine("backend ", absl::Seconds(60));
  ASSERT_TRUE(line.has_value()) << server.output();
  if (line->find("backend cuda") != std::string::npos) GTEST_SKIP() << "a GPU serves: " << *line;
#ifdef GPUCOMPUTE_HAVE_CUDA
  EXPECT_THAT(*line, HasSubstr("backend cpu (cpu: no GPU found, the CPU backend serves (CUDA: "));
#else
  EXPECT_THAT(*line, HasSubstr("backend cpu (cpu: auto, this build has no CUDA backend)"));
#endif
}

}  // namespace
}  // namespace gpucompute
