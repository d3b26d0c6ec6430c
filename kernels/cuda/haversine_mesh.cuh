// The haversine mesh kernels (haversine.cu launches them): per-reference row terms
// (A, B) and column terms C in float64, stored as T, then h = A_i + B_i C_j and the
// last step (haversine_math.h) per point. MeshTermsKernel + MeshKernel<kRows> take
// the terms through global memory; MeshFusedKernel (HaversineMeshSchedule::
// kFullWavesFused) computes them itself: each thread its columns' C, each lane of a
// warp the (A, B) of one of the warp's next 32 rows, handed round by shuffles, so the
// mesh is one launch with no scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/haversine_math.h"
#include "kernels/cuda/haversine_variants.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::haversine_mesh {

struct TermsPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};
struct MeshPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};

template <typename T>
struct Pair;
template <>
struct Pair<float> { using type = float2; };
template <>
struct Pair<double> { using type = double2; };

// numpy.linspace point i (the Linspace::At formula of backend.h).
__device__ __forceinline__ double LinspaceAt(const MeshAxis& a, int64_t i) {
  if (a.count == 1) return a.start;
  if (i == a.count - 1) return a.stop;
  return a.start + static_cast<double>(i) * ((a.stop - a.start) / static_cast<double>(a.count - 1));
}

// Row k's (A, B) = (sin^2((lat_k - lat0) / 2), cos(lat_k) cos(lat0)), and column j's C =
// sin^2((lon_j - lon0) / 2), in float64 from haversine_math.h's half angles in degrees
// (exact reduction, short polynomials: no Payne-Hanek path, so the fused kernel keeps
// few registers); cos(lat_k) = cos^2 - sin^2 of the half angle.
template <typename T>
__device__ __forceinline__ typename Pair<T>::type RowTerms(const MeshAxis& lat, int64_t k, const RefPoint& ref) {
  const double lat_k = LinspaceAt(lat, k);
  double s, c, sl, cl;
  haversine_math::SinCosHalfDegreesUpToSign(lat_k - ref.lat_deg, &s, &c);
  haversine_math::SinCosHalfDegreesUpToSign(lat_k, &sl, &cl);
  typename Pair<T>::type t;
  t.x = static_cast<T>(s * s);
  t.y = static_cast<T>((cl - sl) * (cl + sl) * ref.cos_lat);
  return t;
}
template <typename T>
__device__ __forceinline__ T ColumnTerm(const MeshAxis& lon, int64_t j, const RefPoint& ref) {
  double s, c;
  haversine_math::SinCosHalfDegreesUpToSign(LinspaceAt(lon, j) - ref.lon_deg, &s, &c);
  return static_cast<T>(s * s);
}

__device__ __forceinline__ void StoreVec(float* dst, const float (&d)[4]) {
  *reinterpret_cast<float4*>(dst) = make_float4(d[0], d[1], d[2], d[3]);
}
__device__ __forceinline__ void StoreVec(double* dst, const double (&d)[2]) {
  *reinterpret_cast<double2*>(dst) = make_double2(d[0], d[1]);
}
template <typename T>
__device__ __forceinline__ void StoreVec(T* dst, const T (&d)[1]) { dst[0] = d[0]; }

// ---- per-reference row and column terms (float64, stored as T) ---------------------
template <typename T>
__global__ void __launch_bounds__(TermsPolicy::kThreads, TermsPolicy::kMinBlocksPerSm)
    MeshTermsKernel(MeshAxis lat, MeshAxis lon, const RefPoint* refs, int64_t n_ref,
                    typename Pair<T>::type* row_terms, T* col_terms) {
  const int64_t per_ref = lat.count + lon.count;
  const int64_t total = per_ref * n_ref;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t r = idx / per_ref;
    const int64_t k = idx - r * per_ref;
    const RefPoint ref = refs[r];
    if (k < lat.count) {
      row_terms[r * lat.count + k] = RowTerms<T>(lat, k, ref);
    } else {
      col_terms[r * lon.count + k - lat.count] = ColumnTerm<T>(lon, k - lat.count, ref);
    }
  }
}

// ---- the mesh: each thread owns a vector of columns, walks rows ---------------------
// kRows rows per iteration (HaversineMeshSchedule::kFullWavesTwoRows: 2, and the next
// iteration's row terms are loaded before this one's are used).
template <typename T, bool kVec, HaversineAngle kAngle, int kRows>
struct MeshAgent {
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  using P = typename Pair<T>::type;
  const P* row_terms;
  const T* col_terms;
  int64_t n_lat, n_lon, n_ref;
  T two_r;
  T* out;

