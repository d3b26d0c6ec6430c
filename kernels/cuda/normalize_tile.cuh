// Rows read from memory once (normalize.cu, its only includer): a block copies a tile
// of whole rows into shared memory (cp.async, 16-byte copies, the whole tile in flight
// at once), reduces every row there in float64 and writes the scaled rows back with
// 16-byte stores. Rows shorter than TilePolicy::kTileBytes share a tile (lane groups
// of 1 to 32 per row, TileGroupFor); a longer row gets a tile of its own, reduced by the whole
// block, up to the shared memory one block may have on the device (227 KiB on sm_90,
// 163 KiB on sm_80, 99 KiB on sm_86/89: the limit is read at run time, so every
// architecture gets the path its memory allows). Longer rows take the chunked path;
// on sm_90 the default spreads such a row, if it fits, over a thread-block cluster
// (ClusterRowKernel: each block holds a slice, the partial norms meet through
// distributed shared memory), still one read.
// Norms, the compensated SUM, the reciprocal rule and the bad rows are those of
// normalize_ops.cuh, the same as on the other paths.
#pragma once

#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/normalize_ops.cuh"

namespace gpucompute::cuda {
namespace {

struct TilePolicy {
  static constexpr int kThreads = ChunkPolicy::kThreads;  // BlockReduceFor's block size
  // Blocks a multiprocessor must hold (registers a thread), by lanes a row: a warp a row
  // 5 (at 2, 70 registers left 37% of issue slots without an eligible warp; 6 spilled),
  // narrower groups 2.
  // H200, f32 SUM rows of 512 / 1e3: 0.204 / 0.203 ms at 4 vs 0.231 / 0.227 at 2, 5 a further 0.5-2%.
  static constexpr int MinBlocksPerSm(int group) { return group == 32 ? 5 : 2; }
  static constexpr int64_t kTileBytes = 32 * 1024;  // rows up to this share a tile
  static constexpr int64_t kMaxTileRows = 2048;     // bounds the per-row slots
  static constexpr int64_t kSmallCols = 32;         // rows this short get 4 lanes, not 32
  // Rows this short get a lane each: four lanes a row gave each row's norm, reciprocal
  // and checks to four lanes, and the 16-byte vectors crossing rows to a per-element
  // path; past it a lane's reads of its row in shared memory conflict (a stride of 64 or
  // 128 bytes).
  // H200, f32 1 / 8 / 12 columns: 0.48 / 0.21 / 0.20 ms vs 4 lanes' 1.90 / 0.29 / 0.255; 16 columns lost (0.31 vs 0.23-0.28).
  template <typename T>
  static constexpr int64_t LaneRowCols() { return sizeof(T) == 4 ? 12 : 10; }
  static constexpr int kUnroll = 4;                 // independent accumulators per lane
  // Tiles of this many rows or more are reduced a warp a row, fewer by the whole block
  // row after row (at 2 rows a tile a warp a row tied or lost up to 7%).
  // H200, f32 L2 rows of 1500-2000 (4-5 a tile): 0.212 ms a warp a row vs 0.275 by the block.
  static constexpr int kWarpRowsFrom = 4;
};

// Shared memory of a tile: per-row slots (the norm, and the reciprocal in T, 0 when
// the row is divided instead), then the rows from a 16-byte boundary.
template <typename T>
__host__ __device__ constexpr int64_t TileSlotBytes(int64_t tile_rows) {
  return (tile_rows * static_cast<int64_t>(sizeof(double) + sizeof(T)) + 15) / 16 * 16;
}
template <typename T>
__host__ __device__ constexpr int64_t TileSharedBytes(int64_t tile_rows, int64_t cols) {
  return TileSlotBytes<T>(tile_rows) + (tile_rows * cols + Vec16<T>::kCount) * static_cast<int64_t>(sizeof(T));
}
template <typename T>
inline int64_t TileRowsFor(int64_t rows, int64_t cols) {
  const int64_t fit = TilePolicy::kTileBytes / (cols * static_cast<int64_t>(sizeof(T)));
  return std::max<int64_t>(1, std::min({fit, TilePolicy::kMaxTileRows, rows}));
}

__device__ __forceinline__ bool DeviceAligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

template <typename T, NormKind kNorm, int kGroup>
struct TileAgent {
  using Op = NormOp<kNorm>;
  using Acc = typename Op::Acc;
  using VT = typename Vec16<T>::type;
  static constexpr int V = Vec16<T>::kCount;
  const T* in;
  T* out;
  int64_t rows, cols, tile_rows;
  NormalizeResult* result;

