// Row normalization: out[r, :] = in[r, :] / norm(in[r, :]) for SUM, L1, L2 and
// MAX_ABS norms, accumulated in float64 for both dtypes. All rows of a request are
// handled by one or two launches, never one launch per row; PlanFor picks the path
// per shape (normalize_plan.cuh; NormalizeVariant forces one, for the benchmark and
// the tests):
//   tiles (normalize_tile.cuh): rows that fit in one block's shared memory, read once;
//   row groups: RowGroupKernel, a group of lanes per row reduces it with shuffles and
//     scales it; rows up to 8 elements per lane stay in registers (one read; 16-byte
//     loads and stores where the rows are whole vectors), longer ones (kTwoReads only)
//     are read twice (the second from L1/L2);
//   bulk clusters (sm_90, normalize_bulk.cuh): a row past a tile over a persistent
//     cluster whose blocks load their slices with one TMA copy each, the next row's in
//     flight, read once; rows whose bytes are not a multiple of 16 go on to
//   clusters (sm_90): a row past a tile over 8 blocks' shared memory, read once;
//   held items (normalize_held.cuh; sm_90, rows the TMA clusters would split 16 ways
//     (float64: 8) and rows past them up to half of what the grid holds, ~13 MB): one
//     persistent launch, each 32 KiB piece held in a shared-memory ring until its
//     row's norm is out, read once;
//   pipeline (normalize_pipeline.cuh; sm_90, longer rows up to a quarter of L2): one
//     persistent launch that re-reads each chunk from L2 soon after reducing it;
//   chunks (sm_80/86/89 past a tile, or rows past a cluster): ChunkReduceKernel
//     splits every row into chunks (one block each, block
//     reduction via cub::BlockReduce, 16-byte loads); the last block to finish a row
//     (threadfence + ticket) sums that row's partials in a fixed order, so the norm is
//     deterministic; then ChunkScaleKernel divides with 16-byte loads/stores, walking
//     the chunks in reverse so its first reads find the reducer's last lines in L2.
// Scaling is x * (1 / norm) with the reciprocal rounded to T (float32: within 1 ulp
// of the CPU backend, which multiplies in float64); rows whose reciprocal overflows T
// are divided instead (RowScale).
// A zero or non-finite norm is never divided by: the row is skipped and its index
// goes to result->bad_row with atomicMin (the lowest such row wins), as does a SUM
// row whose quotients overflow T (|sum| may be far below max |x|).
//
// Accuracy: SUM, whose terms may cancel, is compensated: every thread keeps each
// addition's exact rounding error (TwoSumError, or FastTwoSumError where rows are
// summed from shared memory) and the tree combines (sum, error) pairs, so the norm
// is within about 2 eps |sum| + n eps^2 sum |x| of the exact sum, as on the CPU
// backend. (Cost: 7 float64 operations per element instead of 1, 5 with the ordered
// form, which the tile path's loops need: there the float64 pipe is the bound.)
// L1, L2 and MAX_ABS add non-negative terms.
// float64 L2 rows whose squares overflow or underflow (sum of squares inf or below
// 2^-600) are left by the fast kernels like bad rows; LaunchNormalizeRescue redoes
// them scaled by a power of two (as BLAS nrm2 does). float32 squares cannot: in
// float64, 2^40 squares of FLT_MAX stay below 1e90 and the smallest non-zero square,
// (2^-149)^2 ~ 2e-90, is far above 2^-600.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/normalize_bulk.cuh"
#include "kernels/cuda/normalize_held.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_pipeline.cuh"
#include "kernels/cuda/normalize_plan.cuh"
#include "kernels/cuda/normalize_tile.cuh"
#include "kernels/cuda/normalize_variants.h"

