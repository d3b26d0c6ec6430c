// The normalize policy: which path a row length takes on this device (PlanFor), each
// choice with the shape and device where it won, and the launch of a plan
// (LaunchPlanned: normalize.cu, and the lab's candidates for the paths they share).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/normalize_bulk.cuh"
#include "kernels/cuda/normalize_chunks.cuh"
#include "kernels/cuda/normalize_held.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_pipeline.cuh"
#include "kernels/cuda/normalize_row_groups.cuh"
#include "kernels/cuda/normalize_tile.cuh"

namespace gpucompute::cuda {
namespace {

// What runs for one shape (LaunchPlanned).
enum class NormalizePath { kRowGroups, kTile, kCluster, kClusterBulk, kPipeline, kHeld, kChunks };
struct NormalizePlan {
  NormalizePath path = NormalizePath::kChunks;
  int group = 32;           // kRowGroups, kTile: lanes per row
  int64_t limit = 0;        // kTile, kCluster: shared memory one block may have
  int blocks = 0;           // kCluster, kClusterBulk: blocks per row
  int64_t slice = 0;        // kCluster, kClusterBulk: elements per block
  bool bulk_store = false;  // kClusterBulk: a TMA store (else 16-byte stores)
};

// The thresholds of PlanFor, per element type. Each choice won on the shapes named (ms
// for 800 MB of float32 / 1.6 GB of float64 in + out):
// - rows up to kLaneTileCols: a tile, a lane a row (4 for float64 past TilePolicy::LaneRowCols);
//   H200, f32 1e7 x 10: 0.23 ms vs 4 lanes a row's 0.32; f32 13-32 columns: row groups 0.204-0.35 vs tile 0.237-0.48.
// - rows up to kRegisterCols: float32 the narrowest lane group holding the row in registers, float64 a tile of 8 / 16 lanes;
//   H100, f32 64 / 128 columns: 0.296 / 0.301 ms vs a warp a row's 0.627 / 0.349; f64 64: 0.274 vs 0.307.
// - rows that fit half a block's shared memory: a tile (H100, 1e3 and 1e4 columns: ~0.31 f32, ~0.28 f64).
// - longer rows on sm_90 whose bytes are a multiple of 16: the TMA clusters up to kMaxClusterBlocksBeforeHeld blocks;
//   H100, f32 5e4 / 1e5 columns: 0.311 / 0.297 ms vs a 195 KiB tile's 0.538 and clusters of 8's 0.341.
// - rows the TMA clusters split more ways, and past them up to half the held items' slots: the held items;
//   H200, f32 SUM 2.5e5 / 4e5 columns: 0.255-0.258 / 0.252-0.255 ms vs clusters of 16's 0.352-0.356 / 0.286-0.300.
// - unaligned rows past a tile on sm_90: a cluster of 8 blocks, 16 where 8 would take over kWideClusterSliceBytes each;
//   H100, 1e5 columns: f32 8 blocks 0.342 ms vs 16's 0.426 and the chunks' 0.442; f64 16 blocks 0.314 vs 8's 0.360.
// - longer rows up to a quarter of L2 on sm_90: the pipeline, lagged (H100, 1e6 columns: f32 0.351, f64 0.362 ms vs the chunks' 0.428 / 0.430).
// - longer rows, and sm_80/86/89 past a tile: the chunks (H100, f32 1e7 columns: 0.428 ms vs the pipeline's 0.450).
template <typename T>
struct NormalizePolicy {
  static constexpr int64_t kLaneTileCols = sizeof(T) == 4 ? TilePolicy::LaneRowCols<T>() : TilePolicy::kSmallCols;
  static constexpr int64_t kRegisterCols = 32 * RowGroupPolicy::kPerLane;
  static constexpr bool kRegisterRowsInGroups = sizeof(T) == 4;  // else in narrow-lane tiles
  static constexpr int64_t kWideClusterSliceBytes = 64 << 10;
  // float64's clusters of 8 lost to the held items by 3-7% on L2 (H200, 1e5 columns), even on SUM.
  static constexpr int kMaxClusterBlocksBeforeHeld = sizeof(T) == 4 ? 8 : 4;
};

inline void PlanNarrowGroups(int64_t cols, NormalizePlan* plan) {
  plan->path = NormalizePath::kRowGroups;
  plan->group = 4;
  while (cols > plan->group * RowGroupPolicy::kPerLane) plan->group *= 2;
}

template <typename T>
void PlanTile(int64_t cols, bool narrow, NormalizePlan* plan) {
  plan->path = NormalizePath::kTile;
  plan->group = TileGroupFor<T>(cols, narrow);
}

// A cluster where the device has them (sm_90) and the row fits 8 blocks, else the plan
// unchanged; `wide`: 16 blocks (half the slice each).
template <typename T>
cudaError_t PlanCluster(int64_t cols, NormalizePlan* plan, bool wide = false) {
  bool clusters = false;
  GC_TRY(HasClusters(&clusters));
  plan->blocks = clusters ? ClusterBlocksFor<T>(cols, plan->limit, &plan->slice) : 0;
  if (plan->blocks > 0 && wide) {
    plan->blocks = ClusterBlocksFor<T>(cols, plan->limit, &plan->slice, ClusterPolicy::kWideBlocks);
  }
  if (plan->blocks > 0) plan->path = NormalizePath::kCluster;
  return cudaSuccess;
}

// The TMA clusters where the device has them (sm_90) and the row's slices fit (up to
// max_slice_bytes each: the lab tries other sizes), else the plan unchanged. The slices
// go back with the TMA store, except where DRAM is wide against the SMs (WideDram),
// where 16-byte stores won.
// H200, f32 4e5 columns: 16-byte stores 0.293-0.302 ms vs the TMA store's 0.329; H100, f32 1e5: the TMA store ahead by 5%.
template <typename T>
cudaError_t PlanClusterBulk(int64_t cols, NormalizePlan* plan,
                            int64_t max_slice_bytes = ClusterBulkPolicy::kMaxSliceBytes) {
  bool clusters = false;
  GC_TRY(HasClusters(&clusters));
  if (!clusters) return cudaSuccess;
  int64_t slice = 0;
  const int blocks = ClusterBulkBlocksFor<T>(cols, plan->limit, max_slice_bytes, &slice);
  if (blocks == 0) return cudaSuccess;
  bool wide = false;
  GC_TRY(WideDram(&wide));
  plan->path = NormalizePath::kClusterBulk;
  plan->blocks = blocks;
  plan->slice = slice;
  plan->bulk_store = !wide;
  return cudaSuccess;
}

// `bulk`: whether the plan may take the TMA paths, clusters and held items (false: the
// plan for rows they turned down at launch, unaligned ones).
template <typename T>
cudaError_t PlanFor(int64_t cols, NormalizePlan* plan, bool bulk = true) {
  using Policy = NormalizePolicy<T>;
  *plan = NormalizePlan{};
  GC_TRY(TileSharedLimit(&plan->limit));
  const bool fits_tile = TileFits<T>(cols, plan->limit);
  if (cols <= Policy::kLaneTileCols && fits_tile) {
    PlanTile<T>(cols, false, plan);
  } else if (cols <= Policy::kRegisterCols && Policy::kRegisterRowsInGroups) {
    PlanNarrowGroups(cols, plan);
  } else if (fits_tile && 2 * TileSharedBytes<T>(1, cols) <= plan->limit) {
    PlanTile<T>(cols, cols <= Policy::kRegisterCols, plan);
  } else {
    // A row taking over half a block's shared memory leaves one tile a multiprocessor,
    // too few loads in flight.
    if (bulk) GC_TRY(PlanClusterBulk<T>(cols, plan));
    if (plan->path == NormalizePath::kClusterBulk) {
      bool held = false;
      if (plan->blocks > Policy::kMaxClusterBlocksBeforeHeld) GC_TRY(HeldByDefault<T>(cols, &held));
      if (held) plan->path = NormalizePath::kHeld;
      return cudaSuccess;
    }
    if (fits_tile) {
      PlanTile<T>(cols, cols <= Policy::kRegisterCols, plan);
      return cudaSuccess;
    }
    GC_TRY(PlanCluster<T>(cols, plan));
    if (plan->path == NormalizePath::kCluster &&
        plan->slice * static_cast<int64_t>(sizeof(T)) > Policy::kWideClusterSliceBytes) {
      GC_TRY(PlanCluster<T>(cols, plan, /*wide=*/true));
    }
    if (plan->path == NormalizePath::kChunks) {
      bool clusters = false, held = false, row_by_row = false;
      GC_TRY(HasClusters(&clusters));
      if (bulk) GC_TRY(HeldByDefault<T>(cols, &held));
      GC_TRY(PipelineRowByRow<T>(cols, &row_by_row));
      if (clusters && held) {
        plan->path = NormalizePath::kHeld;
      } else if (clusters && !row_by_row) {
        plan->path = NormalizePath::kPipeline;
      }
    }
  }
  return cudaSuccess;
}

// Runs `plan`; the TMA paths (clusters, held items) turn down rows they cannot load
// (unaligned ones), which then run the plan without them.
template <typename T, NormKind kNorm>
cudaError_t LaunchPlanned(const NormalizePlan& plan, const T* in, T* out, int64_t rows, int64_t cols,
                          NormalizeResult* result, const LaunchEnv& env) {
  bool launched = false;
  switch (plan.path) {
    case NormalizePath::kRowGroups:
      if constexpr (NormalizePolicy<T>::kRegisterRowsInGroups) {
        return LaunchRowGroups<T, kNorm>(in, out, rows, cols, plan.group, result, env);
      }
      return cudaErrorInvalidValue;
    case NormalizePath::kTile: return LaunchTile<T, kNorm>(in, out, rows, cols, plan.group, result, env, plan.limit);
    case NormalizePath::kCluster:
      return LaunchClusterRows<T, kNorm>(in, out, rows, cols, plan.blocks, plan.slice, result, env, plan.limit);
    case NormalizePath::kClusterBulk:
      GC_TRY((LaunchClusterBulk<T, kNorm>(in, out, rows, cols, plan.blocks, plan.slice, plan.bulk_store, result,
                                          env, plan.limit, &launched)));
      break;
    case NormalizePath::kPipeline:
      return LaunchPipeline<T, kNorm>(in, out, rows, cols, /*row_by_row=*/false, result, env);
    case NormalizePath::kHeld:
      GC_TRY((LaunchHeld<T, kNorm>(in, out, rows, cols, result, env, &launched)));
      break;
    case NormalizePath::kChunks: return LaunchChunks<T, kNorm>(in, out, rows, cols, result, env);
  }
  if (launched) return cudaSuccess;
  NormalizePlan fallback;
  GC_TRY(PlanFor<T>(cols, &fallback, /*bulk=*/false));
  return LaunchPlanned<T, kNorm>(fallback, in, out, rows, cols, result, env);
}

}  // namespace
}  // namespace gpucompute::cuda
