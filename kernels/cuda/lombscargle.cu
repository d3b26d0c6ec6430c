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
//
// Both dtypes take sin and cos of the exact product f x (float64: sincos_table.cuh).
// float32 phase: f * x is split exactly into p + e (e = fma(f, x, -p)), reduced
// modulo 2 pi with a two-constant Cody-Waite step (p - k 2pi_hi is exact for |p| >= 4),
// e is added back, and the reduced angle in [-pi, pi] goes to __sincosf. The phase
// error stays ~3e-7 rad whatever |f x| is (a plain sinf(f * x) at f x = 1e4 is off by
// up to ~5e-4 rad from the rounding of the product alone). Grid frequencies carry a
// float low part (f = hi + lo), so rounding f to float32 costs nothing either.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>
#include <cstdint>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_variants.h"
#include "kernels/cuda/sincos_table.cuh"
#include "kernels/lombscargle_power.h"

namespace gpucompute::cuda {
namespace {

struct PrepPolicy {
  static constexpr int kThreads = 256;
};

// LaunchLombScargle picks a variant by dtype and size; the benchmark times each
// (lombscargle_variants.h).
// kInnerUnroll > 1 interleaves samples on top of the kFreqsPerThread independent
// chains; it costs registers (f32: ~60 -> ~120 at 4 freqs/thread).
template <typename T, int kVariant>
struct PeriodogramPolicy;
struct NoTable {
  static constexpr size_t Bytes() { return 0; }
};
// float64 sin/cos tables (sincos_table.cuh), 64 KiB each, two blocks per SM still fit:
// 512 angles in 8 copies, 14 FP64 operations per sin/cos pair and no bank conflicts; or
// 2048 angles in 2 copies, 13 operations and ~2x the shared-memory wavefronts. H100,
// 10,000 x 1e6 explicit: 5 frequencies per thread 13.3 ms with the 2048-angle table
// against 14.1 ms with the 512 (variant 4); 4 per thread the other way round (13.9
// against 14.3 ms), and the grid's 8 (two sin/cos per 8 pairs) gains nothing from it.
using ConflictFreeTable = SinCosTable<512, 8>;
using FinerTable = SinCosTable<2048, 2>;

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

using BatchStats = LombScargleRowStats;

// ---- prep ----------------------------------------------------------------------------
// Inputs of T; normalized weights written as W: T for the direct kernel, double for
// the NUFFT, whose sums must see weights summing to 1 in float64.
template <typename T, typename W>
struct PrepAgent {
  using BlockReduce = cub::BlockReduce<double, PrepPolicy::kThreads>;
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
    __shared__ typename BlockReduce::TempStorage tmp;
    __shared__ double s_wsum, s_ymean;
    __shared__ int s_neg;
    for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
      const T* yb = y + b * n;
      const T* wb = w == nullptr ? nullptr : w + (w_batched ? b * n : 0);
      double ws = 0, ys = 0;
      int neg = 0;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double wi = wb == nullptr ? 1.0 : static_cast<double>(wb[i]);
        neg |= !(wi >= 0.0);  // negative or NaN
        ws += wi;
        ys += static_cast<double>(yb[i]);
      }
      if (threadIdx.x == 0) s_neg = 0;
      __syncthreads();
      if (neg) atomicOr(&s_neg, 1);
      const double ws_total = BlockReduce(tmp).Sum(ws);
      __syncthreads();
      const double ys_total = BlockReduce(tmp).Sum(ys);
      if (threadIdx.x == 0) {
        s_wsum = ws_total;
        s_ymean = precenter ? ys_total / static_cast<double>(n) : 0.0;
      }
      __syncthreads();
      const double wsum = s_wsum;
      const double ymean = s_ymean;
      const bool bad = s_neg != 0 || !(wsum > 0.0) || !isfinite(wsum);
      if (bad) {
        if (threadIdx.x == 0) atomicMin(&result->bad_batch, static_cast<unsigned long long>(b));
        __syncthreads();
        continue;
      }
      double y1 = 0, y2 = 0;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double wi = (wb == nullptr ? 1.0 : static_cast<double>(wb[i])) / wsum;
        const double yc = static_cast<double>(yb[i]) - ymean;
        wn[b * n + i] = static_cast<W>(wi);
        wy[b * n + i] = static_cast<W>(wi * yc);
        y1 += wi * yc;
        y2 += wi * yc * yc;
      }
      const double y1_total = BlockReduce(tmp).Sum(y1);
      __syncthreads();
      const double y2_total = BlockReduce(tmp).Sum(y2);
      if (threadIdx.x == 0) stats[b] = BatchStats{y1_total, y2_total};
      __syncthreads();
    }
  }
};