  __device__ void Run() {
    const int64_t units = n_lon / kV;
    const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (unit >= units) return;
    const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    const int64_t first = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    for (int64_t r = blockIdx.z; r < n_ref; r += gridDim.z) {
      // Column terms for this thread's columns: read once, kept in registers.
      T c[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) c[v] = col_terms[r * n_lon + unit * kV + v];
      const P* rows = row_terms + r * n_lat;
      if constexpr (kRows == 1) {
        for (int64_t i = first; i < n_lat; i += row_step) Row(r, i, rows[i], c);  // warp-uniform load
      } else {
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
            if (i + k * row_step < n_lat) Row(r, i + k * row_step, ab[k], c);
            ab[k] = next[k];
          }
        }
      }
    }
  }

  __device__ __forceinline__ void Row(int64_t r, int64_t i, P ab, const T (&c)[kV]) const {
    T d[kV];
#pragma unroll
    for (int v = 0; v < kV; ++v) d[v] = haversine_math::DistanceFromH<T, kAngle>(fma(ab.y, c[v], ab.x), two_r);
    T* dst = out + (r * n_lat + i) * n_lon + (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kV;
    StoreVec(dst, d);
  }
};

template <typename T, bool kVec, HaversineAngle kAngle, int kRows>
__global__ void __launch_bounds__(MeshPolicy::kThreads, MeshPolicy::kMinBlocksPerSm)
    MeshKernel(const typename Pair<T>::type* row_terms, const T* col_terms, int64_t n_lat,
               int64_t n_lon, int64_t n_ref, T two_r, T* out) {
  MeshAgent<T, kVec, kAngle, kRows>{row_terms, col_terms, n_lat, n_lon, n_ref, two_r, out}.Run();
}

// ---- the mesh in one launch: terms computed where they are used -----------------------
// Lanes past the last column still take part in the shuffles (only warps all past it
// leave); a warp's lanes share threadIdx.y (blockDim.x >= 32), so they walk the same
// rows, 32 at a time: row i0 + L row_step's terms come from lane L.
template <typename T, bool kVec, HaversineAngle kAngle>
struct MeshFusedAgent {
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  using P = typename Pair<T>::type;
  MeshAxis lat, lon;
  const RefPoint* refs;
  int64_t n_ref;
  T two_r;
  T* out;

  __device__ void Run() {
    const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const bool active = unit < lon.count / kV;
    if (__all_sync(0xffffffffu, !active)) return;
    const int lane = threadIdx.x % 32;
    const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    const int64_t first = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    for (int64_t r = blockIdx.z; r < n_ref; r += gridDim.z) {
      const RefPoint ref = refs[r];
      T c[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) c[v] = active ? ColumnTerm<T>(lon, unit * kV + v, ref) : T(0);
      for (int64_t i0 = first; i0 < lat.count; i0 += 32 * row_step) {
        const P mine = RowTerms<T>(lat, min(i0 + lane * row_step, lat.count - 1), ref);
        const int rows = static_cast<int>(min(int64_t{32}, (lat.count - 1 - i0) / row_step + 1));
        for (int k = 0; k < rows; ++k) {
          P ab;
          ab.x = __shfl_sync(0xffffffffu, mine.x, k);
          ab.y = __shfl_sync(0xffffffffu, mine.y, k);
          if (!active) continue;
          T d[kV];
#pragma unroll
          for (int v = 0; v < kV; ++v) d[v] = haversine_math::DistanceFromH<T, kAngle>(fma(ab.y, c[v], ab.x), two_r);
          StoreVec(out + ((r * lat.count + i0 + k * row_step) * lon.count + unit * kV), d);
        }
      }
    }
  }
};

template <typename T, bool kVec, HaversineAngle kAngle>
__global__ void __launch_bounds__(MeshPolicy::kThreads, MeshPolicy::kMinBlocksPerSm)
    MeshFusedKernel(MeshAxis lat, MeshAxis lon, const RefPoint* refs, int64_t n_ref, T two_r, T* out) {
  MeshFusedAgent<T, kVec, kAngle>{lat, lon, refs, n_ref, two_r, out}.Run();
}

}  // namespace gpucompute::cuda::haversine_mesh