  __device__ void Run() {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ typename BlockReduceFor<kNorm>::TempStorage tmp;
    double* norms = reinterpret_cast<double*>(smem);
    T* invs = reinterpret_cast<T*>(norms + tile_rows);
    T* data = reinterpret_cast<T*>(smem + TileSlotBytes<T>(tile_rows));
    const bool vec_in = DeviceAligned16(in), vec_out = DeviceAligned16(out);
    const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t row0 = tile * tile_rows;
      const int nrows = static_cast<int>(min(tile_rows, rows - row0));
      const int64_t s = row0 * cols, e = s + nrows * cols;
      const int64_t base = s / V * V;  // data[i - base] holds in[i]: 16-byte aligned vectors
      Load(data, s, e, base, vec_in);
      Reduce(data + (s - base), nrows, row0, norms, invs, tmp);
      Scale(data, s, e, base, vec_out, row0, norms, invs);
      __syncthreads();  // the next tile reuses the slots and data
    }
  }

  __device__ void Load(T* data, int64_t s, int64_t e, int64_t base, bool vec) const {
    if (vec) {
      // Whole vectors from the one holding in[s] (its first elements belong to the
      // previous row and are never used) to the last one ending by e; then the tail.
      const int64_t body_end = e / V * V;
      const int n = static_cast<int>((body_end - base) / V);
      for (int k = threadIdx.x; k < n; k += blockDim.x) {
        __pipeline_memcpy_async(data + static_cast<int64_t>(k) * V, in + base + static_cast<int64_t>(k) * V, 16);
      }
      __pipeline_commit();
      for (int64_t i = max(body_end, s) + threadIdx.x; i < e; i += blockDim.x) data[i - base] = in[i];
      __pipeline_wait_prior(0);
    } else {
#pragma unroll 8
      for (int64_t i = s + threadIdx.x; i < e; i += blockDim.x) data[i - base] = in[i];
    }
    __syncthreads();
  }

  // One lane's share of a row in shared memory: elements first, first + step, ...
  // Read from shared memory, a SUM waits on the float64 pipe: AddFloat64Bound.
  __device__ Acc RowShare(const T* row, int first, int step) const {
    Acc a[TilePolicy::kUnroll];
#pragma unroll
    for (int u = 0; u < TilePolicy::kUnroll; ++u) a[u] = Op::Identity();
    int64_t c = first;
    for (; c + (TilePolicy::kUnroll - 1) * step < cols; c += TilePolicy::kUnroll * step) {
#pragma unroll
      for (int u = 0; u < TilePolicy::kUnroll; ++u) {
        a[u] = Op::AddFloat64Bound(a[u], Op::Transform(row[c + u * step]));
      }
    }
    for (; c < cols; c += step) a[0] = Op::AddFloat64Bound(a[0], Op::Transform(row[c]));
    return Op::Combine(Op::Combine(a[0], a[1]), Op::Combine(a[2], a[3]));
  }

  __device__ void SetSlot(int r, int64_t row0, double norm, double* norms, T* invs) const {
    if (!FastNorm<T, kNorm>(norm)) {  // never divided by: the row stays unwritten
      atomicMin(&result->bad_row, static_cast<unsigned long long>(row0 + r));
      norms[r] = __longlong_as_double(0x7ff8000000000000ll);  // NaN: skip
      invs[r] = T(0);
      return;
    }
    const T inv = static_cast<T>(1.0 / norm);
    norms[r] = norm;
    invs[r] = isinf(inv) ? T(0) : inv;  // 0: no finite reciprocal in T, divide (RowScale)
  }

  __device__ void Reduce(const T* rows_data, int nrows, int64_t row0, double* norms, T* invs,
                         typename BlockReduceFor<kNorm>::TempStorage& tmp) const {
    if (kGroup < 32 || nrows >= TilePolicy::kWarpRowsFrom) {  // lane groups over the rows
      const int lane = threadIdx.x % kGroup;
      const unsigned mask =
          kGroup == 32 ? 0xffffffffu : (((1u << kGroup) - 1u) << (threadIdx.x % 32 / kGroup * kGroup));
      for (int r = threadIdx.x / kGroup; r < nrows; r += TilePolicy::kThreads / kGroup) {
        const Acc share = RowShare(rows_data + static_cast<int64_t>(r) * cols, lane, kGroup);
        const Acc acc = ButterflyCombine<Op, kGroup>(share, mask);
        if (lane == 0) SetSlot(r, row0, Op::Finalize(acc), norms, invs);
      }
    } else {  // few long rows: the whole block on each
      for (int r = 0; r < nrows; ++r) {
        Acc acc = RowShare(rows_data + static_cast<int64_t>(r) * cols, threadIdx.x, TilePolicy::kThreads);
        acc = BlockReduceFor<kNorm>(tmp).Reduce(acc, typename Op::Functor{});
        if (threadIdx.x == 0) SetSlot(r, row0, Op::Finalize(acc), norms, invs);
        __syncthreads();  // tmp is reused
      }
    }
    __syncthreads();
  }

