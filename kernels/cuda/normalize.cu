// Row normalization: out[r, :] = in[r, :] / norm(in[r, :]) for SUM, L1, L2 and
// MAX_ABS norms, accumulated in float64 for both dtypes. All rows of a request are
// handled by one or two launches, never one launch per row; PlanFor picks the path
// per shape and device (normalize_plan.cuh):
//   tiles (normalize_tile.cuh): rows that fit in one block's shared memory, read once;
//   row groups (normalize_row_groups.cuh; float32 rows up to 256 elements): a group of
//     lanes per row reduces it with shuffles and scales it from registers (16-byte loads
//     and stores where the rows are whole vectors);
//   bulk clusters (sm_90, normalize_bulk.cuh): a row past a tile over a persistent
//     cluster whose blocks load their slices with one TMA copy each, the next row's in
//     flight, read once; rows whose bytes are not a multiple of 16 go on to
//   clusters (sm_90, normalize_tile.cuh): a row past a tile over 8 or 16 blocks' shared
//     memory, read once;
//   held items (normalize_held.cuh; sm_90, rows the TMA clusters would split 16 ways
//     (float64: 8) and rows past them up to half of what the grid holds): one
//     persistent launch, each piece held in a shared-memory ring until its row's norm
//     is out, read once;
//   pipeline (normalize_pipeline.cuh; sm_90, longer rows up to a quarter of L2): one
//     persistent launch that re-reads each chunk from L2 soon after reducing it;
//   chunks (normalize_chunks.cuh; sm_80/86/89 past a tile, or rows past all of these):
//     every row reduced in chunks, then scaled, each one launch over the whole GPU.
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
// backend (7 float64 operations per element instead of 1, 5 with the ordered form,
// which the tile path's loops need: there the float64 pipe is the bound).
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
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/normalize_bulk.cuh"
#include "kernels/cuda/normalize_chunks.cuh"
#include "kernels/cuda/normalize_held.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_pipeline.cuh"
#include "kernels/cuda/normalize_plan.cuh"
#include "kernels/cuda/normalize_row_groups.cuh"
#include "kernels/cuda/normalize_tile.cuh"

