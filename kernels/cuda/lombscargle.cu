// Generalized Lomb-Scargle periodogram, scipy.signal.lombscargle (SciPy >= 1.15)
// semantics: weights normalized to sum 1, optional precentering (unweighted mean),
// optional floating mean, "power" (x N/4), "normalize" or "amplitude" (complex, as
// (real, imaginary) pairs; lombscargle_power.h Amplitude) output.
//
//   LaunchLombScargle
//     -> PrepKernel<T, T>: one block per batch row; float64 sums of the weights and y,
//        writes w_i / sum(w) and w_i y_i (as T) and Y = sum w y, YY = sum w y^2
//        (float64) per batch; flags negative weights or a non-positive sum.
//     -> PeriodogramKernel<T, Policy, kFloatingMean, kGrid, kWeighted>: the fused kernel
//        (float32 computes phases and sums in float32; the O(1) combination of the sums
//        per frequency is float64 in both).
//        Each block owns kThreads * kFreqsPerThread frequencies (grid-stride), stages
//        (x, w, w y) through shared memory in tiles of kTile samples, and accumulates
//        C, S, CC, CS, YC, YS per frequency in registers. The frequency grid is
//        generated in the kernel when no frequency array is given; on a grid only f_0
//        and the spacing get sin/cos per sample, the thread's other frequencies follow
//        by rotation (kFreqsPerThread - 1 rotations of 4 FMAs: error ~ 1 ulp each).
//        Without weights every normalized weight is 1 / N: the sums skip the multiply.
//   or, for few results (lombscargle_small.cu SmallProblem), one kernel that preps each
//   row in every block and splits the row's samples over the block's warps.
//   Parts both use (row sums, phases, one thread's frequencies): lombscargle_direct.cuh.
//
// Both dtypes take sin and cos of the exact product f x (float64: sincos_table.cuh).
// float32 phase: f * x is split exactly into p + e (e = fma(f, x, -p)), reduced
// modulo 2 pi with a two-constant Cody-Waite step (p - k 2pi_hi is exact for |p| >= 4),
// e is added back, and the reduced angle in [-pi, pi] goes to __sincosf. The phase
// error stays ~3e-7 rad whatever |f x| is (a plain sinf(f * x) at f x = 1e4 is off by
// up to ~5e-4 rad from the rounding of the product alone). Grid frequencies carry a
// float low part (f = hi + lo), so rounding f to float32 costs nothing either.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"
#include "kernels/cuda/lombscargle_periodogram.cuh"
#include "kernels/cuda/lombscargle_policies.cuh"

namespace gpucompute::cuda {
namespace {

using namespace lombscargle;  // the direct periodogram's parts

// ---- which policy (lombscargle_policies.cuh) a dtype and size take ----------------------
enum class Choice { kSmall, kF32Wide, kF32, kF64Wide, kF64, kF64Narrow, kF64Deep };

Choice PolicyFor(DType dtype, const LombScargleArgs& a, const LaunchEnv& env) {
  // Few results: the policies below would give fewer threads work than one block per SM
  // (lombscargle_small.cu spreads each row's samples over warps instead).
  if (SmallProblem(a, env)) return Choice::kSmall;
  if (dtype == DType::kFloat32) return FillsEverySmTwice<PeriodogramF32Wide>(a, env) ? Choice::kF32Wide : Choice::kF32;
  if (a.freqs == nullptr) return FillsEverySmTwice<PeriodogramF64Wide>(a, env) ? Choice::kF64Wide : Choice::kF64;
  // Explicit: 5, 4 or 3, whichever fills the last wave best, 5 on a tie (the most
  // independent chains).
  Choice best = Choice::kF64Deep;
  int64_t best_cost = WaveCost<PeriodogramF64Deep>(a, env);
  if (const int64_t c = WaveCost<PeriodogramF64>(a, env); c < best_cost) best = Choice::kF64, best_cost = c;
  if (const int64_t c = WaveCost<PeriodogramF64Narrow>(a, env); c < best_cost) best = Choice::kF64Narrow;
  return best;
}

template <typename T>
cudaError_t LaunchT(Choice choice, const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env) {
  if constexpr (sizeof(T) == 4) {
    switch (choice) {
      case Choice::kSmall: return LaunchSmall<T>(a, result, env);
      case Choice::kF32Wide: return LaunchPeriodogramPolicy<T, PeriodogramF32Wide>(a, result, env);
      default: return LaunchPeriodogramPolicy<T, PeriodogramF32>(a, result, env);
    }
  } else {
    switch (choice) {
      case Choice::kSmall: return LaunchSmall<T>(a, result, env);
      case Choice::kF64Wide: return LaunchPeriodogramPolicy<T, PeriodogramF64Wide>(a, result, env);
      case Choice::kF64Narrow: return LaunchPeriodogramPolicy<T, PeriodogramF64Narrow>(a, result, env);
      case Choice::kF64Deep: return LaunchPeriodogramPolicy<T, PeriodogramF64Deep>(a, result, env);
      default: return LaunchPeriodogramPolicy<T, PeriodogramF64>(a, result, env);
    }
  }
}

template <typename T, typename Policy, bool kWeighted>
void ListPolicy(std::vector<KernelEntry>& out, const std::string& t, const std::string& name) {
  const std::string v = "," + name + (kWeighted ? ",weighted" : "");
  out.push_back({"lombscargle.periodogram<" + t + ",floating_mean,grid" + v + ">",
                 (const void*)&PeriodogramKernel<T, Policy, true, true, kWeighted>});
  out.push_back({"lombscargle.periodogram<" + t + ",floating_mean" + v + ">",
                 (const void*)&PeriodogramKernel<T, Policy, true, false, kWeighted>});
  out.push_back({"lombscargle.periodogram<" + t + ",grid" + v + ">",
                 (const void*)&PeriodogramKernel<T, Policy, false, true, kWeighted>});
  out.push_back({"lombscargle.periodogram<" + t + v + ">", (const void*)&PeriodogramKernel<T, Policy, false, false, kWeighted>});
}

template <typename T, typename Policy>
void ListPolicy(std::vector<KernelEntry>& out, const std::string& t, const std::string& name) {
  ListPolicy<T, Policy, true>(out, t, name);
  ListPolicy<T, Policy, false>(out, t, name);
}

}  // namespace

cudaError_t LaunchLombScarglePrep(DType dtype, const LombScargleArgs& a, double* wn, double* wy,
                                  LombScargleRowStats* stats, LombScargleResult* result,
                                  const LaunchEnv& env) {
  GC_REQUIRE(result != nullptr && a.batch >= 1 && a.samples >= 1 && a.y != nullptr);
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(LombScargleResult), env.stream));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(a.batch, 65535));
  if (dtype == DType::kFloat32) {
    PrepKernel<float, double><<<grid, PrepPolicy::kThreads, 0, env.stream>>>(
        static_cast<const float*>(a.y), static_cast<const float*>(a.weights), a.weights_batched,
        a.batch, a.samples, a.precenter, wn, wy, stats, result);
  } else {
    PrepKernel<double, double><<<grid, PrepPolicy::kThreads, 0, env.stream>>>(
        static_cast<const double*>(a.y), static_cast<const double*>(a.weights), a.weights_batched,
        a.batch, a.samples, a.precenter, wn, wy, stats, result);
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

cudaError_t LaunchLombScargle(DType dtype, const LombScargleArgs& a, LombScargleResult* result,
                              const LaunchEnv& env) {
  GC_REQUIRE(result != nullptr);
  GC_REQUIRE(a.batch >= 1 && a.samples >= 1 && a.frequencies >= 1);
  GC_REQUIRE(a.x != nullptr && a.y != nullptr && a.out != nullptr);
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(LombScargleResult), env.stream));
  const Choice choice = PolicyFor(dtype, a, env);
  if (dtype == DType::kFloat32) return LaunchT<float>(choice, a, result, env);
  return LaunchT<double>(choice, a, result, env);
}

