// The haversine mesh kernels (haversine.cu launches them): per-reference row terms
// (A, B) and column terms C in float64, stored as T, then h = A_i + B_i C_j and the
// last step (haversine_math.h) per point; float64 also carries the terms of g = 1 - h
// (two per row, one per column), so g has no cancellation near h = 1.
// MeshTermsKernel + MeshKernel take the terms through global memory (float32 where DRAM
// is narrow against the SMs); MeshFusedKernel computes them itself, each thread its
// columns' C and each block its rows' (A, B) into shared memory, so the mesh is one
// launch with no scratch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/haversine_math.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::haversine_mesh {

// The terms kernel (MeshTermsKernel) and the points' reference terms: a thread an item.
struct TermsPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};
// MeshKernel and MeshFusedKernel: 256 threads, 64 registers (neither spills at that cap).
struct MeshPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};
// Rows a fused block is given where the mesh has more than a wave's worth of them:
// more, shorter blocks let the hardware even out SMs and warps that finish early;
// fewer rows repeat a block's column terms too often.
// H200, 1e4 x 1e4 mesh: f32 16 rows 0.1025-0.1039 ms vs one wave's 0.108-0.111; f64 96 rows 0.266-0.272 vs 0.270-0.274.
template <typename T>
constexpr int64_t kFusedRowsPerBlock = sizeof(T) == 4 ? 16 : 96;

// float64 forms g = 1 - h from its own terms (haversine_math.h: HaversineG) for the
// lean step; float32's polynomial step takes h alone.
template <typename T>
constexpr bool kWithG = sizeof(T) == 8;

// A row's terms as T: h = a + b C; with g, also cos^2 of half the latitude difference
// and sin^2 of half the latitude sum. A column's: C = sin^2 of half the longitude
// difference; with g, its cos^2.
template <typename T, bool kG>
struct alignas(2 * sizeof(T)) RowTerms { T a, b; };
template <typename T>
struct alignas(16) RowTerms<T, true> { T a, b, cos2_half_dlat, sin2_half_lat_sum; };
template <typename T, bool kG>
struct ColumnTerms { T sin2; };
template <typename T>
struct alignas(2 * sizeof(T)) ColumnTerms<T, true> { T sin2, cos2; };

// numpy.linspace point i (the Linspace::At formula of backend.h).
__device__ __forceinline__ double LinspaceAt(const MeshAxis& a, int64_t i) {
  if (a.count == 1) return a.start;
  if (i == a.count - 1) return a.stop;
  return a.start + static_cast<double>(i) * ((a.stop - a.start) / static_cast<double>(a.count - 1));
}

// Row k's and column j's terms, in float64 from haversine_math.h's half angles in
// degrees (exact reduction, short polynomials: no Payne-Hanek path, so the fused kernel
// keeps few registers), stored as T.
template <typename T, bool kG>
__device__ __forceinline__ RowTerms<T, kG> RowTermsAt(const MeshAxis& lat, int64_t k, const RefPoint& ref) {
  const haversine_math::LatitudeTerms t = haversine_math::LatitudePairTerms(LinspaceAt(lat, k), ref.lat_deg, ref.cos_lat);
  if constexpr (kG) {
    return {static_cast<T>(t.sin2_half_dlat), static_cast<T>(t.cos_product), static_cast<T>(t.cos2_half_dlat),
            static_cast<T>(t.sin2_half_lat_sum)};
  } else {
    return {static_cast<T>(t.sin2_half_dlat), static_cast<T>(t.cos_product)};
  }
}
template <typename T, bool kG>
__device__ __forceinline__ ColumnTerms<T, kG> ColumnTermsAt(const MeshAxis& lon, int64_t j, const RefPoint& ref) {
  double s2, c2;
  haversine_math::LongitudeTerms(LinspaceAt(lon, j) - ref.lon_deg, &s2, &c2);
  if constexpr (kG) {
    return {static_cast<T>(s2), static_cast<T>(c2)};
  } else {
    return {static_cast<T>(s2)};
  }
}

// The distance of a (row, column) pair: h = a + b C (one FMA) and the last step.
template <typename T>
__device__ __forceinline__ T Distance(const RowTerms<T, kWithG<T>>& row, const ColumnTerms<T, kWithG<T>>& col,
                                      T two_r) {
  const T h = fma(row.b, col.sin2, row.a);
  if constexpr (kWithG<T>) {
    const T g = haversine_math::HaversineG(row.cos2_half_dlat, row.sin2_half_lat_sum, col.sin2, col.cos2);
    return haversine_math::ScaledHalfAngleLean(h, g, two_r);
  } else {
    return haversine_math::DistanceFromH(h, two_r);
  }
}

