// Long rows in one launch, re-read from L2 rather than memory (normalize_plan.cuh: the
// policy for rows past the held items on sm_90). The chunked path reads every row twice from
// memory: its reduction walks all rows before its scaling starts, so only the last
// ~50 MB are still in L2. Here one persistent launch takes work items in a fixed order
// from an atomic counter: R(c) reduces chunk c of the flattened rows (as the chunked
// reducer: partials, a ticket, the last block of a row sums them in a fixed order and
// publishes the norm), S(c) scales chunk c once its row's norm is published. The order
// puts S(c) shortly after R(c), so its read hits L2:
//   lagged (rows up to L2 / kRowByRowL2Fraction): R(0..lag-1), then R(i) and S(i - lag)
//     alternately, then the last S; lag = one row + one item per block in flight, so
//     a row's norm is ready when its first S is taken, and every chunk is re-read
//     after about `lag` chunks of reads (tens of MB for rows of 1e5-1e6);
//   row by row (longer rows): a row's R in order, then its S from the end, so the
//     lines read last are re-read first; one pause per row while its last R finish.
// Every S load and store is hinted evict-first (StoreHinted): the written lines and
// the lines read for the last time leave L2 before the lines still to be re-read.
// An S item's block waits for its norm, but only on R items taken before it by blocks
// that are running and never wait: the launch makes progress with any grid size, and
// beside any other kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/normalize_ops.cuh"

namespace gpucompute::cuda {
namespace {

struct PipelinePolicy {
  static constexpr int kThreads = ChunkPolicy::kThreads;  // BlockReduceFor's block size
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int64_t kChunkBytes = 16 * 1024;  // one item: 4 16-byte vectors a thread
  static constexpr int64_t kRowByRowL2Fraction = 4;  // rows past L2 / 4 go row by row
};

template <typename T>
constexpr int64_t kPipelineChunk = PipelinePolicy::kChunkBytes / static_cast<int64_t>(sizeof(T));

struct PipelineOrder {
  int64_t chunks_per_row;  // n
  int64_t total;           // rows * n chunks; 2 * total items
  int64_t lag;             // lagged order: S(i) goes with R(i + lag); 0: row by row
};

struct PipelineItem {
  bool scale;
  int64_t chunk;  // row * n + chunk within the row
};

__device__ __forceinline__ PipelineItem PipelineItemAt(const PipelineOrder& o, int64_t s) {
  if (o.lag == 0) {
    const int64_t row = s / (2 * o.chunks_per_row);
    const int64_t q = s - row * 2 * o.chunks_per_row;
    if (q < o.chunks_per_row) return {false, row * o.chunks_per_row + q};
    return {true, row * o.chunks_per_row + (2 * o.chunks_per_row - 1 - q)};
  }
  if (s < o.lag) return {false, s};
  const int64_t q = s - o.lag;
  if (q < 2 * (o.total - o.lag)) return (q & 1) == 0 ? PipelineItem{false, o.lag + q / 2} : PipelineItem{true, q / 2};
  return {true, s - o.total};
}

template <typename T, NormKind kNorm, bool kVec, bool kStreaming>
struct PipelineAgent {
  using BlockReduce = BlockReduceFor<kNorm>;
  static constexpr int64_t kChunk = kPipelineChunk<T>;
  const T* in;
  T* out;
  int64_t cols;
  PipelineOrder order;
  RowPartials<T, kNorm> row_partials;  // announced: S items wait for their row's norm
  unsigned long long* next_item;       // the counter, zeroed by the launcher
  NormalizeResult* result;

  __device__ void Run() {
    __shared__ typename BlockReduce::TempStorage tmp;
    __shared__ unsigned long long item_slot;
    __shared__ bool last;
    __shared__ double norm_slot;
    const unsigned long long items = 2 * static_cast<unsigned long long>(order.total);
    if (threadIdx.x == 0) item_slot = atomicAdd(next_item, 1ull);
    __syncthreads();
    unsigned long long s = item_slot;
    while (s < items) {
      __syncthreads();  // every thread has read item_slot
      unsigned long long next = 0;
      if (threadIdx.x == 0) next = atomicAdd(next_item, 1ull);  // its latency hides behind the item
      const PipelineItem item = PipelineItemAt(order, static_cast<int64_t>(s));
      if (item.scale) {
        Scale(item.chunk, norm_slot);
      } else {
        Reduce(item.chunk, tmp, last);
      }
      if (threadIdx.x == 0) item_slot = next;
      __syncthreads();
      s = item_slot;
    }
  }

