// The direct Lomb-Scargle policies by index (lombscargle_candidates.cu), the shipped ones
// (kernels/cuda/lombscargle.cu: PolicyFor) and the candidates, for lombscargle_lab and
// gpu_lombscargle_variants_test.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::lab {

// `variant` in [0, LombScargleVariantCount(dtype)). float32: 0 = 8 frequencies per
// thread, 1 = 4; float64: 0 = 4 per thread, 1 = 8 on 128-thread blocks, 2 = 3, 3 = 5,
// 0-2 with the 512-angle sin/cos table in 8 copies, 3 with the 2048-angle table in 2,
// 4 = 5 per thread with the 512-angle table (a candidate); then the small-problem
// path's, from float32 2 and float64 5: 8 warps splitting the samples of 32 frequencies
// (shipped), 4 warps, and 8 warps for 64 (2 per lane) (candidates).
inline constexpr int kLombScargleSmallVariants = 3;
cudaError_t LaunchLombScargleVariant(DType dtype, const LombScargleArgs& args,
                                     LombScargleResult* result, const LaunchEnv& env, int variant);
int LombScargleVariantCount(DType dtype);
// The variant LaunchLombScargle picks; small_path = false: the one it would pick without
// the small-problem path (lombscargle_lab --small compares the two).
int LombScargleDefaultVariant(DType dtype, const LombScargleArgs& args, const LaunchEnv& env,
                              bool small_path);

}  // namespace gpucompute::cuda::lab