__device__ __forceinline__ void StoreVec(float* dst, const float (&d)[4]) {
  *reinterpret_cast<float4*>(dst) = make_float4(d[0], d[1], d[2], d[3]);
}
__device__ __forceinline__ void StoreVec(double* dst, const double (&d)[2]) {
  *reinterpret_cast<double2*>(dst) = make_double2(d[0], d[1]);
}
template <typename T>
__device__ __forceinline__ void StoreVec(T* dst, const T (&d)[1]) { dst[0] = d[0]; }

// One row's distances to a thread's vector of kV columns, stored at dst.
template <typename T, int kV>
__device__ __forceinline__ void StoreRow(T* dst, const RowTerms<T, kWithG<T>>& row,
                                         const ColumnTerms<T, kWithG<T>> (&c)[kV], T two_r) {
  T d[kV];
#pragma unroll
  for (int v = 0; v < kV; ++v) d[v] = Distance<T>(row, c[v], two_r);
  StoreVec(dst, d);
}

// StoreRow for float64 in the fused kernel: where every point a warp stores in this
// row lies in one of the lean step's ranges, that range's step alone
// (haversine_math.h: ScaledHalfAngleLower / Middle / Upper: 20 / 18 / 23 double
// operations a point against the general step's 25, and none of its selects). A warp's
// columns are neighbours, so their h are too: only warps across a range's edge take the
// general step. lanes: the lanes of the warp that store this row (the votes' mask).
template <int kV>
__device__ __forceinline__ void StoreRowByRange(double* dst, const RowTerms<double, true>& row,
                                                const ColumnTerms<double, true> (&c)[kV], double two_r,
                                                unsigned lanes) {
  namespace hm = haversine_math;
  double h[kV], d[kV];
  bool lower = true, middle = true, upper = true;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    h[v] = fma(row.b, c[v].sin2, row.a);
    lower &= hm::InLeanRange(hm::LeanRange::kLower, h[v]);  // & not &&: no branch a point
    middle &= hm::InLeanRange(hm::LeanRange::kMiddle, h[v]);
    upper &= hm::InLeanRange(hm::LeanRange::kUpper, h[v]);
  }
  if (__all_sync(lanes, lower)) {
#pragma unroll
    for (int v = 0; v < kV; ++v) d[v] = hm::ScaledHalfAngleLower(h[v], two_r);
  } else if (__all_sync(lanes, middle)) {
#pragma unroll
    for (int v = 0; v < kV; ++v) d[v] = hm::ScaledHalfAngleMiddle(h[v], two_r);
  } else if (__all_sync(lanes, upper)) {
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      d[v] = hm::ScaledHalfAngleUpper(hm::HaversineG(row.cos2_half_dlat, row.sin2_half_lat_sum, c[v].sin2, c[v].cos2),
                                      two_r);
    }
  } else {
#pragma unroll
    for (int v = 0; v < kV; ++v) d[v] = Distance<double>(row, c[v], two_r);
  }
  StoreVec(dst, d);
}

// ---- per-reference row and column terms (float64, stored as T) ---------------------
template <typename T, bool kG>
__global__ void __launch_bounds__(TermsPolicy::kThreads, TermsPolicy::kMinBlocksPerSm)
    MeshTermsKernel(MeshAxis lat, MeshAxis lon, const RefPoint* refs, int64_t n_ref,
                    RowTerms<T, kG>* row_terms, ColumnTerms<T, kG>* col_terms) {
  const int64_t per_ref = lat.count + lon.count;
  const int64_t total = per_ref * n_ref;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t r = idx / per_ref;
    const int64_t k = idx - r * per_ref;
    const RefPoint ref = refs[r];
    if (k < lat.count) {
      row_terms[r * lat.count + k] = RowTermsAt<T, kG>(lat, k, ref);
    } else {
      col_terms[r * lon.count + k - lat.count] = ColumnTermsAt<T, kG>(lon, k - lat.count, ref);
    }
  }
}

