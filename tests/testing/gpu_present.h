// Whether a CUDA device is visible, for GPU tests that skip cleanly without one.
// Header-only: included by tests/gpu_*_test.cc, which are built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

namespace gpucompute::test {

inline bool GpuPresent() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();  // a failed query leaves no sticky error behind
  return ok;
}

}  // namespace gpucompute::test