namespace gpucompute::cuda {

namespace {

// ---- short rows: a group of lanes per row, reduce and scale in one pass ------------------
// kVec: register rows move as 16-byte vectors (each row a whole number of them, both
// arrays aligned: LaunchRowGroups checks), a quarter of the loads and stores (H200,
// session 19: float32 SUM rows of 40 / 100 / 128 / 200 / 256 columns 1-3% faster, 64
// columns 1-2% slower, other norms even).
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
    const int lane = threadIdx.x % kGroup;
    const unsigned mask = kGroup == 32 ? 0xffffffffu
                                       : (((1u << kGroup) - 1u) << (threadIdx.x % 32 / kGroup * kGroup));
    const int64_t groups = static_cast<int64_t>(gridDim.x) * (blockDim.x / kGroup);
    const int64_t first = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kGroup) + threadIdx.x / kGroup;
    if (cols <= kGroup * RowGroupPolicy::kPerLane) {
      if constexpr (sizeof(T) == 4) {
        if (cols * static_cast<int64_t>(sizeof(T)) % RowGroupPolicy::kLineBytes != 0) {
          RegisterRows<true>(lane, mask, first, groups);
          return;
        }
      }
      RegisterRows<false>(lane, mask, first, groups);
      return;
    }
    if constexpr (!kVec) TwoPassRows(lane, mask, first, groups);  // kVec runs register rows only
  }

  // Longer rows: two passes, the second from L1/L2; four loads in flight per lane.
  __device__ void TwoPassRows(int lane, unsigned mask, int64_t first, int64_t groups) const {
    for (int64_t row = first; row < rows; row += groups) {
      const T* src = in + row * cols;
      T* dst = out + row * cols;
      typename Op::Acc acc0 = Op::Identity(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      int64_t c = lane;
      for (; c + 3 * kGroup < cols; c += 4 * kGroup) {
        const T a = src[c], b = src[c + kGroup], d = src[c + 2 * kGroup], e = src[c + 3 * kGroup];
        acc0 = Op::Add(acc0, Op::Transform(a));
        acc1 = Op::Add(acc1, Op::Transform(b));
        acc2 = Op::Add(acc2, Op::Transform(d));
        acc3 = Op::Add(acc3, Op::Transform(e));
      }
      for (; c < cols; c += kGroup) acc0 = Op::Add(acc0, Op::Transform(src[c]));
      const double norm = GroupReduce(Op::Combine(Op::Combine(acc0, acc1), Op::Combine(acc2, acc3)), mask);
      if (!FastNorm<T, kNorm>(norm)) {
        if (lane == 0) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
        continue;
      }
      bool overflow = false;
      WithRowScale<T>(norm, [&](auto scale) {
        for (int64_t c2 = lane; c2 < cols; c2 += kGroup) {
          dst[c2] = scale(src[c2]);
          if constexpr (kNorm == NormKind::kSum) overflow |= isinf(dst[c2]);
        }
      });
      if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
    }
  }

  // Rows that fit the group's registers, one read of memory. kPrefetch: the next
  // row's loads are issued before this row is reduced and scaled, for float32 rows
  // across cache lines (H200, f32 1e6 x 100, every norm: SUM 0.246 -> 0.223 ms, L2
  // 0.226 -> 0.214; ncu had shown 46% of warps active and 6.4 long-scoreboard stalls
  // an issue). Rows of whole lines lost with it (SUM 128 / 256 columns: 0.212 ->
  // 0.221, 0.214 -> 0.224), as did float64's registers (spills).
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

// ---- long rows: chunked reduce with last-block finalize, then scale --------------------
template <typename T, NormKind kNorm, bool kVec>
struct ChunkReduceAgent {
  using BlockReduce = BlockReduceFor<kNorm>;
  const T* in;
  int64_t rows, cols, chunks;  // chunks per row
  RowPartials<T, kNorm> row_partials;

  __device__ void Run() {
    __shared__ typename BlockReduce::TempStorage tmp;
    __shared__ bool last;
    const int64_t total = rows * chunks;
    for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {
      const int64_t row = w / chunks;
      const int64_t c = w - row * chunks;
      const int64_t s = row * cols + c * ChunkPolicy::kChunk;
      const int64_t e = row * cols + min(cols, (c + 1) * ChunkPolicy::kChunk);
      row_partials.Add(row, c, chunks, BlockRangeReduce<T, kNorm, kVec>(in, s, e, tmp), tmp, last,
                       /*announce=*/false);
      __syncthreads();  // tmp and `last` are reused by the next work item
    }
  }
};

template <typename T, NormKind kNorm, bool kVec>
__global__ void __launch_bounds__(ChunkPolicy::kThreads, ChunkPolicy::kMinBlocksPerSm)
    ChunkReduceKernel(const T* in, int64_t rows, int64_t cols, int64_t chunks, RowPartials<T, kNorm> row_partials) {
  ChunkReduceAgent<T, kNorm, kVec>{in, rows, cols, chunks, row_partials}.Run();
}

template <typename T, bool kVec>
struct ChunkScaleAgent {
  const T* in;
  T* out;
  int64_t rows, cols, chunks;
  const double* norms;
  NormalizeResult* result;

  __device__ void Run() {
    const int64_t total = rows * chunks;
    for (int64_t k = blockIdx.x; k < total; k += gridDim.x) {
      const int64_t w = total - 1 - k;  // reverse of the reducer's order
      const int64_t row = w / chunks;
      const double norm = norms[row];
      if (!GoodNorm(norm)) continue;  // never divide by a bad norm
      const int64_t c = w - row * chunks;
      const int64_t s = row * cols + c * ChunkPolicy::kChunk;
      const int64_t e = row * cols + min(cols, (c + 1) * ChunkPolicy::kChunk);
      bool overflow = false;
      WithRowScale<T>(norm, [&](auto scale) { overflow = BlockScaleRange<T, kVec>(in, out, s, e, scale); });
      if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
    }
  }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(ChunkPolicy::kThreads, ChunkPolicy::kMinBlocksPerSm)
    ChunkScaleKernel(const T* in, T* out, int64_t rows, int64_t cols, int64_t chunks,
                     const double* norms, NormalizeResult* result) {
  ChunkScaleAgent<T, kVec>{in, out, rows, cols, chunks, norms, result}.Run();
}

// ---- error path: the norm of result->bad_row, for the message ---------------------------
template <typename T, NormKind kNorm>
__global__ void __launch_bounds__(BadRowPolicy::kThreads)
    BadRowNormKernel(const T* in, int64_t rows, int64_t cols, NormalizeResult* result) {
  __shared__ typename BlockReduceFor<kNorm>::TempStorage tmp;
  const unsigned long long row = result->bad_row;
  if (row >= static_cast<unsigned long long>(rows)) return;
  const int64_t s = static_cast<int64_t>(row) * cols;
  const auto acc = BlockRangeReduce<T, kNorm, false>(in, s, s + cols, tmp);
  if (threadIdx.x == 0) result->bad_norm = NormOp<kNorm>::Finalize(acc);
}

// ---- rescue: float64 L2 rows whose squares overflow or underflow ------------------------
// Thread 0's v, for every thread of the block.
__device__ double BlockBroadcast(double v) {
  __shared__ double slot;
  if (threadIdx.x == 0) slot = v;
  __syncthreads();
  const double all = slot;
  __syncthreads();  // slot and the caller's reduction storage are reused
  return all;
}

// Every row from `first` that the fast kernels may have left: the CPU backend's scaled
// sum (squares of x * 2^-exponent, 2^exponent just above max |x|), then the division;
// rows still bad go to result->bad_row.
__global__ void __launch_bounds__(RescuePolicy::kThreads, RescuePolicy::kMinBlocksPerSm)
    L2RescueKernel(const double* in, double* out, int64_t first, int64_t rows, int64_t cols,
                   NormalizeResult* result) {
  using BlockReduce = BlockReduceFor<NormKind::kL2>;
  __shared__ typename BlockReduce::TempStorage tmp;
  for (int64_t row = first + blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = row * cols, e = s + cols;
    double norm = sqrt(BlockBroadcast(BlockRangeReduce<double, NormKind::kL2, false>(in, s, e, tmp)));
    if (norm >= kMinPlainL2 && norm <= kMaxPlainL2) continue;  // the fast kernels divided it
    const double max_abs =
        BlockBroadcast(BlockRangeReduce<double, NormKind::kMaxAbs, false>(in, s, e, tmp));
    if (max_abs > 0 && isfinite(max_abs)) {
      const int exponent = min(max(ilogb(max_abs) + 1, -kMaxScaleExponent), kMaxScaleExponent);
      const double scale = ldexp(1.0, -exponent);
      double squares = 0;
      for (int64_t i = s + threadIdx.x; i < e; i += blockDim.x) {
        const double y = in[i] * scale;
        squares += y * y;
      }
      norm = ldexp(sqrt(BlockBroadcast(BlockReduce(tmp).Sum(squares))), exponent);
    }
    if (!GoodNorm(norm)) {
      if (threadIdx.x == 0) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
      continue;
    }
    WithRowScale<double>(norm, [&](auto divide) {
      for (int64_t i = s + threadIdx.x; i < e; i += blockDim.x) out[i] = divide(in[i]);
    });
  }
}

// ---- host ----------------------------------------------------------------------------
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
// chunks, then the scaling in reverse order, each one launch over the whole GPU.
template <typename T, NormKind kNorm>
cudaError_t LaunchChunks(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result,
                         const LaunchEnv& env) {
  const int64_t chunks = CeilDiv(cols, ChunkPolicy::kChunk);
  const int64_t total = rows * chunks;
  RowPartialsScratch<T, kNorm> s;
  GC_TRY(s.Allocate(rows, chunks, /*with_counter=*/false, 0, result, env));
  const double* norms = s.parts.norms;
  const bool vec = Aligned16(in) && Aligned16(out);
  const unsigned grid = GridFor(total, env.sm_count, ChunkPolicy::kGridBlocksPerSm);
  if (vec) {
    ChunkReduceKernel<T, kNorm, true><<<grid, ChunkPolicy::kThreads, 0, env.stream>>>(in, rows, cols, chunks, s.parts);
  } else {
    ChunkReduceKernel<T, kNorm, false><<<grid, ChunkPolicy::kThreads, 0, env.stream>>>(in, rows, cols, chunks, s.parts);
  }
  GC_CHECK_LAUNCH();
  if (vec) {
    ChunkScaleKernel<T, true><<<grid, ChunkPolicy::kThreads, 0, env.stream>>>(in, out, rows, cols, chunks, norms, result);
  } else {
    ChunkScaleKernel<T, false><<<grid, ChunkPolicy::kThreads, 0, env.stream>>>(in, out, rows, cols, chunks, norms, result);
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

// Runs `plan`; the TMA paths (clusters, held items) turn down rows they cannot load
// (unaligned ones), which then run the default's plan without them.
template <typename T, NormKind kNorm>
cudaError_t LaunchPlanned(const NormalizePlan& plan, const T* in, T* out, int64_t rows, int64_t cols,
                          NormalizeResult* result, const LaunchEnv& env) {
  bool launched = false;
  switch (plan.path) {
    case NormalizePath::kRowGroups: return LaunchRowGroups<T, kNorm>(in, out, rows, cols, plan.group, result, env);
    case NormalizePath::kTile: return LaunchTile<T, kNorm>(in, out, rows, cols, plan.group, result, env, plan.limit);
    case NormalizePath::kCluster:
      return LaunchClusterRows<T, kNorm>(in, out, rows, cols, plan.blocks, plan.slice, result, env, plan.limit);
    case NormalizePath::kClusterBulk:
      GC_TRY((LaunchClusterBulk<T, kNorm>(in, out, rows, cols, plan.blocks, plan.slice, plan.bulk_store, result,
                                          env, plan.limit, &launched)));
      break;
    case NormalizePath::kPipeline:
      return LaunchPipeline<T, kNorm>(in, out, rows, cols, plan.streaming, plan.order, result, env);
    case NormalizePath::kHeld:
      GC_TRY((LaunchHeld<T, kNorm>(in, out, rows, cols, result, env, &launched)));
      break;
    case NormalizePath::kChunks: return LaunchChunks<T, kNorm>(in, out, rows, cols, result, env);
  }
  if (launched) return cudaSuccess;
  NormalizePlan fallback;
  GC_TRY(PlanFor<T>(cols, NormalizeVariant::kDefault, &fallback, /*bulk=*/false));
  return LaunchPlanned<T, kNorm>(fallback, in, out, rows, cols, result, env);
}

template <typename T, NormKind kNorm>
cudaError_t LaunchT(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result,
                    const LaunchEnv& env, NormalizeVariant variant) {
  NormalizePlan plan;
  GC_TRY(PlanFor<T>(cols, variant, &plan));
  return LaunchPlanned<T, kNorm>(plan, in, out, rows, cols, result, env);
}

template <typename T>
cudaError_t DispatchNorm(const T* in, T* out, int64_t rows, int64_t cols, NormKind norm,
                         NormalizeResult* result, const LaunchEnv& env, NormalizeVariant v) {
  switch (norm) {
    case NormKind::kSum: return LaunchT<T, NormKind::kSum>(in, out, rows, cols, result, env, v);
    case NormKind::kL1: return LaunchT<T, NormKind::kL1>(in, out, rows, cols, result, env, v);
    case NormKind::kL2: return LaunchT<T, NormKind::kL2>(in, out, rows, cols, result, env, v);
    case NormKind::kMaxAbs: return LaunchT<T, NormKind::kMaxAbs>(in, out, rows, cols, result, env, v);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t BadRowT(const T* in, int64_t rows, int64_t cols, NormKind norm, NormalizeResult* result,
                    const LaunchEnv& env) {
  const dim3 g(1), b(BadRowPolicy::kThreads);
  switch (norm) {
    case NormKind::kSum: BadRowNormKernel<T, NormKind::kSum><<<g, b, 0, env.stream>>>(in, rows, cols, result); break;
    case NormKind::kL1: BadRowNormKernel<T, NormKind::kL1><<<g, b, 0, env.stream>>>(in, rows, cols, result); break;
    case NormKind::kL2: BadRowNormKernel<T, NormKind::kL2><<<g, b, 0, env.stream>>>(in, rows, cols, result); break;
    case NormKind::kMaxAbs: BadRowNormKernel<T, NormKind::kMaxAbs><<<g, b, 0, env.stream>>>(in, rows, cols, result); break;
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T, NormKind kNorm>
void ListNormT(std::vector<KernelEntry>& out, const std::string& name) {
  out.push_back({"normalize.row_group4<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 4, false>});
  out.push_back({"normalize.row_group4v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 4, true>});
  out.push_back({"normalize.row_group8<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 8, false>});
  out.push_back({"normalize.row_group8v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 8, true>});
  out.push_back({"normalize.row_group16<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 16, false>});
  out.push_back({"normalize.row_group16v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 16, true>});
  out.push_back({"normalize.row_group32<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 32, false>});
  out.push_back({"normalize.row_group32v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 32, true>});
  out.push_back({"normalize.chunk_reduce<" + name + ",vec>", (const void*)&ChunkReduceKernel<T, kNorm, true>});
  out.push_back({"normalize.chunk_reduce<" + name + ">", (const void*)&ChunkReduceKernel<T, kNorm, false>});
  out.push_back({"normalize.bad_row_norm<" + name + ">", (const void*)&BadRowNormKernel<T, kNorm>});
  out.push_back({"normalize.tile1<" + name + ">", (const void*)&TileKernel<T, kNorm, 1>});
  out.push_back({"normalize.tile4<" + name + ">", (const void*)&TileKernel<T, kNorm, 4>});
  out.push_back({"normalize.tile8<" + name + ">", (const void*)&TileKernel<T, kNorm, 8>});
  out.push_back({"normalize.tile16<" + name + ">", (const void*)&TileKernel<T, kNorm, 16>});
  out.push_back({"normalize.tile32<" + name + ">", (const void*)&TileKernel<T, kNorm, 32>});
  out.push_back({"normalize.cluster_row<" + name + ">", (const void*)&ClusterRowKernel<T, kNorm>});
  out.push_back({"normalize.cluster_bulk<" + name + ">", (const void*)&ClusterBulkKernel<T, kNorm, true>});
  out.push_back({"normalize.cluster_bulk<" + name + ",v4>", (const void*)&ClusterBulkKernel<T, kNorm, false>});
  out.push_back({"normalize.pipeline<" + name + ",vec>", (const void*)&PipelineKernel<T, kNorm, true, true>});
  out.push_back({"normalize.pipeline<" + name + ">", (const void*)&PipelineKernel<T, kNorm, false, true>});
  out.push_back({"normalize.pipeline<" + name + ",vec,plain>", (const void*)&PipelineKernel<T, kNorm, true, false>});
  out.push_back({"normalize.pipeline<" + name + ",plain>", (const void*)&PipelineKernel<T, kNorm, false, false>});
  out.push_back({"normalize.held<" + name + ">", (const void*)&HeldKernel<T, kNorm>});
}

template <typename T>
void ListT(std::vector<KernelEntry>& out, const std::string& t) {
  ListNormT<T, NormKind::kSum>(out, t + ",sum");
  ListNormT<T, NormKind::kL1>(out, t + ",l1");
  ListNormT<T, NormKind::kL2>(out, t + ",l2");
  ListNormT<T, NormKind::kMaxAbs>(out, t + ",max_abs");
  out.push_back({"normalize.chunk_scale<" + t + ",vec>", (const void*)&ChunkScaleKernel<T, true>});
  out.push_back({"normalize.chunk_scale<" + t + ">", (const void*)&ChunkScaleKernel<T, false>});
}

}  // namespace

cudaError_t LaunchNormalizeVariant(DType dtype, const void* in, void* out, int64_t rows,
                                   int64_t cols, NormKind norm, NormalizeResult* result,
                                   const LaunchEnv& env, NormalizeVariant variant) {
  GC_REQUIRE(rows >= 0 && cols >= 1 && result != nullptr);
  GC_REQUIRE(static_cast<int>(norm) >= 0 && static_cast<int>(norm) <= 3);
  const NormalizeResult init{kNoIndex, 0.0};
  static_assert(sizeof(NormalizeResult) == 16);
  // 0xff.. bytes: bad_row = UINT64_MAX; bad_norm is NaN until the error path fills it.
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(init), env.stream));
  if (rows == 0) return cudaSuccess;
  GC_REQUIRE(in != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return DispatchNorm<float>(static_cast<const float*>(in), static_cast<float*>(out), rows, cols,
                               norm, result, env, variant);
  }
  return DispatchNorm<double>(static_cast<const double*>(in), static_cast<double*>(out), rows, cols,
                              norm, result, env, variant);
}

std::string DescribeNormalizePolicy(DType dtype, int64_t rows, int64_t cols, NormalizeVariant variant) {
  return dtype == DType::kFloat32 ? DescribePlan<float>(rows, cols, variant) : DescribePlan<double>(rows, cols, variant);
}

cudaError_t LaunchNormalize(DType dtype, const void* in, void* out, int64_t rows, int64_t cols,
                            NormKind norm, NormalizeResult* result, const LaunchEnv& env) {
  return LaunchNormalizeVariant(dtype, in, out, rows, cols, norm, result, env, NormalizeVariant::kDefault);
}

cudaError_t LaunchNormalizeBadRowNorm(DType dtype, const void* in, int64_t rows, int64_t cols,
                                      NormKind norm, NormalizeResult* result, const LaunchEnv& env) {
  GC_REQUIRE(in != nullptr && result != nullptr && rows >= 1 && cols >= 1);
  if (dtype == DType::kFloat32) return BadRowT<float>(static_cast<const float*>(in), rows, cols, norm, result, env);
  return BadRowT<double>(static_cast<const double*>(in), rows, cols, norm, result, env);
}

cudaError_t LaunchNormalizeRescue(DType dtype, const void* in, void* out, int64_t rows,
                                  int64_t cols, NormKind norm, unsigned long long first_row,
                                  NormalizeResult* result, const LaunchEnv& env) {
  if (dtype != DType::kFloat64 || norm != NormKind::kL2) return cudaSuccess;
  GC_REQUIRE(in != nullptr && out != nullptr && result != nullptr && cols >= 1);
  GC_REQUIRE(first_row < static_cast<unsigned long long>(rows));
  GC_TRY(cudaMemsetAsync(&result->bad_row, 0xff, sizeof(result->bad_row), env.stream));
  const int64_t first = static_cast<int64_t>(first_row);
  const unsigned grid = GridFor(rows - first, env.sm_count, RescuePolicy::kMinBlocksPerSm);
  L2RescueKernel<<<grid, RescuePolicy::kThreads, 0, env.stream>>>(
      static_cast<const double*>(in), static_cast<double*>(out), first, rows, cols, result);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

void ListNormalizeKernels(std::vector<KernelEntry>& out) {
  ListT<float>(out, "f32");
  ListT<double>(out, "f64");
  out.push_back({"normalize.l2_rescue<f64>", (const void*)&L2RescueKernel});
}

cudaError_t WarmupNormalize(const LaunchEnv& env) {
  // Rows of 8, 40, 100 and 4097 columns, one row each, on the default (tile of 4
  // lanes, 8- / 16-lane group or tile, tile of its own) and main's paths (4-lane group, the chunks,
  // vector and scalar); on the default also rows of 10000 (a tile past 48 KiB of shared
  // memory in float64) and 70001 (past a tile: a cluster on sm_90, else the chunks),
  // and the held items (sm_90: the default for rows past the clusters) on a row of
  // 70016, so that no first request sets a kernel's shared-memory limit or launches a
  // path for the first time; plus the error-path kernels.
  constexpr int64_t kLong = RowGroupPolicy::kMaxCols + 1;
  constexpr int64_t kPastTile = 70001;
  constexpr int64_t kOut = 70016;  // 16-byte aligned for both element sizes; kOut + 1 is not
  constexpr size_t elems = 2 * kOut + 8;
  Scratch s;
  GC_TRY(s.Allocate(elems * sizeof(double) + sizeof(NormalizeResult), env));
  auto* res = reinterpret_cast<NormalizeResult*>(s.as<double>() + elems);
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const size_t es = ElementSize(t);
    char* base = s.as<char>();
    // Fill with a finite non-zero pattern (0x3f bytes: ~0.75 in float32, ~4.8e-4 in float64).
    GC_TRY(cudaMemsetAsync(base, 0x3f, elems * es, env.stream));
    void* in = base;
    void* out = base + kOut * es;
    void* out_unaligned = base + (kOut + 1) * es;
    for (int k = 0; k < 4; ++k) {
      const auto norm = static_cast<NormKind>(k);
      for (NormalizeVariant v : {NormalizeVariant::kDefault, NormalizeVariant::kTwoReads}) {
        for (int64_t cols : {int64_t{8}, int64_t{40}, int64_t{100}, kLong}) {
          GC_TRY(LaunchNormalizeVariant(t, in, out, 1, cols, norm, res, env, v));
        }
        GC_TRY(LaunchNormalizeVariant(t, in, out_unaligned, 1, kLong, norm, res, env, v));
      }
      for (int64_t cols : {int64_t{10000}, kPastTile}) {
        GC_TRY(LaunchNormalizeVariant(t, in, out, 1, cols, norm, res, env, NormalizeVariant::kDefault));
        GC_TRY(LaunchNormalizeVariant(t, in, out_unaligned, 1, cols, norm, res, env, NormalizeVariant::kDefault));
      }
      GC_TRY(LaunchNormalizeVariant(t, in, out, 1, kOut, norm, res, env, NormalizeVariant::kHeld));
      GC_TRY(LaunchNormalizeBadRowNorm(t, in, 1, 8, norm, res, env));
      GC_TRY(LaunchNormalizeRescue(t, in, out, 1, 8, norm, 0, res, env));
    }
  }
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