// The mesh kernels' grid and block: MeshPolicy::kThreads threads at least a warp wide
// (MeshFusedAgent's warps walk rows together) over `units` column units, a thread
// each; references along z; along y enough block rows for blocks_per_sm blocks an SM
// (full waves), and at least enough for rows_per_block rows a block where that is not
// 0, but no more than give each thread-row rows_per_thread rows.
inline cudaError_t MeshGridFor(int64_t units, int64_t n_lat, int64_t n_ref, int64_t blocks_per_sm,
                               int64_t rows_per_block, int rows_per_thread, const LaunchEnv& env, dim3* grid,
                               dim3* block) {
  int bx = 32;
  while (bx < MeshPolicy::kThreads && bx < units) bx *= 2;
  const int by = MeshPolicy::kThreads / bx;
  const int64_t gx = CeilDiv(units, bx);
  GC_REQUIRE(gx <= 0x7fffffff);
  const int64_t gz = std::min<int64_t>(n_ref, 65535);
  const int64_t want = static_cast<int64_t>(env.sm_count) * blocks_per_sm;
  int64_t gy = std::max<int64_t>(want / (gx * gz), 1);
  if (rows_per_block > 0) gy = std::max(gy, CeilDiv(n_lat, by * rows_per_block));
  gy = std::min<int64_t>(gy, std::min<int64_t>(CeilDiv(n_lat, by * rows_per_thread), 65535));
  *grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz));
  *block = dim3(bx, by);
  return cudaSuccess;
}

