// The normalize policy (normalize.cu, its only includer): which path runs a shape
// (PlanFor), and its description for the benchmark's log (DescribePlan).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/normalize_bulk.cuh"
#include "kernels/cuda/normalize_held.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_pipeline.cuh"
#include "kernels/cuda/normalize_tile.cuh"
#include "kernels/cuda/normalize_variants.h"

namespace gpucompute::cuda {
namespace {

// What runs for one shape (LaunchT in normalize.cu runs it).
enum class NormalizePath { kRowGroups, kTile, kCluster, kClusterBulk, kPipeline, kHeld, kChunks };
struct NormalizePlan {
  NormalizePath path = NormalizePath::kChunks;
  int group = 32;          // kRowGroups, kTile: lanes per row
  int64_t limit = 0;       // kTile, kCluster: shared memory one block may have
  int blocks = 0;          // kCluster, kClusterBulk: blocks per row
  int64_t slice = 0;       // kCluster, kClusterBulk: elements per block
  bool bulk_store = false;  // kClusterBulk: a TMA store (else 16-byte stores)
  bool streaming = false;  // kPipeline: cache hints
  PipelineOrderChoice order = PipelineOrderChoice::kByRowSize;  // kPipeline
};

// The default per shape class, the winners of bench/run_gpu_kernels.sh (H100, run 2 at
// 196d676; ms for 800 MB of float32 / 1.6 GB of float64 in + out):
// - rows <= kLaneTileCols: a tile, a lane a row up to TilePolicy::kLaneRowCols, else 4
//   (f32 1e7 x 10: 0.333; a lane a row, H200: 0.32 -> 0.23); float32 only the rows of a
//   lane, the rest of its short rows go to the lane groups (H200, session 19, ms against
//   the tile: 13 columns 0.348-0.351 / 0.477-0.480, 20: 0.231-0.232 / 0.274-0.277, 24:
//   0.205-0.208 / 0.257-0.261, 32: 0.204-0.205 / 0.237-0.238; even at 25 SUM, 5% behind
//   at 16 L2; float64 lost 1-6% in groups at 16-32 and keeps the tile);
// - rows up to kRegisterCols: float32 the narrowest lane group holding the row in
//   registers (64: 0.296 against a warp a row's 0.627; 100: 0.303 / 0.426; 128: 0.301 /
//   0.349), float64 a tile with 8 / 16 lanes a row (64: 0.274 / 0.307; 128: 0.274 /
//   0.294; 256: 0.276 / 0.290);
// - rows that fit half a block's shared memory: a tile (1e3, 1e4: ~0.31 f32, ~0.28 f64);
// - longer rows: on sm_90 the TMA clusters where the row's bytes are a multiple of 16
//   and its slices fit (normalize_bulk.cuh; H100, 2026-11-24 session 8, against what
//   ran there before: f32 5e4 0.311 / 0.538 ms (a 195 KiB tile), 1e5 0.297 / 0.341 and
//   4e5 0.370 / 0.432 (clusters of 8 / 16), f64 5e4 0.291 / 0.307, 1e5 0.305 / 0.316);
// - else a tile where the row fits one block; else on sm_90 a cluster where the row
//   fits it, of 8 blocks, or of 16 where 8 would hold more than
//   kWideClusterSliceBytes each (1e5: f32 8 blocks 0.342 against
//   16's 0.426 and the chunks' 0.442; f64 16 blocks 0.314 against 8's 0.360, run of
//   2026-11-24);
// - rows the TMA clusters split 16 ways, and rows past them up to half the held items'
//   slots (~13 MB on an H200): the held items (H200, session 21, ms against the
//   default before: clusters of 16, f32 SUM 2.5e5 0.255-0.258 / 0.352-0.356, 4e5
//   0.252-0.255 / 0.286-0.300, L2 4e5 0.233-0.238 / 0.294-0.299; the lagged pipeline,
//   f32 L2 3e6 0.272-0.282 / 0.300-0.305, f64 L2 1.5e6 0.279-0.280 / 0.299-0.306; held
//   items before, f32 SUM 1e6 0.252-0.261 / 0.288-0.295, f64 L2 4e5 0.231-0.232 /
//   0.253-0.264), and float64 rows the clusters split 8 ways (L2 1e5 0.229-0.234 against
//   0.242-0.253, 7.5e4 0.231-0.237 / 0.240-0.244; SUM 1e5 even); float32 clusters of 8
//   stay (SUM 2e5 0.247 against 0.255-0.261, L2 2e5 4% behind), and every cluster of 4
//   (f32 SUM 1e5 0.239-0.246 against 0.261-0.266, f64 L2 5e4 0.230-0.232 / 0.233-0.237);
// - longer rows up to a quarter of L2: the pipeline, lagged (1e6: f32 0.351, f64
//   0.362 against the chunks' 0.428 / 0.430);
// - longer rows, and sm_80/86/89 past a tile: the chunks in one pass (1e7: f32 0.428
//   against the pipeline's 0.450 lagged / 0.487 row by row).
template <typename T>
struct DefaultNormalizePolicy {
  static constexpr int64_t kLaneTileCols = sizeof(T) == 4 ? TilePolicy::kLaneRowCols<T> : TilePolicy::kSmallCols;
  static constexpr int64_t kRegisterCols = 32 * RowGroupPolicy::kPerLane;
  static constexpr bool kRegisterRowsInGroups = sizeof(T) == 4;  // else in narrow-lane tiles
  static constexpr int64_t kWideClusterSliceBytes = 64 << 10;
  // Rows the TMA clusters split more ways go to the held items: float32 16 blocks,
  // float64 8 (its clusters of 8 lost by 3-7% on L2, even on SUM).
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

// A cluster where the device has them (sm_90) and the row fits 8 blocks, else chunks;
// `wide`: 16 blocks (half the slice each).
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

// The TMA clusters where the device has them (sm_90) and the row's slices fit
// (`half`: slices up to ClusterBulkPolicy::kHalfSliceBytes where they can be, two
// blocks an SM); else the plan unchanged. The slices go back with the TMA store,
// except on wide-DRAM devices (WideDram), where 16-byte stores won (H200, two runs of
// run_gpu_kernels.sh, sessions 14 and 15: f32 4e5 0.293-0.302 ms against 0.329, f64 1e5
// 0.245-0.253 against 0.266-0.272, f64 5e4 0.230-0.232 against 0.241-0.242; f32 5e4 and
// 1e5 within 2% either way) and the H100's runs had the TMA store ahead (session 10:
// f32 1e5 by 5%, even elsewhere).
template <typename T>
cudaError_t PlanClusterBulk(int64_t cols, bool half, NormalizePlan* plan) {
  bool clusters = false;
  GC_TRY(HasClusters(&clusters));
  if (!clusters) return cudaSuccess;
  int64_t slice = 0;
  int blocks = half ? ClusterBulkBlocksFor<T>(cols, plan->limit, ClusterBulkPolicy::kHalfSliceBytes, &slice) : 0;
  if (blocks == 0) blocks = ClusterBulkBlocksFor<T>(cols, plan->limit, ClusterBulkPolicy::kMaxSliceBytes, &slice);
  if (blocks == 0) return cudaSuccess;
  bool wide = false;
  GC_TRY(WideDram(&wide));
  plan->path = NormalizePath::kClusterBulk;
  plan->blocks = blocks;
  plan->slice = slice;
  plan->bulk_store = !wide;
  return cudaSuccess;
}

// `bulk`: whether kDefault may take the TMA paths, clusters and held items (false: the
// plan for rows they turned down at launch, unaligned ones).
template <typename T>
cudaError_t PlanFor(int64_t cols, NormalizeVariant variant, NormalizePlan* plan, bool bulk = true) {
  using Policy = DefaultNormalizePolicy<T>;
  *plan = NormalizePlan{};
  GC_TRY(TileSharedLimit(&plan->limit));
  const bool fits_tile = TileFits<T>(cols, plan->limit);
  switch (variant) {
    case NormalizeVariant::kTwoReads:
      if (cols <= RowGroupPolicy::kMaxCols) {
        plan->path = NormalizePath::kRowGroups;
        plan->group = cols <= RowGroupPolicy::kSmallCols ? 4 : 32;
      }
      return cudaSuccess;
    case NormalizeVariant::kTile:
      if (fits_tile) PlanTile<T>(cols, true, plan);
      return cudaSuccess;
    case NormalizeVariant::kNarrowGroups:
      if (cols <= Policy::kRegisterCols) {
        PlanNarrowGroups(cols, plan);
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kCluster:
    case NormalizeVariant::kCluster16:
      if (!fits_tile) return PlanCluster<T>(cols, plan, variant == NormalizeVariant::kCluster16);
      break;
    case NormalizeVariant::kPipelined:
    case NormalizeVariant::kPipelinedPlain:
    case NormalizeVariant::kPipelinedLagged:
    case NormalizeVariant::kPipelinedRowByRow:
      if (!fits_tile) {
        plan->path = NormalizePath::kPipeline;
        plan->streaming = variant != NormalizeVariant::kPipelinedPlain;
        plan->order = variant == NormalizeVariant::kPipelinedLagged     ? PipelineOrderChoice::kLagged
                      : variant == NormalizeVariant::kPipelinedRowByRow ? PipelineOrderChoice::kRowByRow
                                                                        : PipelineOrderChoice::kByRowSize;
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kClusterBulk:
    case NormalizeVariant::kClusterBulkV4:
    case NormalizeVariant::kClusterBulkHalf:
      GC_TRY(PlanClusterBulk<T>(cols, variant == NormalizeVariant::kClusterBulkHalf, plan));
      if (plan->path == NormalizePath::kClusterBulk) {
        plan->bulk_store = variant != NormalizeVariant::kClusterBulkV4;
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kHeld:
      if (!fits_tile) {
        plan->path = NormalizePath::kHeld;
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kDefault:
      break;
  }
  if (cols <= Policy::kLaneTileCols && fits_tile) {
    PlanTile<T>(cols, false, plan);
  } else if (cols <= Policy::kRegisterCols && Policy::kRegisterRowsInGroups) {
    PlanNarrowGroups(cols, plan);
  } else if (fits_tile && 2 * TileSharedBytes<T>(1, cols) <= plan->limit) {
    PlanTile<T>(cols, cols <= Policy::kRegisterCols, plan);
  } else {
    // A row taking over half a block's shared memory leaves one tile a multiprocessor,
    // too few loads in flight (f32 5e4, a 195 KiB tile: 0.538 ms against the TMA
    // clusters' 0.311).
    if (bulk) GC_TRY(PlanClusterBulk<T>(cols, /*half=*/false, plan));
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
        plan->streaming = true;
        plan->order = PipelineOrderChoice::kLagged;
      }
    }
  }
  return cudaSuccess;
}

template <typename T>
std::string DescribePlan(int64_t rows, int64_t cols, NormalizeVariant variant) {
  NormalizePlan plan;
  if (PlanFor<T>(cols, variant, &plan) != cudaSuccess) return "no device";
  switch (plan.path) {
    case NormalizePath::kRowGroups: return "row groups of " + std::to_string(plan.group);
    case NormalizePath::kTile: {
      const int64_t tile_rows = TileRowsFor<T>(rows, cols);
      const std::string lanes = plan.group < 32 || tile_rows >= TilePolicy::kWarpRowsFrom
                                    ? std::to_string(plan.group) + " lanes/row"
                                    : std::string("the block/row");
      return "tile, " + std::to_string(tile_rows) + " rows/tile, " + lanes + ", " +
             std::to_string(TileSharedBytes<T>(tile_rows, cols) / 1024) + " KiB";
    }
    case NormalizePath::kCluster:
      return "cluster of " + std::to_string(plan.blocks) + " blocks/row, " + std::to_string(plan.slice) +
             " elements each";
    case NormalizePath::kClusterBulk:
      return "persistent clusters of " + std::to_string(plan.blocks) + " blocks/row, " +
             std::to_string(plan.slice) + "-element TMA loads, 2 buffers, " +
             (plan.bulk_store ? "TMA store" : "16-byte stores") + " (default where unaligned)";
    case NormalizePath::kPipeline: {
      bool row_by_row = false;
      if (PipelineRowByRow<T>(cols, plan.order, &row_by_row) != cudaSuccess) return "no device";
      return "pipeline of " + std::to_string(kPipelineChunk<T>) + "-element chunks, " +
             (row_by_row ? "row by row" : "lagged") + (plan.streaming ? ", evict-first hints" : "");
    }
    case NormalizePath::kHeld:
      return "held items of " + std::to_string(kHeldItem<T>) + " elements (default where unaligned)";
    case NormalizePath::kChunks: break;
  }
  return "chunks of " + std::to_string(ChunkPolicy::kChunk) + ", one pass";
}

}  // namespace
}  // namespace gpucompute::cuda
