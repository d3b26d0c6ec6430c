// The direct Lomb-Scargle sums' shared parts (lombscargle.cu has the accuracy notes):
// the row's weight sums, the phase functions and one thread's frequencies and sums.
// Two kernels use them: the default one (lombscargle.cu: a block owns a run of
// frequencies of one row, every thread walks all the samples) and the small-problem one
// (lombscargle_small.cu: the warps of a block split the samples of 32 x F frequencies).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/sincos_table.cuh"
#include "kernels/lombscargle_power.h"

namespace gpucompute::cuda::lombscargle {

struct NoTable {
  static constexpr size_t Bytes() { return 0; }
};
// float64 sin/cos tables (sincos_table.cuh), 64 KiB each, two blocks per SM still fit:
// 512 angles in 8 copies, 14 FP64 operations per sin/cos pair and no bank conflicts; or
// 2048 angles in 2 copies, 13 operations and ~2x the shared-memory wavefronts.
// H100, f64 10,000 x 1e6 explicit: 5 a thread 13.3 ms on 2048 angles vs 14.1 on 512; 4 a thread 14.3 vs 13.9.
using ConflictFreeTable = SinCosTable<512, 8>;
using FinerTable = SinCosTable<2048, 2>;

using BatchStats = LombScargleRowStats;

// ---- the row ---------------------------------------------------------------------------
// A row's weight sum and (precenter) the unweighted mean of y, float64 sums over the
// block; bad: a negative or NaN weight, or a sum that is not positive and finite.
struct RowWeights {
  double wsum, ymean;
  bool bad;
};
template <int kThreads, typename T>
__device__ RowWeights SumRowWeights(const T* yb, const T* wb, int64_t n, bool precenter) {
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  __shared__ double s_wsum, s_ymean;
  __shared__ int s_neg;
  double ws = 0, ys = 0;
  int neg = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const double wi = wb == nullptr ? 1.0 : static_cast<double>(wb[i]);
    neg |= !(wi >= 0.0);  // negative or NaN
    ws += wi;
    ys += static_cast<double>(yb[i]);
  }
  __syncthreads();  // the previous row's results are read
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
  return {s_wsum, s_ymean, s_neg != 0 || !(s_wsum > 0.0) || !isfinite(s_wsum)};
}

// Sample i of the row as the sums take it: w_i / sum w and y_i - mean, in float64.
template <typename T>
__device__ __forceinline__ void NormalizedSample(const T* yb, const T* wb, int64_t i, const RowWeights& row,
                                                 double* wi, double* yc) {
  *wi = (wb == nullptr ? 1.0 : static_cast<double>(wb[i])) / row.wsum;
  *yc = static_cast<double>(yb[i]) - row.ymean;
}

// Y = sum w' y and YY = sum w' y^2 of the row from each thread's share, for every thread.
template <int kThreads>
__device__ BatchStats SumRowStats(double y1, double y2) {
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  __shared__ BatchStats s_stats;
  const double y1_total = BlockReduce(tmp).Sum(y1);
  __syncthreads();
  const double y2_total = BlockReduce(tmp).Sum(y2);
  if (threadIdx.x == 0) s_stats = BatchStats{y1_total, y2_total};
  __syncthreads();
  return s_stats;
}

