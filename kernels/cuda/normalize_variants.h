// The normalize launch with a forced policy, for the benchmark (to compare the
// default, which reads rows that fit in shared memory once, with the paths that read
// every row twice) and the tests (both policies against the reference). The backend
// calls LaunchNormalize, which is kDefault.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {

enum class NormalizeVariant {
  kDefault = 0,   // one read where the row fits in a block's shared memory, else chunks
  kTwoReads = 1,  // lane groups (rows <= 4096) or chunks, every row read twice
  kCluster = 2,   // kDefault, and on sm_90 rows up to 8 blocks' shared memory over a
                  // thread-block cluster (one read) instead of chunks
};

// What `variant` runs for this shape on the current device (for the benchmark's log).
std::string DescribeNormalizePolicy(DType dtype, int64_t rows, int64_t cols, NormalizeVariant variant);

cudaError_t LaunchNormalizeVariant(DType dtype, const void* in, void* out, int64_t rows,
                                   int64_t cols, NormKind norm, NormalizeResult* result,
                                   const LaunchEnv& env, NormalizeVariant variant);

}  // namespace gpucompute::cuda
