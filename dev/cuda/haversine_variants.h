// The haversine candidates by name (haversine.cu here), for haversine_lab and
// gpu_kernel_variants_test. The shipped choice per dtype and device is the policy in
// kernels/cuda/haversine.cu: mesh f32 kAsinPolynomial on kFullWaves or
// kFullWavesFusedStaged, mesh f64 kAsinReducedLean on kFullWavesFusedStaged, points
// kChordVector.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::lab {

// The last step, half the central angle from h = sin^2(dlat/2) + ... in [0, 1].
enum class HaversineAngle {
  kAtan2 = 0,      // atan2(sqrt(h), sqrt(1 - h)); float32: a polynomial atan
  kAsinSplit = 1,  // asin(sqrt(min(h, 1 - h))), reflected when h > 1/2
  kAsin = 2,       // asin(sqrt(h))
  kAsinPolynomial = 3,  // kAsinSplit with a polynomial for asin(sqrt(m)) / sqrt(m), m <= 1/2
                        // (float64 degree 19, float32 degree 7)
  kAsinReduced = 4,  // one polynomial on [0, 1/4] for three ranges of h, by selects, and
                     // g = 1 - h from its own terms (haversine_math.h: ScaledHalfAngleReduced,
                     // HaversineG), accurate near the antipode
  kAsinReducedNewton = 5,  // kAsinReducedBranchFree, float64 sqrt(m) from the MUFU rsqrt
                           // estimate and a Newton step (SqrtByRsqrtNewton): no range
                           // checks nor slow-path branch
  kAsinReducedBranchFree = 6,  // kAsinReduced with its selects forced (SelectIfGreater):
                               // NVVM turns them into branches around the sqrt
  kAsinReducedLean = 7,  // the same formula for h, g >= 0 in fewer instructions
                         // (ScaledHalfAngleLean): 32-bit range tests, no select of w,
                         // a 5-operation square root (SqrtLean), k and base from
                         // words; the float64 fused mesh kernels take one range for
                         // a whole warp where its points share it (StoreRowByRange);
                         // float32 as kAsinReduced
};

// The formulations that take g = 1 - h from its own terms (ScaledHalfAngleReduced*).
constexpr bool TakesG(HaversineAngle a) {
  return a == HaversineAngle::kAsinReduced || a == HaversineAngle::kAsinReducedNewton ||
         a == HaversineAngle::kAsinReducedBranchFree || a == HaversineAngle::kAsinReducedLean;
}

// How the mesh kernel covers the grid.
enum class HaversineMeshSchedule {
  kCovering = 0,   // blocks for 2 waves of 4 per SM, one row per thread per iteration
  kFullWaves = 1,  // as many blocks as fit at once (occupancy): no partial last wave
  kFullWavesTwoRows = 2,  // kFullWaves, two rows per iteration, the next two rows' terms
                          // loaded while these are computed
  kFullWavesFused = 3,    // kFullWaves in one launch (more waves where each block still
                          // gets kFusedRowsPerBlock rows): each warp computes its rows'
                          // terms (a lane per row, shuffled), each thread its columns'
  kFullWavesFusedWide = 4,  // kFullWavesFused, two vectors of columns per thread (a grid's
                            // width apart, each store coalesced): half the shuffles and
                            // loop work per point, two independent chains
  kFullWavesFusedStaged = 5,      // kFullWavesFused, each row's terms computed once a
                                  // block into shared memory instead of once a warp
                                  // and shuffled (haversine_mesh.cuh)
  kFullWavesFusedWideStaged = 6,  // both
};

enum class HaversinePointsVariant {
  kSplitTerms = 0,  // per-point and per-reference half-angle terms
  kDirect = 1,      // two sines per (reference, point)
  kSplitPrefetch = 2,  // kSplitTerms, the next points loaded while these are computed
  kReduced = 3,  // split terms from haversine_math.h's half-angle sines and cosines in
                 // degrees, g = 1 - h from cosines, ScaledHalfAngleReduced; as many
                 // blocks as fit at once
  kReducedPrefetch = 4,  // kReduced, the next points loaded while these are computed
  kReducedNewton = 5,  // kReduced with the last step of HaversineAngle::kAsinReducedNewton
  kReducedNewtonPrefetch = 6,  // kReducedNewton, the next points loaded while these are
                               // computed (3 blocks per SM: 80 registers)
  kReducedBranchFree = 7,  // kReduced with the last step of kAsinReducedBranchFree
  kChord = 8,  // half unit vectors p/2 per point (once, for every reference) and per
               // reference: h = |p/2 - q/2|^2, g = |p/2 + q/2|^2 (12 operations a pair
               // against kReduced's 18); float64 the last step of kAsinReducedLean,
               // float32 h alone and the polynomial
  kChordPrefetch = 9,  // kChord, the next points loaded while these are computed
  kReducedLean = 10,  // kReduced with the last step of HaversineAngle::kAsinReducedLean
                      // (to tell the chords' gain from the last step's)
  kChordVector = 11,  // kChordPrefetch, a thread's points consecutive: 16-byte loads and
                      // a 16-byte store a reference (kChordPrefetch where the arrays'
                      // length or alignment does not allow it)
};

cudaError_t LaunchHaversineMeshVariant(DType dtype, const MeshAxis& lat, const MeshAxis& lon,
                                       const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                       const LaunchEnv& env, HaversineAngle angle,
                                       HaversineMeshSchedule schedule = HaversineMeshSchedule::kCovering);
cudaError_t LaunchHaversinePointsVariant(DType dtype, const void* lat, const void* lon, int64_t n_points,
                                         const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                         PointsResult* result, const LaunchEnv& env,
                                         HaversinePointsVariant variant);

}  // namespace gpucompute::cuda::lab