void ListLombScargleKernels(std::vector<KernelEntry>& out) {
  out.push_back({"lombscargle.prep<f32>", (const void*)&PrepKernel<float, float>});
  out.push_back({"lombscargle.prep<f64>", (const void*)&PrepKernel<double, double>});
  out.push_back({"lombscargle.prep<f32,f64 weights>", (const void*)&PrepKernel<float, double>});
  ListPolicy<float, PeriodogramF32Wide>(out, "f32", "8 a thread");
  ListPolicy<float, PeriodogramF32>(out, "f32", "4 a thread");
  ListPolicy<double, PeriodogramF64>(out, "f64", "4 a thread");
  ListPolicy<double, PeriodogramF64Wide>(out, "f64", "8 a thread");
  ListPolicy<double, PeriodogramF64Narrow>(out, "f64", "3 a thread");
  ListPolicy<double, PeriodogramF64Deep>(out, "f64", "5 a thread");
  ListSmallKernels<float>(out, "f32");
  ListSmallKernels<double>(out, "f64");
}

cudaError_t WarmupLombScargle(const LaunchEnv& env) {
  // 3 samples, 5 frequencies, every policy's kernels of both dtypes.
  Scratch s;
  const size_t bytes = 64 * sizeof(double) + sizeof(LombScargleResult) + 16;
  GC_TRY(s.Allocate(bytes, env));
  GC_TRY(cudaMemsetAsync(s.as<void>(), 0x3f, bytes, env.stream));
  auto* res = reinterpret_cast<LombScargleResult*>(s.as<double>() + 64);
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const size_t es = ElementSize(t);
    char* base = s.as<char>();
    LombScargleArgs a;
    a.samples = 3;
    a.frequencies = 5;
    a.x = base;
    a.y = base + 4 * es;
    a.out = base + 16 * es;
    const std::vector<Choice> choices =
        t == DType::kFloat32
            ? std::vector<Choice>{Choice::kSmall, Choice::kF32Wide, Choice::kF32}
            : std::vector<Choice>{Choice::kSmall, Choice::kF64Wide, Choice::kF64, Choice::kF64Narrow, Choice::kF64Deep};
    for (Choice choice : choices) {
      for (int options = 0; options < 4; ++options) {
        a.floating_mean = (options & 1) != 0;
        a.weights = (options & 2) != 0 ? base + 8 * es : nullptr;
        a.freqs = base + 24 * es;
        GC_TRY(cudaMemsetAsync(res, 0xff, sizeof(LombScargleResult), env.stream));
        GC_TRY(t == DType::kFloat32 ? LaunchT<float>(choice, a, res, env) : LaunchT<double>(choice, a, res, env));
        a.freqs = nullptr;
        a.grid_start = 0.1;
        a.grid_stop = 1.0;
        GC_TRY(t == DType::kFloat32 ? LaunchT<float>(choice, a, res, env) : LaunchT<double>(choice, a, res, env));
      }
    }
  }
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
