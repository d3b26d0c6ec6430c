// The haversine points kernels' parts (haversine.cu's PointsKernel, and dev/cuda's
// candidates on the same loads and checks): a thread's groups of K points, each group
// loaded before the previous one is computed, the point rules checked once a point, and
// the chords of a group's half unit vectors to every reference's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/haversine_math.h"
#include "kernels/cuda/haversine_mesh.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::haversine_points {

// Points: 256 threads, a thread's kPointsPerThread points consecutive and moved 16 bytes
// at a time, the next group loaded while this one is computed; 64 registers, no spills.
// H200, 1e7 points x 4 refs: f32 0.077-0.079 ms vs 0.087-0.091 a grid's width apart, f64 0.183-0.189 vs 0.215-0.221.
struct PointsPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};
// Points loaded per thread before any is used (bytes in flight): one 16-byte vector.
template <typename T>
constexpr int kPointsPerThread = Vec16<T>::kCount;
// Groups of points a thread is given where n has more than a wave's worth of them:
// more, shorter blocks let the hardware even out warps that finish early.
// H200, 1e7 x 4 f64 points: 0.175-0.185 ms vs one wave's 0.180-0.190 (f32 even).
template <typename T>
constexpr int64_t kPointsGroupsPerThread = sizeof(T) == 4 ? 2 : 4;

// The point rules of kernels/preconditions.h (kLatitudeRule, kLongitudeRule), in T:
// +-90 and 1e6 are exact in float32, so the comparisons equal the float64 ones. NaN
// fails both.
template <typename T>
__device__ __forceinline__ bool IsLatitude(T v) { return v >= T(-90) && v <= T(90); }
template <typename T>
__device__ __forceinline__ bool IsLongitude(T v) { return fabs(v) <= T(1e6); }

// Point p against both rules: the first point outside one goes to the result (atomicMin).
template <typename T>
__device__ __forceinline__ void CheckPoint(PointsResult* result, int64_t p, T la, T lo) {
  if (!IsLatitude(la)) atomicMin(&result->bad_lat, static_cast<unsigned long long>(p));
  if (!IsLongitude(lo)) atomicMin(&result->bad_lon, static_cast<unsigned long long>(p));
}

__device__ __forceinline__ void Unpack(const float4& v, float* x) {
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void Unpack(const double2& v, double* x) { x[0] = v.x, x[1] = v.y; }

// A thread's points, K at a time: point k of a group is p0 + k * stride, a grid's width
// apart, or next to each other (kVector: loaded and stored 16 bytes at a time, so n a
// multiple of K and every array 16-byte aligned, which the launcher checks), where the
// groups are a grid's width of K apart.
template <typename T, int K, bool kVector>
struct PointGroups {
  const T* lat;
  const T* lon;
  int64_t n;
  PointsResult* result;

  // Calls agent.Points(p0, stride, la, lo) for each of this thread's groups. kPrefetch:
  // the next group is loaded before this one is computed, so a thread's loads overlap
  // its arithmetic (without it, each group waits for its loads: a candidate that lost).
  template <bool kPrefetch = true, typename Agent>
  __device__ __forceinline__ void ForEach(const Agent& agent) const {
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = kVector ? 1 : threads;
    const int64_t group_step = K * threads;
    int64_t p0 = kVector ? K * thread : thread;
    T la[K], lo[K];
    if constexpr (kPrefetch) Load(p0, stride, la, lo);
    for (; p0 < n; p0 += group_step) {
      if constexpr (kPrefetch) {
        T next_la[K], next_lo[K];
        Load(p0 + group_step, stride, next_la, next_lo);
        agent.Points(p0, stride, la, lo);
#pragma unroll
        for (int k = 0; k < K; ++k) {
          la[k] = next_la[k];
          lo[k] = next_lo[k];
        }
      } else {
        Load(p0, stride, la, lo);
        agent.Points(p0, stride, la, lo);
      }
    }
  }

  __device__ __forceinline__ void Load(int64_t p0, int64_t stride, T* la, T* lo) const {
    if constexpr (kVector) {
      using V = typename Vec16<T>::type;
      const V zero{};
      Unpack(p0 < n ? *reinterpret_cast<const V*>(lat + p0) : zero, la);
      Unpack(p0 < n ? *reinterpret_cast<const V*>(lon + p0) : zero, lo);
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t p = p0 + k * stride;
        la[k] = p < n ? lat[p] : T(0);
        lo[k] = p < n ? lon[p] : T(0);
      }
    }
  }

  // How many of points p0 + k * stride are below n: counted once a group, not tested
  // (64-bit) for every pair.
  __device__ __forceinline__ int InRange(int64_t p0, int64_t stride) const {
    if constexpr (kVector) return p0 < n ? K : 0;
    int count = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) count += p0 + k * stride < n ? 1 : 0;
    return count;
  }

  __device__ __forceinline__ void Check(int64_t p, T la, T lo) const {
    if (blockIdx.y == 0 && p < n) CheckPoint(result, p, la, lo);  // one check per point
  }

  // Points p0 + k * stride: checked, each one's half unit vector v once (three terms),
  // then agent.ChordDistance(v, q) to every reference's half unit vector q =
  // agent.RefHalf(r), stored to row r of out.
  template <typename Agent>
  __device__ __forceinline__ void Chords(int64_t p0, int64_t stride, const T* la, const T* lo, int64_t n_ref, T* out,
                                         const Agent& agent) const {
    haversine_math::HalfVector<T> v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      Check(p0 + k * stride, la[k], lo[k]);
      v[k] = haversine_math::HalfUnitVector(la[k], lo[k]);
    }
    const int in_range = InRange(p0, stride);
    for (int64_t r = blockIdx.y; r < n_ref; r += gridDim.y) {
      const haversine_math::HalfVector<T> q = agent.RefHalf(r);  // warp-uniform
      T* dst = out + r * n + p0;
      if constexpr (kVector) {
        if (in_range == 0) break;
        T d[K];
#pragma unroll
        for (int k = 0; k < K; ++k) d[k] = agent.ChordDistance(v[k], q);
        haversine_mesh::StoreVec(dst, d);
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k, dst += stride) {
          if (k >= in_range) break;
          *dst = agent.ChordDistance(v[k], q);
        }
      }
    }
  }
};

}  // namespace gpucompute::cuda::haversine_points
