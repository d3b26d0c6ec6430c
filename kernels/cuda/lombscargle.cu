// Generalized Lomb-Scargle periodogram, scipy.signal.lombscargle (SciPy >= 1.15)
// semantics: weights normalized to sum 1, optional precentering (unweighted mean),
// optional floating mean, "power" (x N/4), "normalize" or "amplitude" (complex, as
// (real, imaginary) pairs; lombscargle_power.h Amplitude) output.
//
//   LaunchLombScargle
//     -> PrepKernel<T, T>: one block per batch row; float64 sums of the weights and y,
//        writes w_i / sum(w) and w_i y_i (as T) and Y = sum w y, YY = sum w y^2
//        (float64) per batch; flags negative weights or a non-positive sum.
//     -> PeriodogramKernel<T, kVariant, kFloatingMean, kGrid, kWeighted>: the fused kernel
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

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"
#include "kernels/cuda/lombscargle_variants.h"

namespace gpucompute::cuda {
namespace {

using namespace lombscargle;  // this file's own parts, in lombscargle_direct.cuh

struct PrepPolicy {
  static constexpr int kThreads = 256;
};

// LaunchLombScargle picks a variant by dtype and size; the benchmark times each
// (lombscargle_variants.h).
// kInnerUnroll > 1 interleaves samples on top of the kFreqsPerThread independent
// chains; it costs registers (f32: ~60 -> ~120 at 4 freqs/thread).
template <typename T, int kVariant>
struct PeriodogramPolicy;

template <>
struct PeriodogramPolicy<float, 0> {
  using Table = NoTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;  // ~90 registers, no spills
  static constexpr int kFreqsPerThread = 8;  // 2 sincos + 7 rotations per 8 pairs
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;  // samples staged per shared-memory tile
};
template <>
struct PeriodogramPolicy<float, 1> {
  using Table = NoTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kFreqsPerThread = 4;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
template <>
struct PeriodogramPolicy<double, 0> {
  using Table = ConflictFreeTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;  // <= 128 registers
  static constexpr int kFreqsPerThread = 4;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
template <>
struct PeriodogramPolicy<double, 1> {
  using Table = ConflictFreeTable;
  static constexpr int kThreads = 128;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kFreqsPerThread = 8;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 128;
};
// 3 and 5 frequencies per thread: with 4, M = 1e6 makes 977 chunks for 264 resident
// blocks (3.7 waves, the last 70% full); LaunchLombScargle picks the count that fills
// the last wave best.
template <>
struct PeriodogramPolicy<double, 2> {
  using Table = ConflictFreeTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kFreqsPerThread = 3;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
template <>
struct PeriodogramPolicy<double, 3> {
  using Table = FinerTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kFreqsPerThread = 5;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
template <>
struct PeriodogramPolicy<double, 4> : PeriodogramPolicy<double, 3> {
  using Table = ConflictFreeTable;
};
template <typename T>
constexpr int kPeriodogramVariants = std::is_same_v<T, float> ? 2 : 5;

// ---- prep ----------------------------------------------------------------------------
// Inputs of T; normalized weights written as W: T for the direct kernel, double for
// the NUFFT, whose sums must see weights summing to 1 in float64.
template <typename T, typename W>
struct PrepAgent {
  const T* y;
  const T* w;  // null: all ones
  bool w_batched;
  int64_t batch, n;
  bool precenter;
  W* wn;   // (B, N) w / sum w
  W* wy;   // (B, N) (w / sum w) * (y - mean)
  BatchStats* stats;
  LombScargleResult* result;

