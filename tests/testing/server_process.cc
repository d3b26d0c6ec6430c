#include "tests/testing/server_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace gpucompute::test {

ServerProcess::ServerProcess(const std::string& binary, std::vector<std::string> flags) {
  flags.insert(flags.begin(), binary);
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
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  output_fd_ = fds[0];
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (output_fd_ >= 0) close(output_fd_);
}

ServerProcess::Ports ServerProcess::WaitUntilServing(absl::Duration timeout) {
  const std::optional<std::string> line = WaitForLine("serving gRPC on", timeout);
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

std::optional<std::string> ServerProcess::WaitForLine(const std::string& text,
                                                      absl::Duration timeout) {
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

int ServerProcess::WaitForExit(absl::Duration timeout) {
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

void ServerProcess::Signal(int signal_number) const {
  if (pid_ > 0) kill(pid_, signal_number);
}

uint64_t ServerProcess::ResidentBytes() const {
  std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    // "VmRSS:    123456 kB"
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    uint64_t kib = 0;
    if (fields.size() >= 2 && absl::SimpleAtoi(fields[1], &kib)) return kib << 10;
  }
  return 0;
}

bool ServerProcess::ReadMore(absl::Time deadline) {
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

std::vector<std::string> LoopbackCpuFlags(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--address=127.0.0.1:0", "--metrics_address=", "--backend=cpu"});
  return extra;
}

}  // namespace gpucompute::test