template <typename T, typename W>
__global__ void __launch_bounds__(PrepPolicy::kThreads)
    PrepKernel(const T* y, const T* w, bool w_batched, int64_t batch, int64_t n, bool precenter,
               W* wn, W* wy, BatchStats* stats, LombScargleResult* result) {
  PrepAgent<T, W>{y, w, w_batched, batch, n, precenter, wn, wy, stats, result}.Run();
}

// ---- phase -------------------------------------------------------------------------------
// A frequency as an unevaluated sum hi + lo. Frequencies from an array are exact in
// T (lo = 0); grid frequencies are computed in float64 and, for float32, split into
// two floats, so a float32 periodogram on a grid sees the float64 grid.
template <typename T>
struct Freq {
  T hi, lo;
};

// sin and cos of (f.hi + f.lo) x, accurate to ~3e-7 rad for any |f x| < 2^22.
template <bool kHasLo>
__device__ __forceinline__ void SinCosPhase(const Freq<float>& f, float x, float* s, float* c) {
  constexpr float kInv2Pi = 0.15915494309189535f;
  constexpr float k2PiHi = 6.28318548202514648f;     // float(2 pi)
  constexpr float k2PiLo = -1.7484555314695172e-7f;  // 2 pi - k2PiHi
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23: round to nearest integer
  const float p = f.hi * x;
  float e = fmaf(f.hi, x, -p);         // exact: f.hi x = p + e
  if constexpr (kHasLo) e = fmaf(f.lo, x, e);
  const float k = fmaf(p, kInv2Pi, kRound) - kRound;
  float r = fmaf(-k, k2PiHi, p);       // exact for |p| >= 4
  r = fmaf(-k, k2PiLo, r);
  r += e;
  __sincosf(r, s, c);
}

// float64, of the exact product f x: the table's reduction where the thread's largest
// |f x| allows it (kFast; f then holds the frequency in table steps, Table::StepsOf),
// else libdevice's sincos of the rounded product p, exact for any phase, turned by the
// product's rounding error e = f x - p.
template <typename Table, bool kHasLo, bool kFast>
__device__ __forceinline__ void SinCosPhase(const Freq<double>& f, double x,
                                            const double2* lane_table, double* s, double* c) {
  if constexpr (kFast) {
    Table::SinCos(lane_table, f.hi, f.lo, x, s, c);
  } else {
    const double p = f.hi * x;
    double sp, cp, se, ce;
    sincos(p, &sp, &cp);
    sincos(fma(f.hi, x, -p), &se, &ce);
    *s = fma(sp, ce, cp * se);
    *c = fma(cp, ce, -(sp * se));
  }
}
template <typename Table, bool kHasLo, bool kFast>
__device__ __forceinline__ void SinCosPhase(const Freq<float>& f, float x, const double2*,
                                            float* s, float* c) {
  SinCosPhase<kHasLo>(f, x, s, c);
}

__device__ __forceinline__ double GridAt(double start, double stop, int64_t count, int64_t i) {
  if (count == 1) return start;
  if (i == count - 1) return stop;
  return start + static_cast<double>(i) * ((stop - start) / static_cast<double>(count - 1));
}

