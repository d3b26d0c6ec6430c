// The direct Lomb-Scargle policies by index, so that any can be forced at any size: the
// shipped ones (kernels/cuda/lombscargle_policies.cuh) and the candidates that lost, on
// the shipped kernels' templates (kernels/cuda/lombscargle_periodogram.cuh,
// lombscargle_small.cuh).
#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "dev/cuda/lombscargle_variants.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"
#include "kernels/cuda/lombscargle_periodogram.cuh"
#include "kernels/cuda/lombscargle_policies.cuh"
#include "kernels/cuda/lombscargle_small.cuh"

namespace gpucompute::cuda::lab {
namespace {

using namespace lombscargle;

// Candidate: 5 a thread on the 512-angle table (lost to the 2048-angle table at 5).
struct PeriodogramF64FiveOnSmallTable : PeriodogramF64 {
  static constexpr int kFreqsPerThread = 5;
};
// The periodogram policies by index (lombscargle_variants.h): the shipped ones
// (kernels/cuda/lombscargle_policies.cuh), then the candidate.
template <typename T>
using PeriodogramPolicies =
    std::conditional_t<std::is_same_v<T, float>, std::tuple<PeriodogramF32Wide, PeriodogramF32>,
                       std::tuple<PeriodogramF64, PeriodogramF64Wide, PeriodogramF64Narrow, PeriodogramF64Deep,
                                  PeriodogramF64FiveOnSmallTable>>;
template <typename T, int kVariant>
using PeriodogramPolicy = std::tuple_element_t<kVariant, PeriodogramPolicies<T>>;
template <typename T>
constexpr int kPeriodogramVariants = std::tuple_size_v<PeriodogramPolicies<T>>;

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

// float64 on explicit frequencies: the variant whose last wave of blocks is fullest
// (lombscargle_policies.cuh: WaveCost); on a tie the first listed.
template <int... V>
int FullestWavesVariant(const LombScargleArgs& a, const LaunchEnv& env) {
  int best = 0;
  int64_t best_cost = INT64_MAX;
  const auto consider = [&]<int kV>() {
    const int64_t cost = WaveCost<PeriodogramPolicy<double, kV>>(a, env);
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
    if (a.freqs == nullptr) return FillsEverySmTwice<PeriodogramPolicy<double, 1>>(a, env) ? 1 : 0;
    return FullestWavesVariant<3, 0, 2>(a, env);
  }
  return FillsEverySmTwice<PeriodogramPolicy<float, 0>>(a, env) ? 0 : 1;
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
