// Short rows: a group of lanes per row, reduced and scaled in one pass from registers
// (normalize_plan.cuh: float32 rows up to 32 * RowGroupPolicy::kPerLane elements).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/normalize_ops.cuh"

namespace gpucompute::cuda {
namespace {

// This thread's place among the grid's groups of kGroup lanes, a row a group at a time:
// its lane, its group's shuffle mask, its group's first row and the step to its next.
template <int kGroup>
struct LaneGroup {
  int lane;
  unsigned mask;
  int64_t first, groups;

  __device__ __forceinline__ static LaneGroup OfThisThread() {
    const int lane = threadIdx.x % kGroup;
    const unsigned mask = kGroup == 32 ? 0xffffffffu
                                       : (((1u << kGroup) - 1u) << (threadIdx.x % 32 / kGroup * kGroup));
    const int64_t groups = static_cast<int64_t>(gridDim.x) * (blockDim.x / kGroup);
    const int64_t first = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kGroup) + threadIdx.x / kGroup;
    return {lane, mask, first, groups};
  }
};

// Each row in the registers of a group of kGroup lanes (up to RowGroupPolicy::kPerLane
// elements a lane), reduced with shuffles and scaled: one read of memory. kVec: the rows
// move as 16-byte vectors (each row a whole number of them, both arrays aligned:
// LaunchRowGroups checks), a quarter of the loads and stores.
// H200, f32 SUM rows of 40-256 columns: 1-3% faster as vectors (64 columns 1-2% slower).
template <typename T, NormKind kNorm, int kGroup, bool kVec>
struct RowGroupAgent {
  using Op = NormOp<kNorm>;
  // What a lane holds of a register row: kItems elements or 16-byte vectors.
  using Item = std::conditional_t<kVec, typename Vec16<T>::type, T>;
  static constexpr int kItemElements = kVec ? Vec16<T>::kCount : 1;
  static constexpr int kItems = RowGroupPolicy::kPerLane / kItemElements;
  const T* in;
  T* out;
  int64_t rows, cols;
  NormalizeResult* result;

  __device__ void Run() {
    const LaneGroup<kGroup> g = LaneGroup<kGroup>::OfThisThread();
    if (cols > kGroup * RowGroupPolicy::kPerLane) return;  // LaunchRowGroups' callers give a row a group that holds it
    if constexpr (sizeof(T) == 4) {
      if (cols * static_cast<int64_t>(sizeof(T)) % RowGroupPolicy::kLineBytes != 0) {
        RegisterRows<true>(g.lane, g.mask, g.first, g.groups);
        return;
      }
    }
    RegisterRows<false>(g.lane, g.mask, g.first, g.groups);
  }

  // kPrefetch: the next row's loads are issued before this row is reduced and scaled,
  // for float32 rows across cache lines (few warps were active, each waiting on its
  // loads); rows of whole lines lost with it.
  // H200, f32 1e6 x 100: SUM 0.246 -> 0.223 ms, L2 0.226 -> 0.214; 128 / 256 columns 0.212 -> 0.221.
  template <bool kPrefetch>
  __device__ void RegisterRows(int lane, unsigned mask, int64_t row, int64_t groups) const {
    Item v[kItems];
    if constexpr (!kPrefetch) {
      for (; row < rows; row += groups) {
        LoadRow(row, lane, v);
        ScaleRow(row, lane, mask, v);
      }
    } else {
      if (row >= rows) return;
      Item next[kItems];
      LoadRow(row, lane, v);
      for (;;) {
        const int64_t following = row + groups;
        const bool more = following < rows;
        if (more) LoadRow(following, lane, next);
        ScaleRow(row, lane, mask, v);
        if (!more) return;
#pragma unroll
        for (int k = 0; k < kItems; ++k) v[k] = next[k];
        row = following;
      }
    }
  }

  // Padding is 0, which changes no norm (sum, |x|, x^2 and max|x| all ignore it).
  __device__ void LoadRow(int64_t row, int lane, Item (&v)[kItems]) const {
    const Item* src = reinterpret_cast<const Item*>(in + row * cols);
    const int64_t items = cols / kItemElements;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t c = lane + k * kGroup;
      v[k] = c < items ? src[c] : Item{};
    }
  }