  // x scaled for tile row r; false when the row is bad (left unwritten).
  __device__ __forceinline__ bool ScaleOne(T x, int r, const double* norms, const T* invs, int64_t row0,
                                           T& y) const {
    const T inv = invs[r];
    if (inv != T(0)) {
      y = x * inv;
    } else {
      const double norm = norms[r];
      if (isnan(norm)) return false;
      y = static_cast<T>(static_cast<double>(x) / norm);
    }
    if constexpr (kNorm == NormKind::kSum) {
      if (isinf(y)) atomicMin(&result->bad_row, static_cast<unsigned long long>(row0 + r));
    }
    return true;
  }

  __device__ void Scale(const T* data, int64_t s, int64_t e, int64_t base, bool vec, int64_t row0,
                        const double* norms, const T* invs) const {
    const unsigned ucols = static_cast<unsigned>(cols);
    auto scalar = [&](int64_t i) {
      T y;
      if (ScaleOne(data[i - base], static_cast<int>(static_cast<unsigned>(i - s) / ucols), norms, invs, row0, y)) {
        out[i] = y;
      }
    };
    if (!vec) {
      for (int64_t i = s + threadIdx.x; i < e; i += blockDim.x) scalar(i);
      return;
    }
    const int64_t body = min(e, (s + V - 1) / V * V);  // first vector boundary in the tile
    const int64_t body_end = max(body, e / V * V);
    for (int64_t i = s + threadIdx.x; i < body; i += blockDim.x) scalar(i);
    for (int64_t i = body_end + threadIdx.x; i < e; i += blockDim.x) scalar(i);
    // The vectors: each thread's next one lies a fixed stride on, so its row and
    // column advance by that stride's rows and columns, no division a vector. A
    // vector inside one row whose reciprocal exists is scaled whole (ncu, H200, f32
    // 1e5 x 1000: the division and per-element tests of this loop were most of the
    // tile's instructions, and SUM's tile was issue-bound at 74% of issue slots).
    const int64_t first = body + static_cast<int64_t>(threadIdx.x) * V;
    if (first >= body_end) return;
    const unsigned stride = blockDim.x * V;
    const unsigned stride_rows = stride / ucols, stride_cols = stride % ucols;
    const unsigned l = static_cast<unsigned>(first - s);
    int r = static_cast<int>(l / ucols);
    unsigned c = l - static_cast<unsigned>(r) * ucols;  // the vector's first column
    for (int64_t i = first; i < body_end; i += stride) {
      const VT v = *reinterpret_cast<const VT*>(data + (i - base));
      const T inv = invs[r];
      if (c + V <= ucols && inv != T(0)) {
        const VT w = ScaleVec<T>(v, MultiplyBy<T>{inv});
        if constexpr (kNorm == NormKind::kSum) {
          if (AnyInf(w)) atomicMin(&result->bad_row, static_cast<unsigned long long>(row0 + r));
        }
        *reinterpret_cast<VT*>(out + i) = w;
      } else {
        const T* x = reinterpret_cast<const T*>(&v);
        VT w;
        T* y = reinterpret_cast<T*>(&w);
        int row = r;
        unsigned col = c;
        bool all = true;
        bool ok[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (col == ucols) {  // the next row starts here
            ++row;
            col = 0;
          }
          ok[k] = ScaleOne(x[k], row, norms, invs, row0, y[k]);
          all &= ok[k];
          ++col;
        }
        if (all) {
          *reinterpret_cast<VT*>(out + i) = w;
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            if (ok[k]) out[i + k] = y[k];
          }
        }
      }
      r += static_cast<int>(stride_rows);
      c += stride_cols;
      if (c >= ucols) {
        c -= ucols;
        ++r;
      }
    }
  }
};

