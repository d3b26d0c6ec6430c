// The direct Lomb-Scargle periodogram's kernels and their launch, templated on a
// launch policy (lombscargle.cu picks one per dtype and size; dev/cuda times others):
//   PrepKernel<T, W>: one block per batch row; float64 sums of the weights and y, writes
//     w_i / sum(w) and w_i y_i (as W) and Y = sum w y, YY = sum w y^2 (float64) per
//     batch; flags negative weights or a non-positive sum.
//   PeriodogramKernel<T, Policy, kFloatingMean, kGrid, kWeighted>: the fused kernel
//     (float32 computes phases and sums in float32; the O(1) combination of the sums
//     per frequency is float64 in both). Each block owns kThreads * kFreqsPerThread
//     frequencies (grid-stride), stages (x, w, w y) through shared memory in tiles of
//     kTile samples, and accumulates C, S, CC, CS, YC, YS per frequency in registers.
// A policy: Table (the float64 sin/cos table, sincos_table.cuh, or NoTable), kThreads,
// kMinBlocksPerSm (__launch_bounds__), kFreqsPerThread, kInnerUnroll (samples
// interleaved on top of the kFreqsPerThread independent chains: registers), kTile.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"

namespace gpucompute::cuda::lombscargle {
namespace {

struct PrepPolicy {
  static constexpr int kThreads = 256;
};

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

template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kMinBlocksPerSm)
    PeriodogramKernel(const __grid_constant__ PeriodogramParams<T> p) {
  using Agent = PeriodogramAgent<T, Policy, kFloatingMean, kGrid, kWeighted>;
  __shared__ typename Agent::TempStorage storage;
  extern __shared__ double2 dynamic_table[];
  Agent{p, storage, dynamic_table}.Run();
}

// The kernel of these options, its table's dynamic shared memory allowed (AllowSharedLimit).
template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
cudaError_t LaunchPeriodogramKernel(dim3 grid, const PeriodogramParams<T>& p, const LaunchEnv& env) {
  constexpr size_t kTableBytes = Policy::Table::Bytes();
  const auto kernel = &PeriodogramKernel<T, Policy, kFloatingMean, kGrid, kWeighted>;
  if constexpr (kTableBytes > 0) {
    GC_TRY(AllowSharedLimit(kernel, kTableBytes));
  }
  kernel<<<grid, Policy::kThreads, kTableBytes, env.stream>>>(p);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T, typename Policy, bool kFloatingMean, bool kGrid>
cudaError_t LaunchPeriodogram(const LombScargleArgs& a, dim3 grid, const PeriodogramParams<T>& p,
                              const LaunchEnv& env) {
  if (a.weights != nullptr) return LaunchPeriodogramKernel<T, Policy, kFloatingMean, kGrid, true>(grid, p, env);
  return LaunchPeriodogramKernel<T, Policy, kFloatingMean, kGrid, false>(grid, p, env);
}

template <typename T, typename Policy>
cudaError_t LaunchPeriodogram(const LombScargleArgs& a, dim3 grid, const PeriodogramParams<T>& p,
                              const LaunchEnv& env) {
  if (a.floating_mean) {
    if (a.freqs == nullptr) return LaunchPeriodogram<T, Policy, true, true>(a, grid, p, env);
    return LaunchPeriodogram<T, Policy, true, false>(a, grid, p, env);
  }
  if (a.freqs == nullptr) return LaunchPeriodogram<T, Policy, false, true>(a, grid, p, env);
  return LaunchPeriodogram<T, Policy, false, false>(a, grid, p, env);
}

// ---- host --------------------------------------------------------------------------------
// The prep kernel, then the periodogram on Policy.
template <typename T, typename Policy>
cudaError_t LaunchPeriodogramPolicy(const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env) {
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
  return LaunchPeriodogram<T, Policy>(a, grid, p, env);
}

}  // namespace
}  // namespace gpucompute::cuda::lombscargle
