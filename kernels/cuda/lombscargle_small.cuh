// The direct Lomb-Scargle periodogram of small problems. The default kernel
// (lombscargle.cu) gives a block kThreads x F frequencies of one row and every thread all
// of the row's samples: a request of 4 rows x 256 samples x 256 frequencies ran as 4
// blocks of 32 busy threads, each walking 256 samples for 8 frequencies, with the rest
// of the GPU idle (77 us of compute on an H100). Here a block owns 32 x F frequencies of
// one row, lane l frequency base + l (+ 32 j), and its warps split the row's samples
// (warp w takes samples w, w + kSlices, ..): the same number of frequencies makes
// kThreads / (32 F) times the blocks. The warps' sums meet in shared memory and warp 0
// adds them up (in T, as the default kernel's sums) and writes the results.
//
// Each block also does its row's prep (the prep kernel's float64 weight sum, mean, Y
// and YY, O(N) against the block's 32 F N pairs), so a request is one kernel launch
// and no scratch. Phases, sums and their precision: ThreadFrequencies, as the default
// kernel.
//
// A policy: Table, kThreads (warps: slices of the samples), kMinBlocksPerSm,
// kFreqsPerThread (a lane's frequencies), kInnerUnroll (independent samples in flight
// per thread), kTile (samples staged per shared-memory tile).
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

constexpr int kWarpLanes = 32;

template <typename T>
struct SmallParams {
  PeriodogramParams<T> sums;  // wn, wy and stats unused: each block preps its row
  const T* y;
  const T* w;  // null: all ones
  bool w_batched;
  bool precenter;
  LombScargleResult* result;
};

template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
struct SmallAgent {
  static constexpr int F = Policy::kFreqsPerThread;
  static constexpr int kSlices = Policy::kThreads / kWarpLanes;
  using Table = typename Policy::Table;
  using Frequencies = ThreadFrequencies<T, Table, F, kWarpLanes, kFloatingMean, kGrid, kWeighted>;
  struct TempStorage {
    PairSample<T> tile[Policy::kTile];
    T partial[Frequencies::kSums][kSlices - 1][kWarpLanes * F];  // the sums of warps 1..
    double abs_x_max;  // the row's largest |x|: whether the table's phase bound holds
  };

  const SmallParams<T>& p;
  TempStorage& storage;
  double2* table;  // float64: Table::Bytes() of dynamic shared memory

  __device__ void Run() {
    if constexpr (std::is_same_v<T, double>) Table::Fill(table);  // synchronized below
    const PeriodogramParams<T>& q = p.sums;
    const unsigned lane = threadIdx.x % kWarpLanes;
    const int slice = static_cast<int>(threadIdx.x / kWarpLanes);
    const int64_t per_block = int64_t{kWarpLanes} * F;
    for (int64_t b = blockIdx.y; b < q.batch; b += gridDim.y) {
      const T* xb = q.x + b * q.x_batch_stride;
      const T* yb = p.y + b * q.n;
      const T* wb = p.w == nullptr ? nullptr : p.w + (p.w_batched ? b * q.n : 0);
      const RowWeights row = SumRowWeights<Policy::kThreads>(yb, wb, q.n, p.precenter);
      if (row.bad) {
        if (threadIdx.x == 0) atomicMin(&p.result->bad_batch, static_cast<unsigned long long>(b));
        continue;
      }
      if constexpr (std::is_same_v<T, double>) RowAbsMax<Policy::kThreads>(xb, q.n, &storage.abs_x_max);
      // Without weights every w' is the prep kernel's T(1 / N).
      const double weight = kWeighted ? 1.0 : static_cast<double>(static_cast<T>(1.0 / row.wsum));
      for (int64_t base = blockIdx.x * per_block; base < q.m; base += gridDim.x * per_block) {
        Frequencies freqs;
        freqs.Start(q, base, lane, storage.abs_x_max);
        double y1 = 0, y2 = 0;
        for (int64_t t0 = 0; t0 < q.n; t0 += Policy::kTile) {
          const int nt = q.n - t0 < Policy::kTile ? static_cast<int>(q.n - t0) : Policy::kTile;
          __syncthreads();  // the previous tile is consumed
          for (int i = threadIdx.x; i < nt; i += Policy::kThreads) {
            double wi, yc;
            NormalizedSample(yb, wb, t0 + i, row, &wi, &yc);
            storage.tile[i] = PairSample<T>{xb[t0 + i], static_cast<T>(wi), static_cast<T>(wi * yc), T(0)};
            y1 += wi * yc;
            y2 += wi * yc * yc;
          }
          __syncthreads();
          freqs.template AddTile<Policy::kInnerUnroll>(storage.tile, slice, nt, kSlices, table);
        }
        const BatchStats st = SumRowStats<Policy::kThreads>(y1, y2);
        if (slice > 0) {
#pragma unroll
          for (int s = 0; s < Frequencies::kSums; ++s) {
#pragma unroll
            for (int j = 0; j < F; ++j) storage.partial[s][slice - 1][j * kWarpLanes + lane] = freqs.Sum(s, j);
          }
        }
        __syncthreads();
        if (slice == 0) {
#pragma unroll
          for (int s = 0; s < Frequencies::kSums; ++s) {
#pragma unroll
            for (int j = 0; j < F; ++j) {
              T sum = freqs.Sum(s, j);
              for (int w = 0; w < kSlices - 1; ++w) sum += storage.partial[s][w][j * kWarpLanes + lane];
              freqs.Sum(s, j) = sum;
            }
          }
          freqs.Store(q, b, base, lane, st, weight);
        }
      }
    }
  }
};