namespace gpucompute::cuda {

namespace {

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
cudaError_t LaunchT(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result,
                    const LaunchEnv& env) {
  NormalizePlan plan;
  GC_TRY(PlanFor<T>(cols, &plan));
  return LaunchPlanned<T, kNorm>(plan, in, out, rows, cols, result, env);
}

// `launch` for the norm's kernels: launch(std::integral_constant<NormKind, kNorm>).
template <typename Launch>
cudaError_t ForNorm(NormKind norm, Launch launch) {
  switch (norm) {
    case NormKind::kSum: return launch(std::integral_constant<NormKind, NormKind::kSum>{});
    case NormKind::kL1: return launch(std::integral_constant<NormKind, NormKind::kL1>{});
    case NormKind::kL2: return launch(std::integral_constant<NormKind, NormKind::kL2>{});
    case NormKind::kMaxAbs: return launch(std::integral_constant<NormKind, NormKind::kMaxAbs>{});
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t DispatchNorm(const T* in, T* out, int64_t rows, int64_t cols, NormKind norm,
                         NormalizeResult* result, const LaunchEnv& env) {
  return ForNorm(norm, [&](auto k) { return LaunchT<T, decltype(k)::value>(in, out, rows, cols, result, env); });
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
  if constexpr (NormalizePolicy<T>::kRegisterRowsInGroups) {
    out.push_back({"normalize.row_group4<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 4, false>});
    out.push_back({"normalize.row_group4v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 4, true>});
    out.push_back({"normalize.row_group8<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 8, false>});
    out.push_back({"normalize.row_group8v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 8, true>});
    out.push_back({"normalize.row_group16<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 16, false>});
    out.push_back({"normalize.row_group16v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 16, true>});
    out.push_back({"normalize.row_group32<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 32, false>});
    out.push_back({"normalize.row_group32v<" + name + ">", (const void*)&RowGroupKernel<T, kNorm, 32, true>});
  }
  out.push_back({"normalize.chunk_reduce<" + name + ",vec>", (const void*)&ChunkReduceKernel<T, kNorm, true>});
  out.push_back({"normalize.chunk_reduce<" + name + ">", (const void*)&ChunkReduceKernel<T, kNorm, false>});
  out.push_back({"normalize.bad_row_norm<" + name + ">", (const void*)&BadRowNormKernel<T, kNorm>});
  out.push_back({"normalize.tile1<" + name + ">", (const void*)&TileKernel<T, kNorm, 1>});
  if constexpr (sizeof(T) == 8) {
    out.push_back({"normalize.tile4<" + name + ">", (const void*)&TileKernel<T, kNorm, 4>});
    out.push_back({"normalize.tile8<" + name + ">", (const void*)&TileKernel<T, kNorm, 8>});
    out.push_back({"normalize.tile16<" + name + ">", (const void*)&TileKernel<T, kNorm, 16>});
  }
  out.push_back({"normalize.tile32<" + name + ">", (const void*)&TileKernel<T, kNorm, 32>});
  out.push_back({"normalize.cluster_row<" + name + ">", (const void*)&ClusterRowKernel<T, kNorm>});
  out.push_back({"normalize.cluster_bulk<" + name + ">", (const void*)&ClusterBulkKernel<T, kNorm, true>});
  out.push_back({"normalize.cluster_bulk<" + name + ",v4>", (const void*)&ClusterBulkKernel<T, kNorm, false>});
  out.push_back({"normalize.pipeline<" + name + ",vec>", (const void*)&PipelineKernel<T, kNorm, true, true>});
  out.push_back({"normalize.pipeline<" + name + ">", (const void*)&PipelineKernel<T, kNorm, false, true>});
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

// Warm-up: `plan` on one row of `cols` at in -> out, for every norm.
template <typename T>
cudaError_t WarmPlan(const NormalizePlan& plan, const void* in, void* out, int64_t cols, NormalizeResult* result,
                     const LaunchEnv& env) {
  for (int k = 0; k < 4; ++k) {
    GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(NormalizeResult), env.stream));
    GC_TRY(ForNorm(static_cast<NormKind>(k), [&](auto n) {
      return LaunchPlanned<T, decltype(n)::value>(plan, static_cast<const T*>(in), static_cast<T*>(out), 1, cols,
                                                  result, env);
    }));
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchNormalize(DType dtype, const void* in, void* out, int64_t rows, int64_t cols,
                            NormKind norm, NormalizeResult* result, const LaunchEnv& env) {
  GC_REQUIRE(rows >= 0 && cols >= 1 && result != nullptr);
  GC_REQUIRE(static_cast<int>(norm) >= 0 && static_cast<int>(norm) <= 3);
  const NormalizeResult init{kNoIndex, 0.0};
  static_assert(sizeof(NormalizeResult) == 16);
  // 0xff.. bytes: bad_row = UINT64_MAX; bad_norm is NaN until the error path fills it.
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(init), env.stream));
  if (rows == 0) return cudaSuccess;
  GC_REQUIRE(in != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return DispatchNorm<float>(static_cast<const float*>(in), static_cast<float*>(out), rows, cols, norm, result,
                               env);
  }
  return DispatchNorm<double>(static_cast<const double*>(in), static_cast<double*>(out), rows, cols, norm, result,
                              env);
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
  // One row of each length whose plan differs, aligned and not (the TMA paths turn the
  // unaligned down): so that no first request sets a kernel's shared-memory limit or
  // launches a path for the first time. Then every path this device can take that these
  // lengths do not reach (the chunks and the pipeline past a cluster, the held items),
  // forced, and the error-path kernels.
  constexpr int64_t kPastTile = 70001;
  constexpr int64_t kOut = 70016;  // 16-byte aligned for both element sizes; kOut + 1 is not
  constexpr size_t elems = 2 * kOut + 8;
  Scratch s;
  GC_TRY(s.Allocate(elems * sizeof(double) + sizeof(NormalizeResult), env));
  auto* res = reinterpret_cast<NormalizeResult*>(s.as<double>() + elems);
  bool clusters = false;
  GC_TRY(HasClusters(&clusters));
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
      for (int64_t cols : {int64_t{1}, int64_t{8}, int64_t{20}, int64_t{40}, int64_t{100}, int64_t{200},
                           int64_t{1000}, int64_t{10000}, kPastTile}) {
        GC_TRY(LaunchNormalize(t, in, out, 1, cols, norm, res, env));
        GC_TRY(LaunchNormalize(t, in, out_unaligned, 1, cols, norm, res, env));
      }
      GC_TRY(LaunchNormalizeBadRowNorm(t, in, 1, 8, norm, res, env));
      GC_TRY(LaunchNormalizeRescue(t, in, out, 1, 8, norm, 0, res, env));
    }
    const auto warm = [&](NormalizePath path) {
      NormalizePlan plan;
      plan.path = path;
      return t == DType::kFloat32 ? WarmPlan<float>(plan, in, out, kOut, res, env)
                                  : WarmPlan<double>(plan, in, out, kOut, res, env);
    };
    GC_TRY(warm(NormalizePath::kChunks));
    GC_TRY(t == DType::kFloat32 ? WarmPlan<float>(NormalizePlan{}, in, out_unaligned, kOut, res, env)
                                : WarmPlan<double>(NormalizePlan{}, in, out_unaligned, kOut, res, env));
    if (clusters) {
      GC_TRY(warm(NormalizePath::kPipeline));
      GC_TRY(warm(NormalizePath::kHeld));
    }
  }
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
