// Haversine distances. Mesh mode: the grid is separable, so
//   h(i, j) = A_i + B_i * C_j,  A_i = sin^2((lat_i - lat0) / 2),
//   B_i = cos(lat_i) cos(lat0),  C_j = sin^2((lon_j - lon0) / 2),
// where the row terms (A, B) and column terms C are computed once per reference in
// float64 by a small kernel (n_lat + n_lon sines), and every point then costs one
// FMA, two square roots and an atan2: d = 2 R atan2(sqrt(h), sqrt(1 - h)), h clamped
// to [0, 1] (float32: a branch-free atan2 for this argument range, see
// HalfCentralAngle). The mesh is generated on the device (numpy.linspace semantics); nothing
// but the references is transferred. Points mode evaluates the full formula per
// (reference, point), with cos(lat) of the point computed once per thread; the
// first point outside the latitude or longitude rule goes to the result (atomicMin),
// so stored points are checked in the same pass at no measurable cost.
//
//   LaunchHaversineMesh -> MeshTermsKernel, MeshKernel -> MeshAgent
//   LaunchHaversinePoints -> PointsKernel -> PointsAgent
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

constexpr double kDegToRad = 0.017453292519943295769236907684886;

struct TermsPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};
struct MeshPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};
struct PointsPolicy {
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

// atan2(sqrt(h), sqrt(1 - h)) for h in [0, 1] in float32 without the library's
// branches and IEEE division/sqrt slow paths (the f32 mesh kernel was issue-bound at
// ~80 instructions per point): with g = 1 - h, the smaller of the two angles has
// tangent t = sqrt(min(h, g) / max(h, g)) in [0, 1]; atan(t) = t + t^3 P(t^2) with a
// degree-7 weighted least-squares fit (1.5 ulp in float32), and the larger angle is
// pi/2 - atan(t). __fdividef (2 ulp, max(h, g) >= 0.5) and rsqrtf (2 ulp) keep the
// total near 3 ulp: ~25 instructions, 2 MUFU.
__device__ __forceinline__ float HalfCentralAngle(float h) {
  const float g = 1.0f - h;
  const float lo = fminf(h, g), hi = fmaxf(h, g);
  const float q = __fdividef(lo, hi);
  const float t = q > 0.0f ? q * rsqrtf(q) : 0.0f;
  const float u = t * t;
  float p = 2.920677885e-03f;
  p = fmaf(p, u, -1.636787318e-02f);
  p = fmaf(p, u, 4.321177676e-02f);
  p = fmaf(p, u, -7.552207261e-02f);
  p = fmaf(p, u, 1.066600159e-01f);
  p = fmaf(p, u, -1.421105415e-01f);
  p = fmaf(p, u, 1.999377310e-01f);
  p = fmaf(p, u, -3.333315253e-01f);
  const float a = fmaf(t * u, p, t);
  return h <= g ? a : 1.57079632679489662f - a;
}

__device__ __forceinline__ double HalfCentralAngle(double h) {
  return atan2(sqrt(h), sqrt(1.0 - h));
}

// d = 2 R atan2(sqrt(h), sqrt(1 - h)), h clamped to [0, 1].
template <typename T>
__device__ __forceinline__ T DistanceFromH(T h, T two_r) {
  h = fmin(fmax(h, T(0)), T(1));
  return two_r * HalfCentralAngle(h);
}

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
      const double lat_i = LinspaceAt(lat, k);
      const double s = sin((lat_i - ref.lat_deg) * (0.5 * kDegToRad));
      typename Pair<T>::type t;
      t.x = static_cast<T>(s * s);
      t.y = static_cast<T>(cos(lat_i * kDegToRad) * ref.cos_lat);
      row_terms[r * lat.count + k] = t;
    } else {
      const int64_t j = k - lat.count;
      const double s = sin((LinspaceAt(lon, j) - ref.lon_deg) * (0.5 * kDegToRad));
      col_terms[r * lon.count + j] = static_cast<T>(s * s);
    }
  }
}

// ---- the mesh: each thread owns a vector of columns, walks rows ---------------------
template <typename T, bool kVec>
struct MeshAgent {
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  const typename Pair<T>::type* row_terms;
  const T* col_terms;
  int64_t n_lat, n_lon, n_ref;
  T two_r;
  T* out;