// Every reference's row and column terms (MeshTermsKernel) into `rows` and `cols`,
// allocated here on the launch's stream, for MeshKernel.
template <typename T, bool kG>
cudaError_t LaunchMeshTerms(const MeshAxis& lat, const MeshAxis& lon, const RefPoint* refs, int64_t n_ref,
                            const LaunchEnv& env, Scratch* rows, Scratch* cols) {
  using P = RowTerms<T, kG>;
  using C = ColumnTerms<T, kG>;
  GC_TRY(rows->Allocate(static_cast<size_t>(n_ref * lat.count) * sizeof(P), env));
  GC_TRY(cols->Allocate(static_cast<size_t>(n_ref * lon.count) * sizeof(C), env));
  const int64_t total = n_ref * (lat.count + lon.count);
  const unsigned grid = GridFor(CeilDiv(total, TermsPolicy::kThreads), env.sm_count, TermsPolicy::kMinBlocksPerSm);
  MeshTermsKernel<T, kG><<<grid, TermsPolicy::kThreads, 0, env.stream>>>(lat, lon, refs, n_ref, rows->as<P>(),
                                                                         cols->as<C>());
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

// ---- the mesh from stored terms: each thread owns a vector of columns, walks rows -------
// The shipped last step of a row (StoreRow): float32 from h alone, float64 the lean step
// with g. Step, in MeshAgent, lets the lab's candidates walk the same rows with theirs.
template <typename T>
struct LeanStep {
  using P = RowTerms<T, kWithG<T>>;
  using C = ColumnTerms<T, kWithG<T>>;
  template <int kV>
  __device__ static __forceinline__ void StoreRow(T* dst, const P& row, const C (&c)[kV], T two_r) {
    haversine_mesh::StoreRow<T>(dst, row, c, two_r);
  }
};

template <typename T, bool kVec, typename Step = LeanStep<T>>
struct MeshAgent {
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  using P = typename Step::P;
  using C = typename Step::C;
  const P* row_terms;
  const C* col_terms;
  int64_t n_lat, n_lon, n_ref;
  T two_r;
  T* out;

  __device__ void Run() { ForEachReference(*this); }

  // Calls walk.Rows(r, c, first, row_step) for every reference r of this thread: c its
  // columns' terms, its rows first + k row_step.
  template <typename Walk>
  __device__ __forceinline__ void ForEachReference(const Walk& walk) const {
    const int64_t units = n_lon / kV;
    const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (unit >= units) return;
    const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    const int64_t first = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    for (int64_t r = blockIdx.z; r < n_ref; r += gridDim.z) {
      // Column terms for this thread's columns: read once, kept in registers.
      C c[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) c[v] = col_terms[r * n_lon + unit * kV + v];
      walk.Rows(r, c, first, row_step);
    }
  }

  // The shipped walk of reference r's rows: one row at a time, each with Step's last step.
  __device__ __forceinline__ void Rows(int64_t r, const C (&c)[kV], int64_t first, int64_t row_step) const {
    const P* rows = row_terms + r * n_lat;
    // The row's terms (a warp-uniform load) and its output advance by pointers: no
    // 64-bit index products a row (11% of the float32 loop's instructions).
    const P* const end = rows + n_lat;
    const int64_t dst_step = row_step * n_lon;
    T* dst = RowOut(r, first);
    for (const P* row = rows + first; row < end; row += row_step, dst += dst_step) {
      Step::StoreRow(dst, *row, c, two_r);
    }
  }

  // This thread's columns of reference r's row i.
  __device__ __forceinline__ T* RowOut(int64_t r, int64_t i) const {
    return out + (r * n_lat + i) * n_lon + (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kV;
  }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(MeshPolicy::kThreads, MeshPolicy::kMinBlocksPerSm)
    MeshKernel(const RowTerms<T, kWithG<T>>* row_terms, const ColumnTerms<T, kWithG<T>>* col_terms, int64_t n_lat,
               int64_t n_lon, int64_t n_ref, T two_r, T* out) {
  MeshAgent<T, kVec>{row_terms, col_terms, n_lat, n_lon, n_ref, two_r, out}.Run();
}

// ---- the mesh in one launch: terms computed where they are used -----------------------
// A fused block's rows of reference `ref`, staged: the block computes its next
// blockDim.x rows a thread-row, one row a thread, into shared memory once, and every
// warp reads them by broadcast: a row's float64 sines are made once a block, not once a
// warp (a block of 256 columns is 8 warps on the same rows), and no warp stalls on them
// between its stores. store(dst, row) for each of this thread's rows where `active`
// (dst its row of ref_out, advanced by a pointer); every thread takes part in the
// block's barriers.
template <typename T, bool kG, typename Store>
__device__ __forceinline__ void StagedRows(const MeshAxis& lat, int64_t lon_count, const RefPoint& ref, bool active,
                                           T* ref_out, int64_t row_step, int64_t dst_step, const Store& store) {
  using P = RowTerms<T, kG>;
  __shared__ P stage[MeshPolicy::kThreads];
  const int64_t block_first = static_cast<int64_t>(blockIdx.y) * blockDim.y;
  const int per_thread_row = blockDim.x;  // rows staged a thread-row at a time
  const P* const my_rows = stage + threadIdx.y * per_thread_row;
  for (int64_t k0 = 0; block_first + k0 * row_step < lat.count; k0 += per_thread_row) {
    __syncthreads();  // the previous rows are read
    const int64_t row = block_first + threadIdx.y + (k0 + threadIdx.x) * row_step;
    stage[threadIdx.y * per_thread_row + threadIdx.x] = RowTermsAt<T, kG>(lat, min(row, lat.count - 1), ref);
    __syncthreads();
    const int64_t i0 = block_first + threadIdx.y + k0 * row_step;
    if (i0 >= lat.count || !active) continue;
    const int rows = static_cast<int>(min(int64_t{per_thread_row}, (lat.count - 1 - i0) / row_step + 1));
    T* dst = ref_out + i0 * lon_count;
    for (int k = 0; k < rows; ++k, dst += dst_step) store(dst, my_rows[k]);
  }
}

// Each thread computes its vector of columns' terms once a reference, the block its
// rows' (StagedRows). A warp's lanes share threadIdx.y (blockDim.x >= 32), so they walk
// the same rows.
template <typename T, bool kVec>
struct MeshFusedAgent {
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  static constexpr bool kG = kWithG<T>;
  static constexpr bool kByRange = sizeof(T) == 8;  // the lean step a warp's range at a time
  using P = RowTerms<T, kG>;
  using C = ColumnTerms<T, kG>;
  MeshAxis lat, lon;
  const RefPoint* refs;
  int64_t n_ref;
  T two_r;
  T* out;

  // One row's distances to this thread's columns c (StoreRowByRange votes among `lanes`).
  struct RowStore {
    const C (&c)[kV];
    unsigned lanes;
    T two_r;
    __device__ __forceinline__ void operator()(T* dst, const P& row) const {
      if constexpr (kByRange) {
        StoreRowByRange(dst, row, c, two_r, lanes);
      } else {
        StoreRow<T>(dst, row, c, two_r);
      }
    }
  };

  __device__ void Run() {
    const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const bool active = unit < lon.count / kV;
    unsigned lanes = 0;  // the lanes that store (StoreRowByRange's votes)
    if constexpr (kByRange) lanes = __ballot_sync(0xffffffffu, active);
    const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    const int64_t dst_step = row_step * lon.count;
    for (int64_t r = blockIdx.z; r < n_ref; r += gridDim.z) {
      const RefPoint ref = refs[r];
      C c[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) c[v] = ColumnTermsAt<T, kG>(lon, active ? unit * kV + v : 0, ref);
      T* const ref_out = out + r * lat.count * lon.count + unit * kV;
      StagedRows<T, kG>(lat, lon.count, ref, active, ref_out, row_step, dst_step, RowStore{c, lanes, two_r});
    }
  }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(MeshPolicy::kThreads, MeshPolicy::kMinBlocksPerSm)
    MeshFusedKernel(MeshAxis lat, MeshAxis lon, const RefPoint* refs, int64_t n_ref, T two_r, T* out) {
  MeshFusedAgent<T, kVec>{lat, lon, refs, n_ref, two_r, out}.Run();
}

}  // namespace gpucompute::cuda::haversine_mesh
