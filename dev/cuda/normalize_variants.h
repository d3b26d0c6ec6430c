// The normalize paths by name (normalize_candidates.cu), for normalize_lab (each timed
// against the shipped LaunchNormalize per shape) and gpu_kernel_variants_test (each
// against the float64 reference). kDefault is the shipped policy
// (kernels/cuda/normalize_plan.cuh: PlanFor).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::lab {

enum class NormalizeVariant {
  kDefault = 0,       // the shipped policy (PlanFor)
  kTwoReads = 1,      // lane groups of 4 / 32 (rows <= 4096; past 8 elements a lane
                      // read twice, the second from L1/L2), else chunks
  kTile = 2,          // a shared-memory tile wherever the row fits one block (rows up to
                      // 512 with narrower lane groups, TileGroupFor), else chunks
  kCluster = 3,       // rows past a tile over a cluster of 8 blocks where one fits (sm_90;
                      // the default there too), else chunks; shorter rows as kDefault
  kNarrowGroups = 4,  // rows up to 256: lane groups of 4 / 8 / 16 / 32, the narrowest
                      // holding the row in registers (8 per lane; the float32 default
                      // from 33 columns); else kDefault
  kPipelined = 5,     // rows past a tile: one persistent launch that scales each chunk
                      // shortly after reducing it, re-reading it from L2
                      // (normalize_pipeline.cuh), hinted evict-first; shorter rows as kDefault
  kPipelinedPlain = 6,  // kPipelined without the cache hints
  kCluster16 = 7,     // kCluster with 16 blocks a cluster (sm_90's non-portable size; 8
                      // where the device cannot place 16): slices half as long
  kPipelinedLagged = 8,    // kPipelined, the lagged order for every row length
  kPipelinedRowByRow = 9,  // kPipelined, row by row for every row length
  kClusterBulk = 10,   // sm_90, rows of 32 KiB .. 16 x 100 KiB whose bytes are a multiple of 16
                       // (aligned pointers): persistent clusters of 2-16 blocks, each slice
                       // loaded by one TMA bulk copy, two buffers, a bulk store back
                       // (normalize_bulk.cuh); else kDefault
  kClusterBulkV4 = 11,  // kClusterBulk, storing with 16-byte stores from registers
  kClusterBulkHalf = 12,  // kClusterBulk with slices up to 50 KiB (twice the blocks a row,
                          // two blocks a SM: one's reduction overlaps the other's); rows
                          // past 16 such slices as kClusterBulk
  kHeld = 13,  // sm_90, rows past a tile whose bytes are a multiple of 16 (aligned
               // pointers): one persistent launch, each 37 KiB piece held in a TMA-loaded
               // shared-memory ring until its row's norm is out, read once
               // (normalize_held.cuh); else kDefault
};

// What `variant` runs for this shape on the current device (for the benchmark's log).
std::string DescribeNormalizePolicy(DType dtype, int64_t rows, int64_t cols, NormalizeVariant variant);

cudaError_t LaunchNormalizeVariant(DType dtype, const void* in, void* out, int64_t rows,
                                   int64_t cols, NormKind norm, NormalizeResult* result,
                                   const LaunchEnv& env, NormalizeVariant variant);

}  // namespace gpucompute::cuda::lab
