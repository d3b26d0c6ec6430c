// The haversine mesh kernels (haversine.cu launches them): per-reference row terms
// (A, B) and column terms C in float64, stored as T, then h = A_i + B_i C_j and the
// last step (haversine_math.h) per point; kAsinReduced* also carry the terms of
// g = 1 - h (two per row, one per column), so g has no cancellation near h = 1.
// MeshTermsKernel + MeshKernel<kRows> take the terms through global memory (the shipped
// MeshAgent's walk, with the candidate's last step);
// MeshFusedKernel (HaversineMeshSchedule::kFullWavesFused*) computes them itself: each
// thread its columns' C, a row's (A, B) shuffled across a warp or staged in shared
// memory for a block, so the mesh is one launch with no scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "dev/cuda/haversine_angles.cuh"
#include "dev/cuda/haversine_variants.h"
#include "kernels/cuda/haversine_mesh.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::lab::haversine_mesh {

// The launch policies, the row and column terms, the terms kernel and the lean step a
// warp's range at a time are the shipped kernels' (kernels/cuda/haversine_mesh.cuh): the
// candidates differ in the last step and the schedule only.
using ::gpucompute::cuda::haversine_mesh::ColumnTerms;
using ::gpucompute::cuda::haversine_mesh::ColumnTermsAt;
using ::gpucompute::cuda::haversine_mesh::kFusedRowsPerBlock;
using ::gpucompute::cuda::haversine_mesh::MeshPolicy;
using ::gpucompute::cuda::haversine_mesh::RowTerms;
using ::gpucompute::cuda::haversine_mesh::RowTermsAt;
using ::gpucompute::cuda::haversine_mesh::StagedRows;
using ::gpucompute::cuda::haversine_mesh::StoreRowByRange;  // float64 kAsinReducedLean
using ::gpucompute::cuda::haversine_mesh::StoreVec;
using ::gpucompute::cuda::haversine_mesh::TermsPolicy;

// The kAsinReduced* formulations also form g = 1 - h from its own terms
// (haversine_math.h: HaversineG).
template <HaversineAngle kAngle>
constexpr bool kWithG = TakesG(kAngle);

// The distance of a (row, column) pair: h = a + b C (one FMA) and the last step.
template <typename T, HaversineAngle kAngle>
__device__ __forceinline__ T Distance(const RowTerms<T, kWithG<kAngle>>& row,
                                      const ColumnTerms<T, kWithG<kAngle>>& col, T two_r) {
  const T h = fma(row.b, col.sin2, row.a);
  if constexpr (kWithG<kAngle>) {
    const T g = haversine_math::HaversineG(row.cos2_half_dlat, row.sin2_half_lat_sum, col.sin2, col.cos2);
    return haversine_math::DistanceFromHG<T, kAngle>(h, g, two_r);
  } else {
    return haversine_math::DistanceFromH<T, kAngle>(h, two_r);
  }
}

// Lane `from`'s row terms, to every lane of the warp.
template <typename T, bool kG>
__device__ __forceinline__ RowTerms<T, kG> ShuffleRow(const RowTerms<T, kG>& mine, int from) {
  RowTerms<T, kG> r;
  r.a = __shfl_sync(0xffffffffu, mine.a, from);
  r.b = __shfl_sync(0xffffffffu, mine.b, from);
  if constexpr (kG) {
    r.cos2_half_dlat = __shfl_sync(0xffffffffu, mine.cos2_half_dlat, from);
    r.sin2_half_lat_sum = __shfl_sync(0xffffffffu, mine.sin2_half_lat_sum, from);
  }
  return r;
}

// One row's distances to a thread's vector of kV columns, stored at dst.
template <typename T, HaversineAngle kAngle, int kV>
__device__ __forceinline__ void StoreRow(T* dst, const RowTerms<T, kWithG<kAngle>>& row,
                                         const ColumnTerms<T, kWithG<kAngle>> (&c)[kV], T two_r) {
  T d[kV];
#pragma unroll
  for (int v = 0; v < kV; ++v) d[v] = Distance<T, kAngle>(row, c[v], two_r);
  StoreVec(dst, d);
}

