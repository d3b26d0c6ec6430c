// Benchmarks and tests only (bench/gpu_kernels_bench.cc, bench/gpu_lombscargle_bench.cc,
// tests/gpu_lombscargle_variants_test.cc): the Lomb-Scargle launch with a forced launch
// policy, to compare the one LaunchLombScargle picks by size with the others. The
// backend never calls this.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {

// `variant` in [0, LombScargleVariantCount(dtype)). float32: 0 = 8 frequencies per
// thread, 1 = 4; float64: 0 = 4 per thread, 1 = 8 on 128-thread blocks, 2 = 3, 3 = 5,
// 0-2 with the 512-angle sin/cos table in 8 copies, 3 with the 2048-angle table in 2,
// 4 = 5 per thread with the 512-angle table (sincos_table.cuh, lombscargle.cu); then the
// small-problem path's (lombscargle_small.cu), from float32 2 and float64 5: 8 warps
// splitting the samples of 32 frequencies (LaunchLombScargle's), 4 warps, and 8 warps
// for 64 (2 per lane).
inline constexpr int kLombScargleSmallVariants = 3;
cudaError_t LaunchLombScargleVariant(DType dtype, const LombScargleArgs& args,
                                     LombScargleResult* result, const LaunchEnv& env, int variant);
int LombScargleVariantCount(DType dtype);
// The variant LaunchLombScargle picks; small_path = false: the one it picked before the
// small-problem path (bench/gpu_lombscargle_bench.cc --small compares the two).
int LombScargleDefaultVariant(DType dtype, const LombScargleArgs& args, const LaunchEnv& env,
                              bool small_path);

}  // namespace gpucompute::cuda