template <typename T>
struct PeriodogramParams {
  const T* x;
  int64_t x_batch_stride;  // 0 when x is shared by the batch
  const T* wn;
  const T* wy;
  const BatchStats* stats;
  const T* freqs;
  double grid_start, grid_stop;
  int64_t batch, n, m;
  bool normalize;
  bool amplitude;  // out (B, M, 2)
  T* out;
};

// ---- the fused periodogram -------------------------------------------------------------
// Static shared memory of a block: the staged samples. The float64 sin/cos table is in
// dynamic shared memory (Policy::Table::Bytes(), over the 48 KiB of static); float32
// phases use __sincosf.
template <typename T, int kTile>
struct PeriodogramStorage {
  struct alignas(4 * sizeof(T)) Sample {  // one 16-byte (f32) or two (f64) broadcast loads
    T x, w, wy, pad;
  };
  Sample tile[kTile];
  double abs_x_max;  // the row's largest |x|: whether the table's phase bound holds
};

// kWeighted: the row has weights; without, every normalized weight is the same 1 / N, so
// the sums run over c, s (one multiply per pair fewer) and take the weight at the end.
template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
struct PeriodogramAgent {
  static constexpr int F = Policy::kFreqsPerThread;
  static constexpr int kTile = Policy::kTile;
  using Table = typename Policy::Table;
  using TempStorage = PeriodogramStorage<T, kTile>;
  using Sample = typename TempStorage::Sample;

  // Per-frequency sums of this thread's F frequencies.
  struct FreqSums {
    T c[F] = {}, s[F] = {}, cc[F] = {}, cs[F] = {}, yc[F] = {}, ys[F] = {};
  };

  const PeriodogramParams<T>& p;
  TempStorage& storage;
  double2* table;  // float64: Table::Bytes() of dynamic shared memory