  __device__ void Run() {
    const int64_t units = n_lon / kV;
    const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (unit >= units) return;
    const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    for (int64_t r = blockIdx.z; r < n_ref; r += gridDim.z) {
      // Column terms for this thread's columns: read once, kept in registers.
      T c[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) c[v] = col_terms[r * n_lon + unit * kV + v];
      for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; i < n_lat;
           i += row_step) {
        const typename Pair<T>::type ab = row_terms[r * n_lat + i];  // warp-uniform
        T d[kV];
#pragma unroll
        for (int v = 0; v < kV; ++v) d[v] = DistanceFromH<T>(fma(ab.y, c[v], ab.x), two_r);
        T* dst = out + (r * n_lat + i) * n_lon + unit * kV;
        if constexpr (kVec) {
          if constexpr (kV == 4) {
            *reinterpret_cast<float4*>(dst) = make_float4(d[0], d[1], d[2], d[3]);
          } else {
            *reinterpret_cast<double2*>(dst) = make_double2(d[0], d[1]);
          }
        } else {
          dst[0] = d[0];
        }
      }
    }
  }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(MeshPolicy::kThreads, MeshPolicy::kMinBlocksPerSm)
    MeshKernel(const typename Pair<T>::type* row_terms, const T* col_terms, int64_t n_lat,
               int64_t n_lon, int64_t n_ref, T two_r, T* out) {
  MeshAgent<T, kVec>{row_terms, col_terms, n_lat, n_lon, n_ref, two_r, out}.Run();
}

// ---- points: lat/lon arrays -----------------------------------------------------------
// The point rules of kernels/preconditions.h (kLatitudeRule, kLongitudeRule), in T:
// +-90 and 1e6 are exact in float32, so the comparisons equal the float64 ones. NaN
// fails both.
template <typename T>
__device__ __forceinline__ bool IsLatitude(T v) { return v >= T(-90) && v <= T(90); }
template <typename T>
__device__ __forceinline__ bool IsLongitude(T v) { return fabs(v) <= T(1e6); }

template <typename T>
struct PointsAgent {
  const T* lat;
  const T* lon;
  int64_t n;
  const RefPoint* refs;
  int64_t n_ref;
  T two_r;
  T* out;
  PointsResult* result;

  __device__ void Run() {
    const T half_rad = static_cast<T>(0.5 * kDegToRad);
    const T rad = static_cast<T>(kDegToRad);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n;
         p += stride) {
      const T la = lat[p];
      const T lo = lon[p];
      if (blockIdx.y == 0) {  // one check per point
        if (!IsLatitude(la)) atomicMin(&result->bad_lat, static_cast<unsigned long long>(p));
        if (!IsLongitude(lo)) atomicMin(&result->bad_lon, static_cast<unsigned long long>(p));
      }
      const T cos_la = cos(la * rad);  // once per point, reused for every reference
      for (int64_t r = blockIdx.y; r < n_ref; r += gridDim.y) {
        const RefPoint ref = refs[r];  // warp-uniform
        const T s1 = sin((la - static_cast<T>(ref.lat_deg)) * half_rad);
        const T s2 = sin((lo - static_cast<T>(ref.lon_deg)) * half_rad);
        const T h = fma(cos_la * static_cast<T>(ref.cos_lat), s2 * s2, s1 * s1);
        out[r * n + p] = DistanceFromH<T>(h, two_r);
      }
    }
  }
};

template <typename T>
__global__ void __launch_bounds__(PointsPolicy::kThreads, PointsPolicy::kMinBlocksPerSm)
    PointsKernel(const T* lat, const T* lon, int64_t n, const RefPoint* refs, int64_t n_ref,
                 T two_r, T* out, PointsResult* result) {
  PointsAgent<T>{lat, lon, n, refs, n_ref, two_r, out, result}.Run();
}

