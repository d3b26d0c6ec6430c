// A test server whose backend has faults injected (kernels/fault_injection.h).
#pragma once

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/fault_injection.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute::test {

// A TestServer on a two-thread CPU backend that `faults` act on.
inline absl::StatusOr<std::unique_ptr<TestServer>> StartWithFaults(
    const ServerConfig& config, std::shared_ptr<InjectedFaults> faults) {
  return TestServer::Start(config, BackendSelection{WithInjectedFaults(CreateCpuBackend(2),
                                                                       std::move(faults)),
                                                    "cpu: fault injection"});
}

}  // namespace gpucompute::test