template <typename T, NormKind kNorm, int kGroup>
__global__ void __launch_bounds__(TilePolicy::kThreads, TilePolicy::MinBlocksPerSm(kGroup))
    TileKernel(const T* in, T* out, int64_t rows, int64_t cols, int64_t tile_rows, NormalizeResult* result) {
  TileAgent<T, kNorm, kGroup>{in, out, rows, cols, tile_rows, result}.Run();
}

// The most shared memory one block of TileKernel may use here (opt-in limit less the
// kernel's static reduction storage).
inline cudaError_t TileSharedLimit(int64_t* bytes) {
  int device = 0, optin = 0;
  GC_TRY(cudaGetDevice(&device));
  GC_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  *bytes = optin - 1024;
  return cudaSuccess;
}

template <typename T>
inline bool TileFits(int64_t cols, int64_t limit) {
  return TileSharedBytes<T>(1, cols) <= limit;
}

// Lanes per row in a tile of several rows: 1 for rows up to TilePolicy::LaneRowCols,
// 4 up to TilePolicy::kSmallCols, else 32; `narrow` (float64 up to 256 columns) gives
// rows up to 512 the narrowest group with at most 16 elements a lane (100 columns: 8
// lanes, 4 rows a warp at once, 3 shuffle rounds instead of 5; the warp per row left
// the tile latency-bound). float32 takes no narrow tile and no row of LaneRowCols to
// kSmallCols (the row groups take those): its tiles are of 1 or 32 lanes a row.
template <typename T>
int TileGroupFor(int64_t cols, bool narrow) {
  if (cols <= TilePolicy::LaneRowCols<T>()) return 1;
  if (cols <= TilePolicy::kSmallCols) return 4;
  if (!narrow) return 32;
  int group = 8;
  while (group < 32 && cols > group * 16) group *= 2;
  return group;
}

// kEveryGroup: float32 tiles of 4, 8 and 16 lanes a row too, which only the lab's
// candidates launch (the server builds float32's 1 and 32 alone).
template <typename T, NormKind kNorm, bool kEveryGroup = false>
cudaError_t LaunchTile(const T* in, T* out, int64_t rows, int64_t cols, int group, NormalizeResult* result,
                       const LaunchEnv& env, int64_t limit) {
  const int64_t tile_rows = TileRowsFor<T>(rows, cols);
  const int64_t smem = TileSharedBytes<T>(tile_rows, cols);
  const int64_t tiles = CeilDiv(rows, tile_rows);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{1} << 20));
  auto launch = [&](auto kernel) -> cudaError_t {
    if (smem > 48 * 1024) GC_TRY(AllowSharedLimit(kernel, limit));
    kernel<<<grid, TilePolicy::kThreads, static_cast<size_t>(smem), env.stream>>>(in, out, rows, cols, tile_rows,
                                                                                 result);
    GC_CHECK_LAUNCH();
    return cudaSuccess;
  };
  if constexpr (sizeof(T) == 4 && !kEveryGroup) {  // float32's tiles: a lane a row or a warp (TileGroups)
    return group == 1 ? launch(TileKernel<T, kNorm, 1>) : launch(TileKernel<T, kNorm, 32>);
  } else {
    switch (group) {
      case 1: return launch(TileKernel<T, kNorm, 1>);
      case 4: return launch(TileKernel<T, kNorm, 4>);
      case 8: return launch(TileKernel<T, kNorm, 8>);
      case 16: return launch(TileKernel<T, kNorm, 16>);
      default: return launch(TileKernel<T, kNorm, 32>);
    }
  }
}

// ---- sm_90: one row over a cluster of up to ClusterPolicy::kMaxBlocks blocks --------------
struct ClusterPolicy {
  static constexpr int kThreads = TilePolicy::kThreads;
  static constexpr int kMaxBlocks = 8;    // the portable cluster size
  static constexpr int kWideBlocks = 16;  // sm_90's non-portable size, for rows whose 8 slices are long
};

