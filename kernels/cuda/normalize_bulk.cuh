// sm_90, long rows read once with TMA (normalize_plan.cuh: aligned rows past a tile up
// to 16 blocks' slices): one persistent launch of as many clusters as fit at once, one
// block per SM;
// cluster j owns rows j, j + clusters, ...
// Block k of a cluster holds slice k of its row in shared memory, loaded by ONE bulk
// copy (cp.async.bulk, completion on an mbarrier), with two buffers: while row i is
// reduced and scaled from one, row i + 1 already lands in the other, so every SM keeps
// a load in flight without the L2 re-reads of the pipeline. The blocks' float64
// partials meet through distributed shared memory (slots by row parity: one cluster
// barrier per row); every block combines them in the same order, so all get the same
// norm. The scaled slice goes back by a bulk store from shared memory (kBulkStore) or
// 16-byte stores from registers. Bulk copies need 16-byte aligned addresses and sizes:
// the path takes rows whose bytes are a multiple of 16 (the plan) and aligned pointers
// (the launch); anything else runs the default.
// Norms, the compensated SUM, the reciprocal rule and the bad rows are those of
// normalize_ops.cuh, as on the other paths.
#pragma once

#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_tile.cuh"  // ClusterLaunchConfig

namespace gpucompute::cuda {
namespace {

struct ClusterBulkPolicy {
  static constexpr int kThreads = 512;  // one block per SM: enough warps to hide float64 latency
  // Two with half slices (kClusterBulkHalf): 64 registers a thread at most, which every
  // instance fits without spills.
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kUnroll = 4;                      // independent accumulators per thread
  static constexpr int64_t kMaxSliceBytes = 100 << 10;   // two buffers of it per block
  static constexpr int64_t kMinRowBytes = 32 << 10;      // shorter rows: tiles
  static constexpr int kMinBlocks = 2;
  static constexpr int kMaxPortableBlocks = 8;
  static constexpr int kMaxBlocks = 16;  // sm_90's non-portable cluster size
  static constexpr int64_t kReservedBytes = 1024;  // static shared memory of the kernel
};

template <typename T, NormKind kNorm, bool kBulkStore>
struct ClusterBulkAgent {
  using Op = NormOp<kNorm>;
  using Acc = typename Op::Acc;
  using VT = typename Vec16<T>::type;
  using BlockReduce = cub::BlockReduce<Acc, ClusterBulkPolicy::kThreads>;
  static constexpr int V = Vec16<T>::kCount;
  static constexpr int kThreads = ClusterBulkPolicy::kThreads;

  struct Shared {
    typename BlockReduce::TempStorage reduce;
    uint64_t loaded[2];  // mbarrier of each buffer: its slice has landed
    Acc partial[2];      // this block's partial norm, by row parity (read by the cluster)
    Acc gathered[ClusterBulkPolicy::kMaxBlocks];
    double norm;
  };

  const T* in;
  T* out;
  int64_t rows, cols, slice;
  NormalizeResult* result;