// ---- the mesh: each thread owns a vector of columns, walks rows ---------------------
// The shipped walk (kernels/cuda/haversine_mesh.cuh: MeshAgent) with a candidate's last step.
template <typename T, HaversineAngle kAngle>
struct AngleStep {
  using P = RowTerms<T, kWithG<kAngle>>;
  using C = ColumnTerms<T, kWithG<kAngle>>;
  template <int kV>
  __device__ static __forceinline__ void StoreRow(T* dst, const P& row, const C (&c)[kV], T two_r) {
    haversine_mesh::StoreRow<T, kAngle>(dst, row, c, two_r);
  }
};
template <typename T, bool kVec, HaversineAngle kAngle>
using MeshAgent = ::gpucompute::cuda::haversine_mesh::MeshAgent<T, kVec, AngleStep<T, kAngle>>;

// HaversineMeshSchedule::kFullWavesTwoRows: kRows rows per iteration, the next
// iteration's row terms loaded before this one's are used.
template <typename T, bool kVec, HaversineAngle kAngle, int kRows>
struct RowsAtATime {
  using Agent = MeshAgent<T, kVec, kAngle>;
  using P = typename Agent::P;
  const Agent& agent;

  __device__ __forceinline__ void Rows(int64_t r, const typename Agent::C (&c)[Agent::kV], int64_t first,
                                       int64_t row_step) const {
    const int64_t n_lat = agent.n_lat;
    const P* rows = agent.row_terms + r * n_lat;
    // Rows past the end load the last row's terms (always valid) and store nothing.
    P ab[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) ab[k] = rows[min(first + k * row_step, n_lat - 1)];
    for (int64_t i = first; i < n_lat; i += kRows * row_step) {
      P next[kRows];
#pragma unroll
      for (int k = 0; k < kRows; ++k) next[k] = rows[min(i + (kRows + k) * row_step, n_lat - 1)];
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        if (i + k * row_step < n_lat) StoreRow<T, kAngle>(agent.RowOut(r, i + k * row_step), ab[k], c, agent.two_r);
        ab[k] = next[k];
      }
    }
  }
};

template <typename T, bool kVec, HaversineAngle kAngle, int kRows>
__global__ void __launch_bounds__(MeshPolicy::kThreads, MeshPolicy::kMinBlocksPerSm)
    MeshKernel(const RowTerms<T, kWithG<kAngle>>* row_terms, const ColumnTerms<T, kWithG<kAngle>>* col_terms, int64_t n_lat,
               int64_t n_lon, int64_t n_ref, T two_r, T* out) {
  MeshAgent<T, kVec, kAngle> agent{row_terms, col_terms, n_lat, n_lon, n_ref, two_r, out};
  if constexpr (kRows == 1) {
    agent.Run();
  } else {
    agent.ForEachReference(RowsAtATime<T, kVec, kAngle, kRows>{agent});
  }
}

// ---- the mesh in one launch: terms computed where they are used -----------------------
// Each thread computes its columns' terms once a reference. kVecs vectors of columns
// per thread (HaversineMeshSchedule::kFullWavesFusedWide*: 2), the grid's width apart
// so each store stays coalesced: a row's terms serve kVecs vectors. A warp's lanes share
// threadIdx.y (blockDim.x >= 32), so they walk the same rows. The rows' terms:
// - shuffled (kFullWavesFused, kFullWavesFusedWide): row i0 + L row_step's terms come
//   from lane L, 32 rows at a time; lanes past the last column still take part in the
//   shuffles (only warps all past it leave). Every warp of a block row computes the
//   same rows' terms.
// - staged (kFullWavesFused*Staged): as the shipped kernel stages them
//   (kernels/cuda/haversine_mesh.cuh: StagedRows).
template <typename T, bool kVec, HaversineAngle kAngle, int kVecs, bool kStaged>
struct MeshFusedAgent {
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  static constexpr bool kG = kWithG<kAngle>;
  static constexpr bool kByRange = kAngle == HaversineAngle::kAsinReducedLean && sizeof(T) == 8;
  using P = RowTerms<T, kG>;
  using C = ColumnTerms<T, kG>;
  MeshAxis lat, lon;
  const RefPoint* refs;
  int64_t n_ref;
  T two_r;
  T* out;

