// Whether a CUDA device is visible, for GPU tests that skip cleanly without one
// (REQUIRE_GPU). Header-only: included by tests/gpu_*_test.cc and dev/cuda's tests,
// which are built with CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace gpucompute::test {

inline bool GpuPresent() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();  // a failed query leaves no sticky error behind
  return ok;
}

}  // namespace gpucompute::test

// Skips the test (returns from it) where no CUDA device is visible.
#define REQUIRE_GPU()                                                         \
  do {                                                                        \
    if (!::gpucompute::test::GpuPresent()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)