template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kMinBlocksPerSm)
    SmallPeriodogramKernel(const __grid_constant__ SmallParams<T> p) {
  using Agent = SmallAgent<T, Policy, kFloatingMean, kGrid, kWeighted>;
  __shared__ typename Agent::TempStorage storage;
  extern __shared__ double2 dynamic_table[];
  Agent{p, storage, dynamic_table}.Run();
}

template <typename T, typename Policy, bool kFloatingMean, bool kGrid, bool kWeighted>
cudaError_t LaunchSmallKernel(const SmallParams<T>& p, const LaunchEnv& env) {
  constexpr size_t kTableBytes = Policy::Table::Bytes();
  const auto kernel = &SmallPeriodogramKernel<T, Policy, kFloatingMean, kGrid, kWeighted>;
  if constexpr (kTableBytes > 0) {
    GC_TRY(AllowSharedLimit(kernel, kTableBytes));
  }
  const int64_t gx = std::min<int64_t>(CeilDiv(p.sums.m, int64_t{kWarpLanes} * Policy::kFreqsPerThread), 65535);
  const int64_t gy = std::min<int64_t>(p.sums.batch, 65535);
  kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), Policy::kThreads, kTableBytes,
           env.stream>>>(p);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T, typename Policy, bool kFloatingMean, bool kGrid>
cudaError_t LaunchSmallKernel(const SmallParams<T>& p, const LaunchEnv& env) {
  if (p.w != nullptr) return LaunchSmallKernel<T, Policy, kFloatingMean, kGrid, true>(p, env);
  return LaunchSmallKernel<T, Policy, kFloatingMean, kGrid, false>(p, env);
}

template <typename T, typename Policy>
cudaError_t LaunchSmallOptions(const SmallParams<T>& p, const LombScargleArgs& a, const LaunchEnv& env) {
  if (a.floating_mean) {
    if (a.freqs == nullptr) return LaunchSmallKernel<T, Policy, true, true>(p, env);
    return LaunchSmallKernel<T, Policy, true, false>(p, env);
  }
  if (a.freqs == nullptr) return LaunchSmallKernel<T, Policy, false, true>(p, env);
  return LaunchSmallKernel<T, Policy, false, false>(p, env);
}

// The small-problem kernel on Policy; the result, set to kNoIndex by the caller, flags
// bad weights as the prep kernel does.
template <typename T, typename Policy>
cudaError_t LaunchSmallPolicy(const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env) {
  const SmallParams<T> p{ParamsOf<T>(a), static_cast<const T*>(a.y), static_cast<const T*>(a.weights),
                         a.weights_batched, a.precenter, result};
  return LaunchSmallOptions<T, Policy>(p, a, env);
}

}  // namespace
}  // namespace gpucompute::cuda::lombscargle
