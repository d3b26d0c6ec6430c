// A test server whose backend has faults injected (kernels/testing/fault_injection.h).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/fault_injection.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute::test {

// A TestServer on `backend` (by default a two-thread CPU backend) that `faults`
// act on. No request runs in place (ServerConfig::in_place_work): an operation
// the faults hold (PauseOperations) must hold neither the gRPC thread it came on
// nor its session's reads, as it may on a server that runs tiny requests there.
inline absl::StatusOr<std::unique_ptr<TestServer>> StartWithFaults(
    ServerConfig config, std::shared_ptr<InjectedFaults> faults,
    std::unique_ptr<Backend> backend = CreateCpuBackend(2), const std::string& note = "cpu") {
  config.in_place_work = 0;
  return TestServer::Start(config, BackendSelection{WithInjectedFaults(std::move(backend),
                                                                       std::move(faults)),
                                                    note + ": fault injection"});
}

}  // namespace gpucompute::test
