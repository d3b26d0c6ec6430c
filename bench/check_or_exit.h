// The benchmarks' way to stop at the first failure: print where and why, exit 1.
// A benchmark run is all or nothing, so a failed call ends it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"

#define CHECK_CUDA(expr)                                                                   \
  do {                                                                                     \
    cudaError_t _e = (expr);                                                               \
    if (_e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

#define CHECK_OK(expr)                                                                     \
  do {                                                                                     \
    absl::Status _s = (expr);                                                              \
    if (!_s.ok()) {                                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, _s.ToString().c_str()); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