  __device__ void Run() {
    for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
      const T* yb = y + b * n;
      const T* wb = w == nullptr ? nullptr : w + (w_batched ? b * n : 0);
      const RowWeights row = SumRowWeights<PrepPolicy::kThreads>(yb, wb, n, precenter);
      if (row.bad) {
        if (threadIdx.x == 0) atomicMin(&result->bad_batch, static_cast<unsigned long long>(b));
        continue;
      }
      double y1 = 0, y2 = 0;
      for (int64_t i = threadIdx.x; i < n; i += PrepPolicy::kThreads) {
        double wi, yc;
        NormalizedSample(yb, wb, i, row, &wi, &yc);
        wn[b * n + i] = static_cast<W>(wi);
        wy[b * n + i] = static_cast<W>(wi * yc);
        y1 += wi * yc;
        y2 += wi * yc * yc;
      }
      const BatchStats st = SumRowStats<PrepPolicy::kThreads>(y1, y2);
      if (threadIdx.x == 0) stats[b] = st;
    }
  }
};

template <typename T, typename W>
__global__ void __launch_bounds__(PrepPolicy::kThreads)
    PrepKernel(const T* y, const T* w, bool w_batched, int64_t batch, int64_t n, bool precenter,
               W* wn, W* wy, BatchStats* stats, LombScargleResult* result) {
  PrepAgent<T, W>{y, w, w_batched, batch, n, precenter, wn, wy, stats, result}.Run();
}

// ---- the fused periodogram -------------------------------------------------------------
// Static shared memory of a block: the staged samples. The float64 sin/cos table is in
// dynamic shared memory (Policy::Table::Bytes(), over the 48 KiB of static); float32
// phases use __sincosf.
template <typename T, int kTile>
struct PeriodogramStorage {
  PairSample<T> tile[kTile];
  double abs_x_max;  // the row's largest |x|: whether the table's phase bound holds
};

// Each block owns kThreads * F frequencies of a row at a time (grid-stride) and every
// thread walks all of the row's samples for its F (ThreadFrequencies).
template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
struct PeriodogramAgent {
  static constexpr int F = Policy::kFreqsPerThread;
  static constexpr int kTile = Policy::kTile;
  using Table = typename Policy::Table;
  using TempStorage = PeriodogramStorage<T, kTile>;
  // Frequencies of this thread: k_j = base + j * kThreads + tid (coalesced stores).
  using Frequencies = ThreadFrequencies<T, Table, F, Policy::kThreads, kFloatingMean, kGrid, kWeighted>;

  const PeriodogramParams<T>& p;
  TempStorage& storage;
  double2* table;  // float64: Table::Bytes() of dynamic shared memory