// ---- host ------------------------------------------------------------------------------
template <typename T>
cudaError_t LaunchMeshT(const MeshAxis& lat, const MeshAxis& lon, const RefPoint* refs,
                        int64_t n_ref, double radius, T* out, const LaunchEnv& env) {
  using P = typename Pair<T>::type;
  Scratch rows, cols;
  GC_TRY(rows.Allocate(static_cast<size_t>(n_ref * lat.count) * sizeof(P), env));
  GC_TRY(cols.Allocate(static_cast<size_t>(n_ref * lon.count) * sizeof(T), env));
  {
    const int64_t total = n_ref * (lat.count + lon.count);
    const unsigned grid = GridFor(CeilDiv(total, TermsPolicy::kThreads), env.sm_count,
                                  TermsPolicy::kMinBlocksPerSm);
    MeshTermsKernel<T><<<grid, TermsPolicy::kThreads, 0, env.stream>>>(lat, lon, refs, n_ref,
                                                                       rows.as<P>(), cols.as<T>());
    GC_CHECK_LAUNCH();
  }
  constexpr int kV = Vec16<T>::kCount;
  const bool vec = lon.count % kV == 0 && Aligned16(out);
  const int64_t units = vec ? lon.count / kV : lon.count;
  int bx = 32;
  while (bx < MeshPolicy::kThreads && bx < units) bx *= 2;
  const int by = MeshPolicy::kThreads / bx;
  const int64_t gx = CeilDiv(units, bx);
  GC_REQUIRE(gx <= 0x7fffffff);
  const int64_t gz = std::min<int64_t>(n_ref, 65535);
  const int64_t want = static_cast<int64_t>(env.sm_count) * MeshPolicy::kMinBlocksPerSm * 2;
  const int64_t gy =
      std::clamp<int64_t>(want / (gx * gz), 1, std::min<int64_t>(CeilDiv(lat.count, by), 65535));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz));
  const dim3 block(bx, by);
  const T two_r = static_cast<T>(2.0 * radius);
  if (vec) {
    MeshKernel<T, true><<<grid, block, 0, env.stream>>>(rows.as<P>(), cols.as<T>(), lat.count,
                                                        lon.count, n_ref, two_r, out);
  } else {
    MeshKernel<T, false><<<grid, block, 0, env.stream>>>(rows.as<P>(), cols.as<T>(), lat.count,
                                                         lon.count, n_ref, two_r, out);
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
cudaError_t LaunchPointsT(const T* lat, const T* lon, int64_t n, const RefPoint* refs,
                          int64_t n_ref, double radius, T* out, PointsResult* result,
                          const LaunchEnv& env) {
  const int64_t gx = std::min<int64_t>(CeilDiv(n, PointsPolicy::kThreads),
                                       static_cast<int64_t>(env.sm_count) * PointsPolicy::kMinBlocksPerSm * 2);
  const int64_t want = static_cast<int64_t>(env.sm_count) * PointsPolicy::kMinBlocksPerSm * 2;
  const int64_t gy = std::clamp<int64_t>(want / gx, 1, std::min<int64_t>(n_ref, 65535));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  PointsKernel<T><<<grid, PointsPolicy::kThreads, 0, env.stream>>>(
      lat, lon, n, refs, n_ref, static_cast<T>(2.0 * radius), out, result);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchHaversineMesh(DType dtype, const MeshAxis& lat, const MeshAxis& lon,
                                const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                const LaunchEnv& env) {
  GC_REQUIRE(lat.count >= 0 && lon.count >= 0 && n_ref >= 0);
  if (lat.count == 0 || lon.count == 0 || n_ref == 0) return cudaSuccess;
  GC_REQUIRE(refs != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return LaunchMeshT<float>(lat, lon, refs, n_ref, radius, static_cast<float*>(out), env);
  }
  return LaunchMeshT<double>(lat, lon, refs, n_ref, radius, static_cast<double*>(out), env);
}

cudaError_t LaunchHaversinePoints(DType dtype, const void* lat, const void* lon, int64_t n_points,
                                  const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                  PointsResult* result, const LaunchEnv& env) {
  GC_REQUIRE(n_points >= 0 && n_ref >= 0 && result != nullptr);
  // 0xff bytes: both indices kNoIndex.
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(PointsResult), env.stream));
  if (n_points == 0 || n_ref == 0) return cudaSuccess;
  GC_REQUIRE(lat != nullptr && lon != nullptr && refs != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return LaunchPointsT<float>(static_cast<const float*>(lat), static_cast<const float*>(lon),
                                n_points, refs, n_ref, radius, static_cast<float*>(out), result,
                                env);
  }
  return LaunchPointsT<double>(static_cast<const double*>(lat), static_cast<const double*>(lon),
                               n_points, refs, n_ref, radius, static_cast<double*>(out), result,
                               env);
}

void ListHaversineKernels(std::vector<KernelEntry>& out) {
  out.push_back({"haversine.mesh_terms<f32>", (const void*)&MeshTermsKernel<float>});
  out.push_back({"haversine.mesh_terms<f64>", (const void*)&MeshTermsKernel<double>});
  out.push_back({"haversine.mesh<f32,vec>", (const void*)&MeshKernel<float, true>});
  out.push_back({"haversine.mesh<f32>", (const void*)&MeshKernel<float, false>});
  out.push_back({"haversine.mesh<f64,vec>", (const void*)&MeshKernel<double, true>});
  out.push_back({"haversine.mesh<f64>", (const void*)&MeshKernel<double, false>});
  out.push_back({"haversine.points<f32>", (const void*)&PointsKernel<float>});
  out.push_back({"haversine.points<f64>", (const void*)&PointsKernel<double>});
}

cudaError_t WarmupHaversine(const LaunchEnv& env) {
  // One reference, a 2 x 4 (vector path) and a 2 x 3 (scalar path) mesh, 4 points.
  Scratch s;
  const size_t bytes = sizeof(RefPoint) + sizeof(PointsResult) + 64 * sizeof(double);
  GC_TRY(s.Allocate(bytes, env));
  RefPoint* ref = s.as<RefPoint>();
  auto* result = reinterpret_cast<PointsResult*>(ref + 1);
  double* buf = reinterpret_cast<double*>(result + 1);
  GC_TRY(cudaMemsetAsync(s.as<void>(), 0, bytes, env.stream));
  const MeshAxis lat{29.0, 31.0, 2};
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    GC_TRY(LaunchHaversineMesh(t, lat, MeshAxis{99.0, 101.0, 4}, ref, 1, 6371.0, buf, env));
    GC_TRY(LaunchHaversineMesh(t, lat, MeshAxis{99.0, 101.0, 3}, ref, 1, 6371.0, buf, env));
    GC_TRY(LaunchHaversinePoints(t, buf + 32, buf + 40, 4, ref, 1, 6371.0, buf, result, env));
  }
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