  __device__ void Run(Shared& sh, T* buffers) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    namespace ptx = ::cuda::ptx;
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
    const int64_t clusters = gridDim.x / blocks;
    const int64_t first = min(cols, rank * slice);
    const int64_t len = min(cols, (rank + 1) * slice) - first;  // a multiple of V
    const uint32_t bytes = static_cast<uint32_t>(len * static_cast<int64_t>(sizeof(T)));
    if (threadIdx.x == 0) {
      ptx::mbarrier_init(&sh.loaded[0], 1);
      ptx::mbarrier_init(&sh.loaded[1], 1);
      ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    __syncthreads();
    int64_t row = blockIdx.x / blocks;
    if (threadIdx.x == 0 && row < rows) IssueLoad(sh, buffers, 0, row, first, bytes);
    for (int64_t it = 0; row < rows; ++it, row += clusters) {
      const int b = static_cast<int>(it & 1);
      T* buf = buffers + b * slice;
      if (threadIdx.x == 0 && row + clusters < rows) {
        // The other buffer was last read by the previous row's scaling (every thread
        // passed the barrier ending it) and, with kBulkStore, its store.
        if constexpr (kBulkStore) ptx::cp_async_bulk_wait_group_read(ptx::n32_t<0>{});
        IssueLoad(sh, buffers, b ^ 1, row + clusters, first, bytes);
      }
      while (!ptx::mbarrier_try_wait_parity(&sh.loaded[b], static_cast<uint32_t>((it >> 1) & 1))) {
      }
      const Acc part = BlockReduce(sh.reduce).Reduce(SliceReduce(buf, len), typename Op::Functor{});
      if (threadIdx.x == 0) sh.partial[b] = part;
      // Every partial of this row written; a slot is rewritten two rows later, after
      // the next row's barrier, which no block passes before its reads of this one.
      // Only warp 0 writes and reads the partials: it arrives with release, the other
      // warps relaxed, so that they do not wait for their last row's stores to drain
      // (ncu, H200, f64 L2 500 x 1e5: membar stalls 14-17 an issue, the top reason).
      if (threadIdx.x < 32) {
        ptx::barrier_cluster_arrive(ptx::sem_release);
      } else {
        ptx::barrier_cluster_arrive(ptx::sem_relaxed);
      }
      ptx::barrier_cluster_wait(ptx::sem_acquire);
      if (threadIdx.x < blocks) sh.gathered[threadIdx.x] = *cluster.map_shared_rank(&sh.partial[b], threadIdx.x);
      __syncwarp();
      if (threadIdx.x == 0) {  // the same fixed order in every block: the same norm
        Acc total = Op::Identity();
        for (unsigned k = 0; k < blocks; ++k) total = Op::Combine(total, sh.gathered[k]);
        sh.norm = Op::Finalize(total);
        if (!FastNorm<T, kNorm>(sh.norm) && rank == 0) {
          atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
        }
      }
      __syncthreads();
      const double norm = sh.norm;
      if (!FastNorm<T, kNorm>(norm)) continue;  // never divided by: the row stays unwritten
      T* dst = out + row * cols + first;
      bool overflow = false;
      WithRowScale<T>(norm, [&](auto scale) { overflow = ScaleSlice(buf, len, dst, scale); });
      if constexpr (kBulkStore) ptx::fence_proxy_async(ptx::space_shared);  // scaled data seen by the copy
      overflow = __syncthreads_or(overflow);
      if (threadIdx.x == 0) {
        if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
        if constexpr (kBulkStore) {
          if (bytes > 0) {
            ptx::cp_async_bulk(ptx::space_global, ptx::space_shared, dst, buf, bytes);
            ptx::cp_async_bulk_commit_group();
          }
        }
      }
    }
    if constexpr (kBulkStore) {
      if (threadIdx.x == 0) ptx::cp_async_bulk_wait_group(ptx::n32_t<0>{});
    }
    cluster.sync();  // no block leaves while another may still read its partial
#endif
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __device__ void IssueLoad(Shared& sh, T* buffers, int b, int64_t row, int64_t first, uint32_t bytes) const {
    namespace ptx = ::cuda::ptx;
    (void)ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &sh.loaded[b], bytes);
    if (bytes > 0) {
      ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, buffers + b * slice, in + row * cols + first, bytes,
                         &sh.loaded[b]);
    }
  }
#endif

  __device__ Acc SliceReduce(const T* buf, int64_t len) const {
    const VT* v = reinterpret_cast<const VT*>(buf);
    const int n = static_cast<int>(len / V);
    Acc a[ClusterBulkPolicy::kUnroll];
#pragma unroll
    for (int u = 0; u < ClusterBulkPolicy::kUnroll; ++u) a[u] = Op::Identity();
    int k = threadIdx.x;
    for (; k + (ClusterBulkPolicy::kUnroll - 1) * kThreads < n; k += ClusterBulkPolicy::kUnroll * kThreads) {
#pragma unroll
      for (int u = 0; u < ClusterBulkPolicy::kUnroll; ++u) a[u] = AccumulateVec<T, Op>(a[u], v[k + u * kThreads]);
    }
    for (; k < n; k += kThreads) a[0] = AccumulateVec<T, Op>(a[0], v[k]);
    return Op::Combine(Op::Combine(a[0], a[1]), Op::Combine(a[2], a[3]));
  }