  // The sums over one staged tile. kFast: float64 phases through the table.
  template <bool kFast>
  __device__ __forceinline__ void AccumulateTile(int nt, const Freq<T> (&f)[F], const Freq<T>& delta,
                                                 FreqSums& acc) const {
    const double2* lane_table = nullptr;
    if constexpr (std::is_same_v<T, double>) lane_table = Table::LaneCopy(table);
#pragma unroll(Policy::kInnerUnroll)
    for (int i = 0; i < nt; ++i) {
      const Sample smp = storage.tile[i];  // broadcast read
      T sn[F], cn[F];
      if constexpr (kGrid && F > 1) {
        SinCosPhase<Table, true, kFast>(f[0], smp.x, lane_table, &sn[0], &cn[0]);
        T sd, cd;
        SinCosPhase<Table, true, kFast>(delta, smp.x, lane_table, &sd, &cd);
#pragma unroll
        for (int j = 1; j < F; ++j) {
          cn[j] = fma(cn[j - 1], cd, -(sn[j - 1] * sd));
          sn[j] = fma(sn[j - 1], cd, cn[j - 1] * sd);
        }
      } else {
#pragma unroll
        for (int j = 0; j < F; ++j) {
          SinCosPhase<Table, kGrid, kFast>(f[j], smp.x, lane_table, &sn[j], &cn[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < F; ++j) {
        const T c = cn[j], s = sn[j];
        const T wc = kWeighted ? smp.w * c : c;
        if constexpr (kFloatingMean) {
          acc.c[j] += wc;
          acc.s[j] = kWeighted ? fma(smp.w, s, acc.s[j]) : acc.s[j] + s;
        }
        acc.cc[j] = fma(wc, c, acc.cc[j]);
        acc.cs[j] = fma(wc, s, acc.cs[j]);
        acc.yc[j] = fma(smp.wy, c, acc.yc[j]);
        acc.ys[j] = fma(smp.wy, s, acc.ys[j]);
      }
    }
  }

  // float64 only: the row's largest |x|, for the table's phase bound.
  __device__ void FindAbsXMax(const T* xb) {
    using BlockReduce = cub::BlockReduce<double, Policy::kThreads>;
    __shared__ typename BlockReduce::TempStorage reduce;
    double m = 0;
    for (int64_t i = threadIdx.x; i < p.n; i += Policy::kThreads) m = fmax(m, fabs(xb[i]));
    __syncthreads();  // the previous row's abs_x_max is read
    m = BlockReduce(reduce).Reduce(m, ::cuda::maximum<>{});
    if (threadIdx.x == 0) storage.abs_x_max = m;
    __syncthreads();
  }

  __device__ void Run() {
    if constexpr (std::is_same_v<T, double>) Table::Fill(table);  // synchronized below
    const int64_t per_block = static_cast<int64_t>(Policy::kThreads) * F;
    for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
      const T* xb = p.x + b * p.x_batch_stride;
      const T* wb = p.wn + b * p.n;
      const T* wyb = p.wy + b * p.n;
      const BatchStats st = p.stats[b];
      if constexpr (std::is_same_v<T, double>) FindAbsXMax(xb);
      for (int64_t base = blockIdx.x * per_block; base < p.m; base += gridDim.x * per_block) {
        // Frequencies of this thread: k_j = base + j * kThreads + tid (coalesced stores).
        // On a grid they are evenly spaced by delta = kThreads * step, so only f_0 and
        // delta need sin/cos per sample; f_1.. follow by rotation (4 FMAs each).
        Freq<T> f[F];
        Freq<T> delta{T(0), T(0)};
        double abs_f_max = 0;
#pragma unroll
        for (int j = 0; j < F; ++j) {
          const int64_t k = base + j * Policy::kThreads + threadIdx.x;
          if constexpr (kGrid) {
            const double fd = k < p.m ? GridAt(p.grid_start, p.grid_stop, p.m, k) : 0.0;
            f[j].hi = static_cast<T>(fd);
            f[j].lo = static_cast<T>(fd - static_cast<double>(f[j].hi));
          } else {
            f[j].hi = k < p.m ? p.freqs[k] : T(0);
            f[j].lo = T(0);
          }
          abs_f_max = fmax(abs_f_max, fabs(static_cast<double>(f[j].hi)));
        }
        if constexpr (kGrid && F > 1) {
          const double step = p.m > 1 ? (p.grid_stop - p.grid_start) / static_cast<double>(p.m - 1) : 0.0;
          const double dd = step * Policy::kThreads;
          delta.hi = static_cast<T>(dd);
          delta.lo = static_cast<T>(dd - static_cast<double>(delta.hi));
          // f_0 of the rotation: the grid point itself (exact), or 0 past the end.
          const int64_t k0 = base + threadIdx.x;
          const double f0 = k0 < p.m ? p.grid_start + static_cast<double>(k0) * step : 0.0;
          f[0].hi = static_cast<T>(f0);
          f[0].lo = static_cast<T>(f0 - static_cast<double>(f[0].hi));
          abs_f_max = fmax(abs_f_max, fmax(fabs(f0), fabs(dd)));
        }
        bool fast = false;
        if constexpr (std::is_same_v<T, double>) {
          fast = abs_f_max * storage.abs_x_max <= Table::kMaxPhase;
          if (fast) {  // the table takes frequencies in its steps (a float64 f has no lo)
#pragma unroll
            for (int j = 0; j < F; ++j) Table::StepsOf(f[j].hi, &f[j].hi, &f[j].lo);
            Table::StepsOf(delta.hi, &delta.hi, &delta.lo);
          }
        }
        FreqSums acc;
        for (int64_t t0 = 0; t0 < p.n; t0 += kTile) {
          const int nt = p.n - t0 < kTile ? static_cast<int>(p.n - t0) : kTile;
          __syncthreads();  // the previous tile is consumed (and the table filled)
          for (int i = threadIdx.x; i < nt; i += Policy::kThreads) {
            storage.tile[i] = Sample{xb[t0 + i], wb[t0 + i], wyb[t0 + i], T(0)};
          }
          __syncthreads();
          if (fast) {
            AccumulateTile<true>(nt, f, delta, acc);
          } else {
            AccumulateTile<false>(nt, f, delta, acc);
          }
        }
        // The O(1) combination per frequency runs in float64 for both dtypes: in
        // float32 its own roundings (centring, D, the products of r and G) are
        // amplified by 1 / D, up to ~100x the error the float32 sums carry.
        const PowerSettings settings{st.y_sum, st.yy_sum,    p.n,
                                     p.normalize, kFloatingMean, p.amplitude};
        const double weight = kWeighted ? 1.0 : static_cast<double>(wb[0]);
#pragma unroll
        for (int j = 0; j < F; ++j) {
          const int64_t k = base + j * Policy::kThreads + threadIdx.x;
          if (k >= p.m) continue;
          if constexpr (!kWeighted) {
            acc.cc[j] *= weight;
            acc.cs[j] *= weight;
            acc.c[j] *= weight;
            acc.s[j] *= weight;
          }
          const Sums sums{acc.cc[j], 1.0 - acc.cc[j], acc.cs[j], acc.yc[j],
                          acc.ys[j], acc.c[j],        acc.s[j]};
          StoreValue(ValueOf(sums, settings), p.amplitude, b * p.m + k, p.out);
        }
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
  PeriodogramParams<T> p{};
  p.x = static_cast<const T*>(a.x);
  p.x_batch_stride = a.x_batched ? a.samples : 0;
  p.wn = wn;
  p.wy = wy;
  p.stats = stats;
  p.freqs = static_cast<const T*>(a.freqs);
  p.grid_start = a.grid_start;
  p.grid_stop = a.grid_stop;
  p.batch = a.batch;
  p.n = a.samples;
  p.m = a.frequencies;
  p.normalize = a.normalize;
  p.amplitude = a.amplitude;
  p.out = static_cast<T*>(a.out);
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
}

template <typename T, int V = 0>
cudaError_t LaunchTVariant(const LombScargleArgs& a, LombScargleResult* result,
                           const LaunchEnv& env, int variant) {
  if constexpr (V < kPeriodogramVariants<T>) {
    if (variant == V) return LaunchT<T, V>(a, result, env);
    return LaunchTVariant<T, V + 1>(a, result, env, variant);
  } else {
    return cudaErrorInvalidValue;
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

cudaError_t LaunchLombScargle(DType dtype, const LombScargleArgs& a, LombScargleResult* result,
                              const LaunchEnv& env) {
  if (dtype == DType::kFloat64) {
    // A grid with blocks for every SM twice: 8 frequencies per thread, 2 sincos + 7
    // rotations per 8 pairs (H100: 1.29 ms against 1.59 ms with 4, 2^10 x 2^20).
    // Explicit: 5, 4 or 3, whichever fills the last wave best, 5 on a tie (the most
    // independent chains; bench/gpu_kernels_bench times each).
    using P1 = PeriodogramPolicy<double, 1>;
    const int64_t grid_blocks = CeilDiv(a.frequencies, int64_t{P1::kThreads} * P1::kFreqsPerThread) * a.batch;
    if (a.freqs == nullptr) {
      return LaunchVariant(dtype, a, result, env, grid_blocks >= 2 * int64_t{env.sm_count} ? 1 : 0);
    }
    return LaunchVariant(dtype, a, result, env, FullestWavesVariant<3, 0, 2>(a, env));
  }
  // float32: 8 frequencies per thread where that still gives every SM two blocks,
  // else 4 (twice the blocks).
  using P0 = PeriodogramPolicy<float, 0>;
  const int64_t blocks = CeilDiv(a.frequencies, int64_t{P0::kThreads} * P0::kFreqsPerThread) * a.batch;
  return LaunchVariant(dtype, a, result, env, blocks >= 2 * int64_t{env.sm_count} ? 0 : 1);
}

cudaError_t LaunchLombScargleVariant(DType dtype, const LombScargleArgs& a,
                                     LombScargleResult* result, const LaunchEnv& env, int variant) {
  return LaunchVariant(dtype, a, result, env, variant);
}

int LombScargleVariantCount(DType dtype) {
  return dtype == DType::kFloat32 ? kPeriodogramVariants<float> : kPeriodogramVariants<double>;
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