  __device__ void Run() {
    const int64_t unit_step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t unit[kVecs];
    bool active[kVecs];  // active[q] implies active[0]
#pragma unroll
    for (int q = 0; q < kVecs; ++q) {
      unit[q] = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x + q * unit_step;
      active[q] = unit[q] < lon.count / kV;
    }
    unsigned lanes[kVecs] = {};  // the lanes that store vector q (StoreRowByRange's votes)
    if constexpr (kByRange) {
#pragma unroll
      for (int q = 0; q < kVecs; ++q) lanes[q] = __ballot_sync(0xffffffffu, active[q]);
    }
    if (!kStaged && __all_sync(0xffffffffu, !active[0])) return;
    const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    const int64_t dst_step = row_step * lon.count;
    for (int64_t r = blockIdx.z; r < n_ref; r += gridDim.z) {
      const RefPoint ref = refs[r];
      C c[kVecs][kV];
#pragma unroll
      for (int q = 0; q < kVecs; ++q) {
#pragma unroll
        for (int v = 0; v < kV; ++v) c[q][v] = ColumnTermsAt<T, kG>(lon, active[q] ? unit[q] * kV + v : 0, ref);
      }
      T* const ref_out = out + r * lat.count * lon.count + unit[0] * kV;
      if constexpr (kStaged) {
        StagedRows<T, kG>(lat, lon.count, ref, active[0], ref_out, row_step, dst_step,
                          [&](T* dst, const P& row) { Store(dst, row, c, active, lanes, unit_step); });
      } else {
        const int lane = threadIdx.x % 32;
        for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; i0 < lat.count;
             i0 += 32 * row_step) {
          const P mine = RowTermsAt<T, kG>(lat, min(i0 + lane * row_step, lat.count - 1), ref);
          const int rows = static_cast<int>(min(int64_t{32}, (lat.count - 1 - i0) / row_step + 1));
          T* dst = ref_out + i0 * lon.count;  // advanced by a pointer
          for (int k = 0; k < rows; ++k, dst += dst_step) {
            const P row = ShuffleRow(mine, k);
            if (active[0]) Store(dst, row, c, active, lanes, unit_step);
          }
        }
      }
    }
  }

  // One row's distances for this thread's kVecs vectors of columns.
  __device__ __forceinline__ void Store(T* dst, const P& row, const C (&c)[kVecs][kV], const bool (&active)[kVecs],
                                        const unsigned (&lanes)[kVecs], int64_t unit_step) const {
#pragma unroll
    for (int q = 0; q < kVecs; ++q) {
      if (q > 0 && !active[q]) break;
      if constexpr (kByRange) {
        StoreRowByRange(dst + q * unit_step * kV, row, c[q], two_r, lanes[q]);
      } else {
        StoreRow<T, kAngle>(dst + q * unit_step * kV, row, c[q], two_r);
      }
    }
  }
};

// Blocks per SM the fused kernel is built for (its register cap), from ptxas's spills
// (float64): kVecs = 2 keeps twice the column terms and chains, and the Newton square
// root's temporaries add to each chain: at 64 registers the Newton kernel spilled 60
// bytes, the wide kernels at 80 registers 8 (reduced), 124 (Newton) and 88-100 (lean;
// at 64 the narrow lean kernels do not spill); with these caps up to 16 bytes are left
// in the wide reduced and branch-free kernels.
template <HaversineAngle kAngle, int kVecs>
constexpr bool kFusedSpillsAtBaseCap =
    kAngle == HaversineAngle::kAsinReducedNewton || (kAngle == HaversineAngle::kAsinReducedLean && kVecs == 2);
template <HaversineAngle kAngle, int kVecs>
constexpr int kFusedMinBlocksPerSm =
    (kVecs == 1 ? MeshPolicy::kMinBlocksPerSm : 3) - (kFusedSpillsAtBaseCap<kAngle, kVecs> ? 1 : 0);

template <typename T, bool kVec, HaversineAngle kAngle, int kVecs, bool kStaged>
__global__ void __launch_bounds__(MeshPolicy::kThreads, (kFusedMinBlocksPerSm<kAngle, kVecs>))
    MeshFusedKernel(MeshAxis lat, MeshAxis lon, const RefPoint* refs, int64_t n_ref, T two_r, T* out) {
  MeshFusedAgent<T, kVec, kAngle, kVecs, kStaged>{lat, lon, refs, n_ref, two_r, out}.Run();
}

}  // namespace gpucompute::cuda::lab::haversine_mesh