  __device__ void ScaleRow(int64_t row, int lane, unsigned mask, const Item (&v)[kItems]) const {
    typename Op::Acc acc = Op::Identity();
#pragma unroll
    for (int k = 0; k < kItems; ++k) acc = Accumulate(acc, v[k]);
    const double norm = GroupReduce(acc, mask);
    if (!FastNorm<T, kNorm>(norm)) {
      if (lane == 0) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
      return;
    }
    Item* dst = reinterpret_cast<Item*>(out + row * cols);
    const int64_t items = cols / kItemElements;
    bool overflow = false;
    WithRowScale<T>(norm, [&](auto scale) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t c = lane + k * kGroup;
        if (c < items) {
          const Item y = Scale(v[k], scale);
          dst[c] = y;
          if constexpr (kNorm == NormKind::kSum) overflow |= IsInf(y);
        }
      }
    });
    if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
  }

  __device__ static typename Op::Acc Accumulate(typename Op::Acc acc, const Item& x) {
    if constexpr (kVec) {
      return AccumulateVec<T, Op>(acc, x);
    } else {
      return Op::Add(acc, Op::Transform(x));
    }
  }
  template <typename ScaleFn>
  __device__ static Item Scale(const Item& x, ScaleFn scale) {
    if constexpr (kVec) {
      return ScaleVec<T>(x, scale);
    } else {
      return scale(x);
    }
  }
  __device__ static bool IsInf(const Item& x) {
    if constexpr (kVec) {
      return AnyInf(x);
    } else {
      return isinf(x);
    }
  }

  // Butterfly over the group: every lane gets the same norm (the combines commute).
  __device__ static double GroupReduce(typename Op::Acc acc, unsigned mask) {
    return Op::Finalize(ButterflyCombine<Op, kGroup>(acc, mask));
  }
};

template <typename T, NormKind kNorm, int kGroup, bool kVec>
__global__ void __launch_bounds__(RowGroupPolicy::kThreads, RowGroupPolicy::kMinBlocksPerSm)
    RowGroupKernel(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result) {
  RowGroupAgent<T, kNorm, kGroup, kVec>{in, out, rows, cols, result}.Run();
}

// Rows of at most group * RowGroupPolicy::kPerLane elements, `group` lanes each.
template <typename T, NormKind kNorm>
cudaError_t LaunchRowGroups(const T* in, T* out, int64_t rows, int64_t cols, int group, NormalizeResult* result,
                            const LaunchEnv& env) {
  const int64_t rows_per_block = RowGroupPolicy::kThreads / group;
  const unsigned grid = GridFor(CeilDiv(rows, rows_per_block), env.sm_count, RowGroupPolicy::kMinBlocksPerSm * 2);
  const bool vec = cols <= group * RowGroupPolicy::kPerLane &&
                   cols * static_cast<int64_t>(sizeof(T)) % sizeof(typename Vec16<T>::type) == 0 &&
                   Aligned16(in) && Aligned16(out);
  auto launch = [&](auto scalar_kernel, auto vec_kernel) {
    (vec ? vec_kernel : scalar_kernel)<<<grid, RowGroupPolicy::kThreads, 0, env.stream>>>(in, out, rows, cols,
                                                                                           result);
  };
  switch (group) {
    case 4: launch(RowGroupKernel<T, kNorm, 4, false>, RowGroupKernel<T, kNorm, 4, true>); break;
    case 8: launch(RowGroupKernel<T, kNorm, 8, false>, RowGroupKernel<T, kNorm, 8, true>); break;
    case 16: launch(RowGroupKernel<T, kNorm, 16, false>, RowGroupKernel<T, kNorm, 16, true>); break;
    default: launch(RowGroupKernel<T, kNorm, 32, false>, RowGroupKernel<T, kNorm, 32, true>); break;
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

// Every row read twice (the second time partly from L2): the reduction of all rows'

}  // namespace
}  // namespace gpucompute::cuda