  __device__ void Reduce(int64_t chunk, typename BlockReduce::TempStorage& tmp, bool& last) const {
    const int64_t n = order.chunks_per_row;
    const int64_t row = chunk / n;
    const int64_t k = chunk - row * n;
    const int64_t s = row * cols + k * kChunk;
    const int64_t e = row * cols + min(cols, (k + 1) * kChunk);
    row_partials.Add(row, k, n, BlockRangeReduce<T, kNorm, kVec>(in, s, e, tmp), tmp, last, /*announce=*/true);
  }

  __device__ void Scale(int64_t chunk, double& norm_slot) const {
    const int64_t n = order.chunks_per_row;
    const int64_t row = chunk / n;
    const int64_t k = chunk - row * n;
    if (threadIdx.x == 0) {
      while (!row_partials.NormOut(row, n)) __nanosleep(64);
      norm_slot = row_partials.Norm(row);
    }
    __syncthreads();
    const double norm = norm_slot;
    if (!GoodNorm(norm)) return;  // never divide by a bad norm (every thread returns)
    const int64_t s = row * cols + k * kChunk;
    const int64_t e = row * cols + min(cols, (k + 1) * kChunk);
    bool overflow = false;
    WithRowScale<T>(norm, [&](auto scale) { overflow = BlockScaleRange<T, kVec, kStreaming>(in, out, s, e, scale); });
    if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
  }
};

// kStreaming: S loads and stores hinted evict-first.
template <typename T, NormKind kNorm, bool kVec, bool kStreaming>
__global__ void __launch_bounds__(PipelinePolicy::kThreads, PipelinePolicy::kMinBlocksPerSm)
    PipelineKernel(const T* in, T* out, int64_t cols, PipelineOrder order, RowPartials<T, kNorm> row_partials,
                   unsigned long long* next_item, NormalizeResult* result) {
  PipelineAgent<T, kNorm, kVec, kStreaming>{in, out, cols, order, row_partials, next_item, result}.Run();
}

inline cudaError_t L2Bytes(int64_t* bytes) {
  int device = 0, l2 = 0;
  GC_TRY(cudaGetDevice(&device));
  GC_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  *bytes = l2;
  return cudaSuccess;
}

// Whether rows of `cols` go row by row on this device (else lagged).
template <typename T>
cudaError_t PipelineRowByRow(int64_t cols, bool* row_by_row) {
  int64_t l2 = 0;
  GC_TRY(L2Bytes(&l2));
  *row_by_row = cols * static_cast<int64_t>(sizeof(T)) * PipelinePolicy::kRowByRowL2Fraction > l2;
  return cudaSuccess;
}

// row_by_row: the order for rows past a quarter of L2 (PipelineRowByRow); the normalize
// policy runs the lagged order only. kStreaming: S loads and stores hinted evict-first.
template <typename T, NormKind kNorm, bool kStreaming = true>
cudaError_t LaunchPipeline(const T* in, T* out, int64_t rows, int64_t cols, bool row_by_row,
                           NormalizeResult* result, const LaunchEnv& env) {
  PipelineOrder order{CeilDiv(cols, kPipelineChunk<T>), 0, 0};
  order.total = rows * order.chunks_per_row;
  const unsigned grid = GridFor(2 * order.total, env.sm_count, PipelinePolicy::kMinBlocksPerSm);
  if (!row_by_row) order.lag = std::min<int64_t>(order.total, order.chunks_per_row + grid);
  RowPartialsScratch<T, kNorm> s;
  GC_TRY(s.Allocate(rows, order.chunks_per_row, /*with_counter=*/true, 0, result, env));
  auto launch = [&](auto kernel) {
    kernel<<<grid, PipelinePolicy::kThreads, 0, env.stream>>>(in, out, cols, order, s.parts, s.counter, result);
  };
  const bool vec = Aligned16(in) && Aligned16(out);
  vec ? launch(PipelineKernel<T, kNorm, true, kStreaming>) : launch(PipelineKernel<T, kNorm, false, kStreaming>);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace
}  // namespace gpucompute::cuda
