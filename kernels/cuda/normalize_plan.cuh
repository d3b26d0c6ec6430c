// The normalize policy (normalize.cu, its only includer): which path runs a shape
// (PlanFor), and its description for the benchmark's log (DescribePlan).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_tile.cuh"
#include "kernels/cuda/normalize_variants.h"

namespace gpucompute::cuda {
namespace {

// What runs for one shape (LaunchT in normalize.cu runs it).
enum class NormalizePath { kRowGroups, kTile, kCluster, kChunks };
struct NormalizePlan {
  NormalizePath path = NormalizePath::kChunks;
  int group = 32;        // kRowGroups, kTile: lanes per row
  int64_t limit = 0;     // kTile, kCluster: shared memory one block may have
  int blocks = 0;        // kCluster: blocks per row
  int64_t slice = 0;     // kCluster: elements per block
};

// The default, from the H100 run of bench/run_gpu_kernels.sh (kernels_run1, ms for
// 800 MB of f32 in + out): rows <= 32 columns in tiles, 4 lanes a row (10 columns:
// 0.336 against lane groups' 0.372); rows up to 256 in registers, a warp a row (100
// columns: 0.430 against the tile's 0.584, whose per-element row lookup costs more
// than the second read saves); longer rows that fit one block's shared memory in
// tiles (1e3: 0.313 against 0.422; 1e4: 0.311 against 0.568); longer ones in chunks
// (main's one pass: 1e7-long rows 0.431, where passes of half of L2 took 0.546).
template <typename T>
cudaError_t PlanFor(int64_t cols, NormalizeVariant variant, NormalizePlan* plan) {
  *plan = NormalizePlan{};
  GC_TRY(TileSharedLimit(&plan->limit));
  const bool fits_tile = TileFits<T>(cols, plan->limit);
  const int64_t register_cols = 32 * RowGroupPolicy::kPerLane;
  switch (variant) {
    case NormalizeVariant::kTwoReads:
      if (cols <= RowGroupPolicy::kMaxCols) {
        plan->path = NormalizePath::kRowGroups;
        plan->group = cols <= RowGroupPolicy::kSmallCols ? 4 : 32;
      }
      return cudaSuccess;
    case NormalizeVariant::kTile:
      if (fits_tile) {
        plan->path = NormalizePath::kTile;
        plan->group = TileGroupFor(cols, true);
      }
      return cudaSuccess;
    case NormalizeVariant::kNarrowGroups:
      if (cols <= register_cols) {
        plan->path = NormalizePath::kRowGroups;
        plan->group = 4;
        while (cols > plan->group * RowGroupPolicy::kPerLane) plan->group *= 2;
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kCluster:
    case NormalizeVariant::kDefault:
      break;
  }
  if (cols <= TilePolicy::kSmallCols && fits_tile) {
    plan->path = NormalizePath::kTile;
    plan->group = TileGroupFor(cols, false);
  } else if (cols <= register_cols) {
    plan->path = NormalizePath::kRowGroups;
    plan->group = cols <= RowGroupPolicy::kSmallCols ? 4 : 32;
  } else if (fits_tile) {
    plan->path = NormalizePath::kTile;
    plan->group = TileGroupFor(cols, false);
  } else if (variant == NormalizeVariant::kCluster) {
    bool clusters = false;
    GC_TRY(HasClusters(&clusters));
    plan->blocks = clusters ? ClusterBlocksFor<T>(cols, plan->limit, &plan->slice) : 0;
    if (plan->blocks > 0) plan->path = NormalizePath::kCluster;
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
      const std::string lanes = plan.group < 32 || tile_rows >= TilePolicy::kWarps
                                    ? std::to_string(plan.group) + " lanes/row"
                                    : std::string("the block/row");
      return "tile, " + std::to_string(tile_rows) + " rows/tile, " + lanes + ", " +
             std::to_string(TileSharedBytes<T>(tile_rows, cols) / 1024) + " KiB";
    }
    case NormalizePath::kCluster:
      return "cluster of " + std::to_string(plan.blocks) + " blocks/row, " + std::to_string(plan.slice) +
             " elements each";
    case NormalizePath::kChunks: break;
  }
  return "chunks of " + std::to_string(ChunkPolicy::kChunk) + ", one pass";
}

}  // namespace
}  // namespace gpucompute::cuda