// Grid: rows x blocks, clusters of `blocks` along x; block k of row r holds elements
// [k * slice, (k + 1) * slice) of the row (slice a multiple of the vector width).
template <typename T, NormKind kNorm>
__global__ void __launch_bounds__(ClusterPolicy::kThreads, 1)
    ClusterRowKernel(const T* in, T* out, int64_t rows, int64_t cols, int64_t slice, NormalizeResult* result) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using Op = NormOp<kNorm>;
  using Acc = typename Op::Acc;
  constexpr int V = Vec16<T>::kCount;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ typename BlockReduceFor<kNorm>::TempStorage tmp;
  __shared__ Acc partial;
  __shared__ double norm_slot[1];
  __shared__ T inv_slot[1];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  const int64_t row = blockIdx.x / blocks;
  const int64_t s = row * cols + min(cols, rank * slice);
  const int64_t e = row * cols + min(cols, (rank + 1) * slice);
  const int64_t base = s / V * V;
  T* data = reinterpret_cast<T*>(smem);
  // The tile agent on a one-row tile of this slice (so its row index is always 0).
  const TileAgent<T, kNorm, 32> agent{in, out, rows, e > s ? e - s : int64_t{1}, 1, result};
  if (e > s) agent.Load(data, s, e, base, DeviceAligned16(in));
  else __syncthreads();
  Acc acc = e > s ? agent.RowShare(data + (s - base), threadIdx.x, ClusterPolicy::kThreads) : Op::Identity();
  acc = BlockReduceFor<kNorm>(tmp).Reduce(acc, typename Op::Functor{});
  if (threadIdx.x == 0) partial = acc;
  cluster.sync();  // every partial is written
  if (threadIdx.x == 0) {  // the same fixed order in every block: the same norm
    Acc total = Op::Identity();
    for (unsigned k = 0; k < blocks; ++k) total = Op::Combine(total, *cluster.map_shared_rank(&partial, k));
    agent.SetSlot(0, row, Op::Finalize(total), norm_slot, inv_slot);
  }
  cluster.sync();  // no block leaves while another reads its partial; the slot is seen
  if (e > s) agent.Scale(data, s, e, base, DeviceAligned16(out), row, norm_slot, inv_slot);
#endif
}

// Blocks per row and the slice of each, if a row of `cols` fits in a cluster; 0 if not.
// Always the most blocks (the row's smallest slices): a block of a long row holds one
// slice through load, reduce, cluster sync and scale, so several clusters per SM in
// flight overlap one's loads with another's scaling (a 400 KB row in 2 slices of
// 200 KB left one block per SM and measured 0.42-0.63 of D2D).
// `blocks`: kMaxBlocks, or kWideBlocks for slices half as long (twice the blocks per SM).
template <typename T>
inline int ClusterBlocksFor(int64_t cols, int64_t limit, int64_t* slice, int blocks = ClusterPolicy::kMaxBlocks) {
  constexpr int64_t V = Vec16<T>::kCount;
  const int64_t per_block = ((limit - 256) / static_cast<int64_t>(sizeof(T)) - V) / V * V;
  *slice = CeilDiv(CeilDiv(cols, blocks), V) * V;
  return *slice <= per_block ? blocks : 0;
}

// A launch of `grid` blocks of `threads`, in clusters of `blocks` along x; *attr holds
// the cluster size and must outlive the config.
inline cudaLaunchConfig_t ClusterLaunchConfig(int64_t grid, int blocks, int threads, int64_t smem,
                                              cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(blocks);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

template <typename T, NormKind kNorm>
cudaError_t LaunchClusterRows(const T* in, T* out, int64_t rows, int64_t cols, int blocks, int64_t slice,
                              NormalizeResult* result, const LaunchEnv& env, int64_t limit) {
  const int64_t smem = (slice + Vec16<T>::kCount) * static_cast<int64_t>(sizeof(T));
  GC_REQUIRE(rows * blocks <= 0x7fffffff);
  auto kernel = ClusterRowKernel<T, kNorm>;
  GC_TRY(AllowSharedLimit(kernel, limit));
  if (blocks > ClusterPolicy::kMaxBlocks) {
    GC_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config =
      ClusterLaunchConfig(rows * blocks, blocks, ClusterPolicy::kThreads, smem, env.stream, &attr);
  if (blocks > ClusterPolicy::kMaxBlocks) {
    // A device that cannot place such a cluster: 8 blocks (the plan made sure the row fits).
    int clusters = 0;
    GC_TRY(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    if (clusters == 0) {
      blocks = ClusterBlocksFor<T>(cols, limit, &slice);
      GC_REQUIRE(blocks > 0);
      return LaunchClusterRows<T, kNorm>(in, out, rows, cols, blocks, slice, result, env, limit);
    }
  }
  GC_TRY(cudaLaunchKernelEx(&config, kernel, in, out, rows, cols, slice, result));
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

inline cudaError_t HasClusters(bool* yes) {
  int device = 0, major = 0;
  GC_TRY(cudaGetDevice(&device));
  GC_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  *yes = major >= 9;
  return cudaSuccess;
}

}  // namespace
}  // namespace gpucompute::cuda