// float64 only: the row's largest |x|, for the sin/cos table's phase bound, into *out
// (shared memory) for every thread.
template <int kThreads, typename T>
__device__ void RowAbsMax(const T* xb, int64_t n, double* out) {
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce;
  double m = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmax(m, fabs(xb[i]));
  __syncthreads();  // the previous row's *out is read
  m = BlockReduce(reduce).Reduce(m, ::cuda::maximum<>{});
  if (threadIdx.x == 0) *out = m;
  __syncthreads();
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

// The parameters that come straight from the arguments (wn, wy, stats null).
template <typename T>
PeriodogramParams<T> ParamsOf(const LombScargleArgs& a) {
  PeriodogramParams<T> p{};
  p.x = static_cast<const T*>(a.x);
  p.x_batch_stride = a.x_batched ? a.samples : 0;
  p.freqs = static_cast<const T*>(a.freqs);
  p.grid_start = a.grid_start;
  p.grid_stop = a.grid_stop;
  p.batch = a.batch;
  p.n = a.samples;
  p.m = a.frequencies;
  p.normalize = a.normalize;
  p.amplitude = a.amplitude;
  p.out = static_cast<T*>(a.out);
  return p;
}

// One staged sample: one 16-byte (f32) or two (f64) broadcast loads.
template <typename T>
struct alignas(4 * sizeof(T)) PairSample {
  T x, w, wy, pad;
};

// One thread's F frequencies k_j = base + lane + j * kSpacing and their sums over the
// samples it is given. On a grid they are evenly spaced by delta = kSpacing * step, so
// only f_0 and delta need sin/cos per sample; f_1.. follow by rotation (4 FMAs each).
// kWeighted: the row has weights; without, every normalized weight is the same 1 / N, so
// the sums run over c, s (one multiply per pair fewer) and take the weight at the end.
template <typename T, typename Table, int F, int kSpacing, bool kFloatingMean, bool kGrid, bool kWeighted>
struct ThreadFrequencies {
  Freq<T> f[F];
  Freq<T> delta{T(0), T(0)};
  bool fast = false;  // float64: every |f x| within the table's bound
  T c[F] = {}, s[F] = {}, cc[F] = {}, cs[F] = {}, yc[F] = {}, ys[F] = {};

  __device__ __forceinline__ void Start(const PeriodogramParams<T>& p, int64_t base, unsigned lane,
                                        double abs_x_max) {
    double abs_f_max = 0;
#pragma unroll
    for (int j = 0; j < F; ++j) {
      const int64_t k = base + j * kSpacing + lane;
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
      const double dd = step * kSpacing;
      delta.hi = static_cast<T>(dd);
      delta.lo = static_cast<T>(dd - static_cast<double>(delta.hi));
      // f_0 of the rotation: the grid point itself (exact), or 0 past the end.
      const int64_t k0 = base + lane;
      const double f0 = k0 < p.m ? p.grid_start + static_cast<double>(k0) * step : 0.0;
      f[0].hi = static_cast<T>(f0);
      f[0].lo = static_cast<T>(f0 - static_cast<double>(f[0].hi));
      abs_f_max = fmax(abs_f_max, fmax(fabs(f0), fabs(dd)));
    }
    if constexpr (std::is_same_v<T, double>) {
      fast = abs_f_max * abs_x_max <= Table::kMaxPhase;
      if (fast) {  // the table takes frequencies in its steps (a float64 f has no lo)
#pragma unroll
        for (int j = 0; j < F; ++j) Table::StepsOf(f[j].hi, &f[j].hi, &f[j].lo);
        Table::StepsOf(delta.hi, &delta.hi, &delta.lo);
      }
    }
  }

  // The sums over tile[i], i = begin, begin + stride, .. < end. kFast: float64 phases
  // through the table.
  template <bool kFast, int kUnroll>
  __device__ __forceinline__ void Add(const PairSample<T>* tile, int begin, int end, int stride,
                                      const double2* table) {
    const double2* lane_table = nullptr;
    if constexpr (std::is_same_v<T, double>) lane_table = Table::LaneCopy(table);
#pragma unroll(kUnroll)
    for (int i = begin; i < end; i += stride) {
      const PairSample<T> smp = tile[i];  // broadcast read
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
        const T cj = cn[j], sj = sn[j];
        const T wc = kWeighted ? smp.w * cj : cj;
        if constexpr (kFloatingMean) {
          c[j] += wc;
          s[j] = kWeighted ? fma(smp.w, sj, s[j]) : s[j] + sj;
        }
        cc[j] = fma(wc, cj, cc[j]);
        cs[j] = fma(wc, sj, cs[j]);
        yc[j] = fma(smp.wy, cj, yc[j]);
        ys[j] = fma(smp.wy, sj, ys[j]);
      }
    }
  }
  template <int kUnroll>
  __device__ __forceinline__ void AddTile(const PairSample<T>* tile, int begin, int end, int stride,
                                          const double2* table) {
    if (fast) {
      Add<true, kUnroll>(tile, begin, end, stride, table);
    } else {
      Add<false, kUnroll>(tile, begin, end, stride, table);
    }
  }

  // The sums the options use: cc, cs, yc, ys, and with a floating mean c, s.
  static constexpr int kSums = kFloatingMean ? 6 : 4;
  __device__ __forceinline__ T& Sum(int q, int j) {
    switch (q) {
      case 0: return cc[j];
      case 1: return cs[j];
      case 2: return yc[j];
      case 3: return ys[j];
      case 4: return c[j];
      default: return s[j];
    }
  }

  // The O(1) combination per frequency runs in float64 for both dtypes: in float32 its
  // own roundings (centring, D, the products of r and G) are amplified by 1 / D, up to
  // ~100x the error the float32 sums carry. weight: the rows's 1 / N without weights.
  __device__ __forceinline__ void Store(const PeriodogramParams<T>& p, int64_t b, int64_t base, unsigned lane,
                                        const BatchStats& st, double weight) {
    const PowerSettings settings{st.y_sum, st.yy_sum,    p.n,
                                 p.normalize, kFloatingMean, p.amplitude};
#pragma unroll
    for (int j = 0; j < F; ++j) {
      const int64_t k = base + j * kSpacing + lane;
      if (k >= p.m) continue;
      if constexpr (!kWeighted) {
        cc[j] *= weight;
        cs[j] *= weight;
        c[j] *= weight;
        s[j] *= weight;
      }
      const Sums sums{cc[j], 1.0 - cc[j], cs[j], yc[j], ys[j], c[j], s[j]};
      StoreValue(ValueOf(sums, settings), p.amplitude, b * p.m + k, p.out);
    }
  }
};

// ---- the small-problem path (lombscargle_small.cu) -------------------------------------
// Whether LaunchLombScargle takes it for these arguments.
bool SmallProblem(const LombScargleArgs& a, const LaunchEnv& env);
// Its launch. The result, set to kNoIndex by the caller, flags bad weights as the prep
// kernel does.
template <typename T>
cudaError_t LaunchSmall(const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env);
template <typename T>
void ListSmallKernels(std::vector<KernelEntry>& out, const std::string& t);

}  // namespace gpucompute::cuda::lombscargle