  __device__ void Run() {
    if constexpr (std::is_same_v<T, double>) Table::Fill(table);  // synchronized below
    const int64_t per_block = static_cast<int64_t>(Policy::kThreads) * F;
    for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
      const T* xb = p.x + b * p.x_batch_stride;
      const T* wb = p.wn + b * p.n;
      const T* wyb = p.wy + b * p.n;
      const BatchStats st = p.stats[b];
      if constexpr (std::is_same_v<T, double>) RowAbsMax<Policy::kThreads>(xb, p.n, &storage.abs_x_max);
      for (int64_t base = blockIdx.x * per_block; base < p.m; base += gridDim.x * per_block) {
        Frequencies freqs;
        freqs.Start(p, base, threadIdx.x, storage.abs_x_max);
        for (int64_t t0 = 0; t0 < p.n; t0 += kTile) {
          const int nt = p.n - t0 < kTile ? static_cast<int>(p.n - t0) : kTile;
          __syncthreads();  // the previous tile is consumed (and the table filled)
          for (int i = threadIdx.x; i < nt; i += Policy::kThreads) {
            storage.tile[i] = PairSample<T>{xb[t0 + i], wb[t0 + i], wyb[t0 + i], T(0)};
          }
          __syncthreads();
          freqs.template AddTile<Policy::kInnerUnroll>(storage.tile, 0, nt, 1, table);
        }
        freqs.Store(p, b, base, threadIdx.x, st, kWeighted ? 1.0 : static_cast<double>(wb[0]));
      }
    }
  }
};

template <typename T, int kVariant, bool kFloatingMean, bool kGrid, bool kWeighted>
__global__ void __launch_bounds__(PeriodogramPolicy<T, kVariant>::kThreads,
                                  PeriodogramPolicy<T, kVariant>::kMinBlocksPerSm)
    PeriodogramKernel(const __grid_constant__ PeriodogramParams<T> p) {
  using Agent = PeriodogramAgent<T, PeriodogramPolicy<T, kVariant>, kFloatingMean, kGrid, kWeighted>;
  __shared__ typename Agent::TempStorage storage;
  extern __shared__ double2 dynamic_table[];
  Agent{p, storage, dynamic_table}.Run();
}

// The kernel of these options, its table's dynamic shared memory allowed (AllowSharedLimit).
template <typename T, int kVariant, bool kFloatingMean, bool kGrid, bool kWeighted>
cudaError_t LaunchPeriodogramKernel(dim3 grid, const PeriodogramParams<T>& p, const LaunchEnv& env) {
  using Policy = PeriodogramPolicy<T, kVariant>;
  constexpr size_t kTableBytes = Policy::Table::Bytes();
  const auto kernel = &PeriodogramKernel<T, kVariant, kFloatingMean, kGrid, kWeighted>;
  if constexpr (kTableBytes > 0) {
    GC_TRY(AllowSharedLimit(kernel, kTableBytes));
  }
  kernel<<<grid, Policy::kThreads, kTableBytes, env.stream>>>(p);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T, int kVariant, bool kFloatingMean, bool kGrid>
cudaError_t LaunchPeriodogram(const LombScargleArgs& a, dim3 grid, const PeriodogramParams<T>& p,
                              const LaunchEnv& env) {
  if (a.weights != nullptr) return LaunchPeriodogramKernel<T, kVariant, kFloatingMean, kGrid, true>(grid, p, env);
  return LaunchPeriodogramKernel<T, kVariant, kFloatingMean, kGrid, false>(grid, p, env);
}

template <typename T, int kVariant>
cudaError_t LaunchPeriodogram(const LombScargleArgs& a, dim3 grid, const PeriodogramParams<T>& p,
                              const LaunchEnv& env) {
  if (a.floating_mean) {
    if (a.freqs == nullptr) return LaunchPeriodogram<T, kVariant, true, true>(a, grid, p, env);
    return LaunchPeriodogram<T, kVariant, true, false>(a, grid, p, env);
  }
  if (a.freqs == nullptr) return LaunchPeriodogram<T, kVariant, false, true>(a, grid, p, env);
  return LaunchPeriodogram<T, kVariant, false, false>(a, grid, p, env);
}

// ---- host --------------------------------------------------------------------------------
template <typename T, int kVariant>
cudaError_t LaunchT(const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env) {
  using Policy = PeriodogramPolicy<T, kVariant>;
  const int64_t bn = a.batch * a.samples;
  Scratch scratch;
  GC_TRY(scratch.Allocate(static_cast<size_t>(2 * bn) * sizeof(T) +
                              static_cast<size_t>(a.batch) * sizeof(BatchStats) + 16,
                          env));
  auto* stats = scratch.as<BatchStats>();
  T* wn = reinterpret_cast<T*>(stats + a.batch);
  T* wy = wn + bn;
  {
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(a.batch, 65535));
    PrepKernel<T, T><<<grid, PrepPolicy::kThreads, 0, env.stream>>>(
        static_cast<const T*>(a.y), static_cast<const T*>(a.weights), a.weights_batched, a.batch,
        a.samples, a.precenter, wn, wy, stats, result);
    GC_CHECK_LAUNCH();
  }
  PeriodogramParams<T> p = ParamsOf<T>(a);
  p.wn = wn;
  p.wy = wy;
  p.stats = stats;
  const int64_t per_block = static_cast<int64_t>(Policy::kThreads) * Policy::kFreqsPerThread;
  const int64_t gx = std::min<int64_t>(CeilDiv(a.frequencies, per_block),
                                       static_cast<int64_t>(env.sm_count) * Policy::kMinBlocksPerSm);
  const int64_t gy = std::min<int64_t>(a.batch, 65535);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  return LaunchPeriodogram<T, kVariant>(a, grid, p, env);
}

template <typename T, int V, bool kWeighted>
void ListVariant(std::vector<KernelEntry>& out, const std::string& t) {
  const std::string v = (V == 0 ? "" : ",v" + std::to_string(V)) + (kWeighted ? ",weighted" : "");
  out.push_back({"lombscargle.periodogram<" + t + ",floating_mean,grid" + v + ">", (const void*)&PeriodogramKernel<T, V, true, true, kWeighted>});
  out.push_back({"lombscargle.periodogram<" + t + ",floating_mean" + v + ">", (const void*)&PeriodogramKernel<T, V, true, false, kWeighted>});
  out.push_back({"lombscargle.periodogram<" + t + ",grid" + v + ">", (const void*)&PeriodogramKernel<T, V, false, true, kWeighted>});
  out.push_back({"lombscargle.periodogram<" + t + v + ">", (const void*)&PeriodogramKernel<T, V, false, false, kWeighted>});
}

template <typename T>
void ListT(std::vector<KernelEntry>& out, const std::string& t) {
  out.push_back({"lombscargle.prep<" + t + ">", (const void*)&PrepKernel<T, T>});
  [&]<int... V>(std::integer_sequence<int, V...>) {
    (ListVariant<T, V, true>(out, t), ...);
    (ListVariant<T, V, false>(out, t), ...);
  }(std::make_integer_sequence<int, kPeriodogramVariants<T>>{});
  ListSmallKernels<T>(out, t);
}

template <typename T, int V = 0>
cudaError_t LaunchTVariant(const LombScargleArgs& a, LombScargleResult* result,
                           const LaunchEnv& env, int variant) {
  if constexpr (V < kPeriodogramVariants<T>) {
    if (variant == V) return LaunchT<T, V>(a, result, env);
    return LaunchTVariant<T, V + 1>(a, result, env, variant);
  } else {
    return LaunchSmall<T>(a, result, env, variant - kPeriodogramVariants<T>);
  }
}

cudaError_t LaunchVariant(DType dtype, const LombScargleArgs& a, LombScargleResult* result,
                          const LaunchEnv& env, int variant) {
  GC_REQUIRE(result != nullptr);
  GC_REQUIRE(a.batch >= 1 && a.samples >= 1 && a.frequencies >= 1);
  GC_REQUIRE(a.x != nullptr && a.y != nullptr && a.out != nullptr);
  GC_REQUIRE(variant >= 0 && variant < LombScargleVariantCount(dtype));
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(LombScargleResult), env.stream));
  if (dtype == DType::kFloat32) return LaunchTVariant<float>(a, result, env, variant);
  return LaunchTVariant<double>(a, result, env, variant);
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

// float64 on explicit frequencies: the variant whose last wave of blocks is fullest, as
// (waves rounded up) x (frequencies per thread), the time in units of one tile of pairs;
// on a tie the first listed.
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

int LombScargleDefaultVariant(DType dtype, const LombScargleArgs& a, const LaunchEnv& env,
                              bool small_path) {
  // Few results: the default policies below would give fewer threads work than one
  // block per SM (lombscargle_small.cu spreads each row's samples over warps instead).
  if (small_path && SmallProblem(a, env)) return LombScargleVariantCount(dtype) - kLombScargleSmallVariants;
  if (dtype == DType::kFloat64) {
    // A grid with blocks for every SM twice: 8 frequencies per thread, 2 sincos + 7
    // rotations per 8 pairs (H100: 1.29 ms against 1.59 ms with 4, 2^10 x 2^20).
    // Explicit: 5, 4 or 3, whichever fills the last wave best, 5 on a tie (the most
    // independent chains; bench/gpu_kernels_bench times each).
    using P1 = PeriodogramPolicy<double, 1>;
    const int64_t grid_blocks = CeilDiv(a.frequencies, int64_t{P1::kThreads} * P1::kFreqsPerThread) * a.batch;
    if (a.freqs == nullptr) return grid_blocks >= 2 * int64_t{env.sm_count} ? 1 : 0;
    return FullestWavesVariant<3, 0, 2>(a, env);
  }
  // float32: 8 frequencies per thread where that still gives every SM two blocks,
  // else 4 (twice the blocks).
  using P0 = PeriodogramPolicy<float, 0>;
  const int64_t blocks = CeilDiv(a.frequencies, int64_t{P0::kThreads} * P0::kFreqsPerThread) * a.batch;
  return blocks >= 2 * int64_t{env.sm_count} ? 0 : 1;
}

cudaError_t LaunchLombScargle(DType dtype, const LombScargleArgs& a, LombScargleResult* result,
                              const LaunchEnv& env) {
  return LaunchVariant(dtype, a, result, env, LombScargleDefaultVariant(dtype, a, env, true));
}

cudaError_t LaunchLombScargleVariant(DType dtype, const LombScargleArgs& a,
                                     LombScargleResult* result, const LaunchEnv& env, int variant) {
  return LaunchVariant(dtype, a, result, env, variant);
}

int LombScargleVariantCount(DType dtype) {
  // The policies' variants, then the small-problem path's.
  return kLombScargleSmallVariants + (dtype == DType::kFloat32 ? kPeriodogramVariants<float> : kPeriodogramVariants<double>);
}

void ListLombScargleKernels(std::vector<KernelEntry>& out) {
  ListT<float>(out, "f32");
  ListT<double>(out, "f64");
  out.push_back({"lombscargle.prep<f32,f64 weights>", (const void*)&PrepKernel<float, double>});
}

cudaError_t WarmupLombScargle(const LaunchEnv& env) {
  // 3 samples, 5 frequencies, every kernel of both dtypes.
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
    for (int variant = 0; variant < LombScargleVariantCount(t); ++variant) {
      for (int options = 0; options < 4; ++options) {
        a.floating_mean = (options & 1) != 0;
        a.weights = (options & 2) != 0 ? base + 8 * es : nullptr;
        a.freqs = base + 24 * es;
        GC_TRY(LaunchVariant(t, a, res, env, variant));
        a.freqs = nullptr;
        a.grid_start = 0.1;
        a.grid_stop = 1.0;
        GC_TRY(LaunchVariant(t, a, res, env, variant));
      }
    }
  }
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