  // The slice scaled, in place (kBulkStore) or straight to dst; whether a quotient
  // overflowed T (only a SUM norm can make one).
  template <typename Scale>
  __device__ bool ScaleSlice(T* buf, int64_t len, T* dst, Scale scale) const {
    VT* v = reinterpret_cast<VT*>(buf);
    return SharedVectorsScale<T, kNorm, kThreads, /*kStreaming=*/false>(
        v, kBulkStore ? v : reinterpret_cast<VT*>(dst), static_cast<int>(len / V), scale);
  }
};

template <typename T, NormKind kNorm, bool kBulkStore>
__global__ void __launch_bounds__(ClusterBulkPolicy::kThreads, ClusterBulkPolicy::kMinBlocksPerSm)
    ClusterBulkKernel(const T* in, T* out, int64_t rows, int64_t cols, int64_t slice, NormalizeResult* result) {
  using Agent = ClusterBulkAgent<T, kNorm, kBulkStore>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ typename Agent::Shared sh;
  Agent{in, out, rows, cols, slice, result}.Run(sh, reinterpret_cast<T*>(smem));
}

// Blocks per row (the fewest of 2, 4, 8, 16 whose slices fit two buffers of at most
// `slice_bytes`) and the slice of each (a multiple of 16 bytes); 0 where the path does
// not apply.
template <typename T>
inline int ClusterBulkBlocksFor(int64_t cols, int64_t limit, int64_t slice_bytes, int64_t* slice) {
  constexpr int64_t V = Vec16<T>::kCount;
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(T));
  if (row_bytes % 16 != 0 || row_bytes < ClusterBulkPolicy::kMinRowBytes) return 0;
  const int64_t max_slice_bytes = std::min(slice_bytes, (limit - ClusterBulkPolicy::kReservedBytes) / 2);
  for (int blocks = ClusterBulkPolicy::kMinBlocks; blocks <= ClusterBulkPolicy::kMaxBlocks; blocks *= 2) {
    *slice = CeilDiv(CeilDiv(cols, blocks), V) * V;
    if (*slice * static_cast<int64_t>(sizeof(T)) <= max_slice_bytes) return blocks;
  }
  return 0;
}

// Launches the path; *launched false (nothing run) where the pointers are not 16-byte
// aligned or the device cannot place such a cluster: the caller runs the default.
template <typename T, NormKind kNorm>
cudaError_t LaunchClusterBulk(const T* in, T* out, int64_t rows, int64_t cols, int blocks, int64_t slice,
                              bool bulk_store, NormalizeResult* result, const LaunchEnv& env, int64_t limit,
                              bool* launched) {
  *launched = false;
  if (!Aligned16(in) || !Aligned16(out)) return cudaSuccess;
  auto kernel = bulk_store ? ClusterBulkKernel<T, kNorm, true> : ClusterBulkKernel<T, kNorm, false>;
  GC_TRY(AllowSharedLimit(kernel, limit));
  if (blocks > ClusterBulkPolicy::kMaxPortableBlocks) {
    GC_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = ClusterLaunchConfig(blocks, blocks, ClusterBulkPolicy::kThreads,
                                                  2 * slice * static_cast<int64_t>(sizeof(T)), env.stream, &attr);
  int clusters = 0;
  GC_TRY(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  if (clusters == 0) return cudaSuccess;
  config.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(clusters, rows) * blocks));
  GC_TRY(cudaLaunchKernelEx(&config, kernel, in, out, rows, cols, slice, result));
  GC_CHECK_LAUNCH();
  *launched = true;
  return cudaSuccess;
}

}  // namespace
}  // namespace gpucompute::cuda
