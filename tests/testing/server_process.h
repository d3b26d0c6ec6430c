// The real server binary as a child process, for tests of what only the process
// does (signals, exit status, its own memory): its stdout and stderr are read
// through one pipe, and it is killed if a test leaves it running.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace gpucompute::test {

class ServerProcess {
 public:
  // Runs `binary` with `flags`.
  ServerProcess(const std::string& binary, std::vector<std::string> flags);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // The ports the server logs once it serves ("... (port N), metrics on ...
  // (port M)"); 0 for each it did not report within `timeout`.
  struct Ports {
    int grpc = 0;
    int metrics = 0;
  };
  Ports WaitUntilServing(absl::Duration timeout = absl::Seconds(60));

  // The first output line containing `text`; nullopt when the output ends or
  // `timeout` passes first.
  std::optional<std::string> WaitForLine(const std::string& text, absl::Duration timeout);
  // The exit status, after reading all output; -1 when the process still runs
  // after `timeout` or was killed by a signal.
  int WaitForExit(absl::Duration timeout);
  void Signal(int signal_number) const;
  // Resident memory from /proc/PID/status, bytes; 0 once it is gone.
  uint64_t ResidentBytes() const;

  const std::string& output() const { return output_; }

 private:
  // False at the end of the output or at `deadline`.
  bool ReadMore(absl::Time deadline);

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
};

// Flags for a CPU-backend server on a free loopback port with no metrics
// endpoint, then `extra`.
std::vector<std::string> LoopbackCpuFlags(std::vector<std::string> extra = {});

}  // namespace gpucompute::test
