// The direct Lomb-Scargle policies by index: the shipped ones again (as policy structs of
// the same values, so that any can be forced at any size) and the candidates that lost,
// on the shipped kernels' templates (kernels/cuda/lombscargle_periodogram.cuh,
// lombscargle_small.cuh).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "dev/cuda/lombscargle_variants.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"
#include "kernels/cuda/lombscargle_periodogram.cuh"
#include "kernels/cuda/lombscargle_small.cuh"

namespace gpucompute::cuda::lab {
namespace {

using namespace lombscargle;

template <typename T, int kVariant>
struct PeriodogramPolicy;

template <>
struct PeriodogramPolicy<float, 0> {
  using Table = NoTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kFreqsPerThread = 8;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
template <>
struct PeriodogramPolicy<float, 1> : PeriodogramPolicy<float, 0> {
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kFreqsPerThread = 4;
};
template <>
struct PeriodogramPolicy<double, 0> {
  using Table = ConflictFreeTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kFreqsPerThread = 4;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
template <>
struct PeriodogramPolicy<double, 1> : PeriodogramPolicy<double, 0> {
  static constexpr int kThreads = 128;
  static constexpr int kFreqsPerThread = 8;
  static constexpr int kTile = 128;
};
template <>
struct PeriodogramPolicy<double, 2> : PeriodogramPolicy<double, 0> {
  static constexpr int kFreqsPerThread = 3;
};
template <>
struct PeriodogramPolicy<double, 3> : PeriodogramPolicy<double, 0> {
  using Table = FinerTable;
  static constexpr int kFreqsPerThread = 5;
};
// Candidate: 5 a thread on the 512-angle table (lost to the 2048-angle table at 5).
template <>
struct PeriodogramPolicy<double, 4> : PeriodogramPolicy<double, 0> {
  static constexpr int kFreqsPerThread = 5;
};
template <typename T>
constexpr int kPeriodogramVariants = std::is_same_v<T, float> ? 2 : 5;

// 0 shipped (8 warps, a frequency a lane); candidates 1: 4 warps, 2: two frequencies a lane.
template <typename T, int kVariant>
struct SmallPolicy {
  using Table = std::conditional_t<std::is_same_v<T, double>, ConflictFreeTable, NoTable>;
  static constexpr int kThreads = kVariant == 1 ? 128 : 256;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kFreqsPerThread = kVariant == 2 ? 2 : 1;
  static constexpr int kInnerUnroll = 4;
  static constexpr int kTile = 512;
};

template <typename T, int V = 0>
cudaError_t LaunchTVariant(const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env, int variant) {
  if constexpr (V < kPeriodogramVariants<T>) {
    if (variant == V) return LaunchPeriodogramPolicy<T, PeriodogramPolicy<T, V>>(a, result, env);
    return LaunchTVariant<T, V + 1>(a, result, env, variant);
  } else {
    switch (variant - kPeriodogramVariants<T>) {
      case 0: return LaunchSmallPolicy<T, SmallPolicy<T, 0>>(a, result, env);
      case 1: return LaunchSmallPolicy<T, SmallPolicy<T, 1>>(a, result, env);
      case 2: return LaunchSmallPolicy<T, SmallPolicy<T, 2>>(a, result, env);
      default: return cudaErrorInvalidValue;
    }
  }
}

// float64 on explicit frequencies: the variant whose last wave of blocks is fullest, as
// (waves rounded up) x (frequencies per thread); on a tie the first listed.
template <int... V>
int FullestWavesVariant(const LombScargleArgs& a, const LaunchEnv& env) {
  int best = 0;
  int64_t best_cost = INT64_MAX;
  const auto consider = [&]<int kV>() {
    using P = PeriodogramPolicy<double, kV>;
    const int64_t blocks = CeilDiv(a.frequencies, int64_t{P::kThreads} * P::kFreqsPerThread) * a.batch;
    const int64_t cost = CeilDiv(blocks, int64_t{env.sm_count} * P::kMinBlocksPerSm) * P::kFreqsPerThread;
    if (cost < best_cost) {
      best = kV;
      best_cost = cost;
    }
  };
  (consider.template operator()<V>(), ...);
  return best;
}

}  // namespace

int LombScargleVariantCount(DType dtype) {
  return kLombScargleSmallVariants + (dtype == DType::kFloat32 ? kPeriodogramVariants<float> : kPeriodogramVariants<double>);
}

int LombScargleDefaultVariant(DType dtype, const LombScargleArgs& a, const LaunchEnv& env, bool small_path) {
  if (small_path && SmallProblem(a, env)) return LombScargleVariantCount(dtype) - kLombScargleSmallVariants;
  if (dtype == DType::kFloat64) {
    using P1 = PeriodogramPolicy<double, 1>;
    const int64_t grid_blocks = CeilDiv(a.frequencies, int64_t{P1::kThreads} * P1::kFreqsPerThread) * a.batch;
    if (a.freqs == nullptr) return grid_blocks >= 2 * int64_t{env.sm_count} ? 1 : 0;
    return FullestWavesVariant<3, 0, 2>(a, env);
  }
  using P0 = PeriodogramPolicy<float, 0>;
  const int64_t blocks = CeilDiv(a.frequencies, int64_t{P0::kThreads} * P0::kFreqsPerThread) * a.batch;
  return blocks >= 2 * int64_t{env.sm_count} ? 0 : 1;
}

cudaError_t LaunchLombScargleVariant(DType dtype, const LombScargleArgs& a, LombScargleResult* result,
                                     const LaunchEnv& env, int variant) {
  GC_REQUIRE(result != nullptr);
  GC_REQUIRE(a.batch >= 1 && a.samples >= 1 && a.frequencies >= 1);
  GC_REQUIRE(a.x != nullptr && a.y != nullptr && a.out != nullptr);
  GC_REQUIRE(variant >= 0 && variant < LombScargleVariantCount(dtype));
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(LombScargleResult), env.stream));
  if (dtype == DType::kFloat32) return LaunchTVariant<float>(a, result, env, variant);
  return LaunchTVariant<double>(a, result, env, variant);
}

}  // namespace gpucompute::cuda::lab
