// Benchmark only (bench/gpu_kernels_bench.cc): the Lomb-Scargle launch with a forced
// launch policy, to compare the one LaunchLombScargle picks by size with the other.
// The backend never calls this.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {

// `variant` in [0, LombScargleVariantCount(dtype)). float32: 0 = 8 frequencies per
// thread, 1 = 4; float64: 0 = 4 per thread, 1 = 8 on 128-thread blocks, 2 = 3, 3 = 5,
// 0-2 with the 512-angle sin/cos table in 8 copies, 3 with the 2048-angle table in 2,
// 4 = 5 per thread with the 512-angle table (sincos_table.cuh, lombscargle.cu).
cudaError_t LaunchLombScargleVariant(DType dtype, const LombScargleArgs& args,
                                     LombScargleResult* result, const LaunchEnv& env, int variant);
int LombScargleVariantCount(DType dtype);

}  // namespace gpucompute::cuda
