// Long rows: chunked reduce with a last-block finalize, then scale (normalize_plan.cuh:
// rows past a tile on sm_80/86/89, and rows past every sm_90 path). ChunkReduceKernel
// splits every row into chunks (one block each, block reduction via cub::BlockReduce,
// 16-byte loads); the last block to finish a row (threadfence + ticket) sums that row's
// partials in a fixed order, so the norm is deterministic; then ChunkScaleKernel divides
// with 16-byte loads and stores, walking the chunks in reverse so its first reads find
// the reducer's last lines in L2.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/normalize_ops.cuh"

namespace gpucompute::cuda {
namespace {

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

}  // namespace
}  // namespace gpucompute::cuda
