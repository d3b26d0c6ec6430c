// What a newcomer meets when starting the real server binary: a busy port is a
// start-up error, --help lists the server's flags, the log says which backend
// serves and why.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The server binary with `flags`; its stdout and stderr are read through one
// pipe. Killed if a test leaves it running.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> flags) {
    flags.insert(flags.begin(), GPUCOMPUTE_SERVER_PATH);
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (std::string& flag : flags) argv.push_back(flag.data());
      argv.push_back(nullptr);
      execv(GPUCOMPUTE_SERVER_PATH, argv.data());
      _exit(127);
    }
    close(fds[1]);
    output_fd_ = fds[0];
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (output_fd_ >= 0) close(output_fd_);
  }

  // The first output line containing `text`; nullopt when the output ends or
  // `timeout` passes first.
  std::optional<std::string> WaitForLine(const std::string& text, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const size_t found = output_.find(text);
      if (found != std::string::npos) {
        const size_t begin = output_.rfind('\n', found);
        const size_t end = output_.find('\n', found);
        if (end != std::string::npos) {
          const size_t from = begin == std::string::npos ? 0 : begin + 1;
          return output_.substr(from, end - from);
        }
      }
      if (!ReadMore(deadline)) return std::nullopt;
    }
  }

  // The exit status, after reading all output; -1 when the process still runs
  // after `timeout` or was killed by a signal.
  int WaitForExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (ReadMore(deadline)) {
    }
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) return -1;
      absl::SleepFor(absl::Milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& output() const { return output_; }

 private:
  // False at the end of the output or at `deadline`.
  bool ReadMore(absl::Time deadline) {
    if (output_fd_ < 0) return false;
    pollfd fd = {output_fd_, POLLIN, 0};
    const int wait_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (wait_ms <= 0 || poll(&fd, 1, wait_ms) <= 0) return false;
    char buffer[4096];
    const ssize_t n = read(output_fd_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, n);
    return true;
  }

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
};

// The ports a started server reports: "... (port N), metrics on ... (port M)".
struct Ports {
  int grpc = 0;
  int metrics = 0;
};

Ports WaitUntilServing(ServerProcess& server) {
  const std::optional<std::string> line =
      server.WaitForLine("serving gRPC on", absl::Seconds(60));
  Ports ports;
  if (!line.has_value()) return ports;
  int* next = &ports.grpc;
  for (size_t at = line->find("(port "); at != std::string::npos && next != nullptr;
       at = line->find("(port ", at + 1)) {
    const size_t digits = at + 6;
    if (!absl::SimpleAtoi(line->substr(digits, line->find(')', digits) - digits), next)) break;
    next = next == &ports.grpc ? &ports.metrics : nullptr;
  }
  return ports;
}

// gRPC binds with SO_REUSEPORT unless told not to: the second server used to
// start and split the traffic with the first.
TEST(StartupTest, BusyGrpcPortIsAStartUpErrorNamingIt) {
  ServerProcess first({"--address=127.0.0.1:0", "--metrics_address=", "--backend=cpu"});
  const int port = WaitUntilServing(first).grpc;
  ASSERT_GT(port, 0) << first.output();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ServerProcess second({"--address=" + address, "--metrics_address=", "--backend=cpu"});
  EXPECT_EQ(second.WaitForExit(absl::Seconds(30)), 1) << second.output();
  EXPECT_THAT(second.output(), HasSubstr(absl::StrCat("cannot listen on address ", address)));
}

TEST(StartupTest, BusyMetricsPortIsAStartUpErrorNamingIt) {
  ServerProcess first({"--address=127.0.0.1:0", "--metrics_address=127.0.0.1:0", "--backend=cpu"});
  const int port = WaitUntilServing(first).metrics;
  ASSERT_GT(port, 0) << first.output();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ServerProcess second({"--address=127.0.0.1:0", "--metrics_address=" + address, "--backend=cpu"});
  EXPECT_EQ(second.WaitForExit(absl::Seconds(30)), 1) << second.output();
  EXPECT_THAT(second.output(), HasSubstr(absl::StrCat("metrics_address ", address)));
}

// Plain --help used to print "No flags matched" and exit 1.
TEST(StartupTest, HelpListsTheServerFlagsWithDefaultsAndExitsZero) {
  ServerProcess help({"--help"});
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
  ServerProcess server({"--address=127.0.0.1:0", "--metrics_address=", "--backend=auto"});
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
