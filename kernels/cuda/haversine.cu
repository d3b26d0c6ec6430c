// Haversine distances. Mesh mode: the grid is separable, so
//   h(i, j) = A_i + B_i * C_j,  A_i = sin^2((lat_i - lat0) / 2),
//   B_i = cos(lat_i) cos(lat0),  C_j = sin^2((lon_j - lon0) / 2),
// where the row terms (A, B) and column terms C are computed once per reference in
// float64 (by a small kernel, or by the mesh kernel itself when fused), and every point
// then costs one FMA (three with g = 1 - h) and the last step, half the central angle
// (haversine_math.h: float32 a branch-free polynomial asin, float64 the lean step with g
// from its own terms, a few ulp of long double up to the antipode). The mesh is
// generated on the device (numpy.linspace semantics); nothing but the references is
// transferred. Points mode: each point's half unit vector is computed once, and h and g
// come from its chords to each reference's; the first point outside the latitude or
// longitude rule goes to the result (atomicMin), so stored points are checked in the
// same pass at no measurable cost.
//
//   LaunchHaversineMesh -> MeshScheduleFor: MeshTermsKernel + MeshKernel -> MeshAgent,
//     or MeshFusedKernel -> MeshFusedAgent (haversine_mesh.cuh)
//   LaunchHaversinePoints -> RefTermsKernel, PointsKernel<T, kVector> -> PointsAgent
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/haversine_math.h"
#include "kernels/cuda/haversine_mesh.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

namespace hm = haversine_math;
using haversine_mesh::ColumnTerms;
using haversine_mesh::kFusedRowsPerBlock;
using haversine_mesh::kWithG;
using haversine_mesh::MeshFusedKernel;
using haversine_mesh::MeshKernel;
using haversine_mesh::MeshPolicy;
using haversine_mesh::MeshTermsKernel;
using haversine_mesh::RowTerms;
using haversine_mesh::TermsPolicy;

// ---- policies ---------------------------------------------------------------------------
// How the mesh covers the grid; MeshScheduleFor picks one per dtype and device.
enum class MeshSchedule {
  // The terms kernel, then as many MeshKernel blocks as fit at once (no partial last wave).
  // H100, 1e4 x 1e4 f32 mesh: 0.143 ms (0.87 of write-only) vs one fused launch's 0.148.
  kTermsThenFullWaves,
  // One MeshFusedKernel launch, each row's terms made once a block in shared memory.
  // H200, 1e4 x 1e4 mesh: f32 0.1009-0.1029 ms vs 0.1029-0.1054 (two vectors a thread), f64 0.274-0.277 vs 0.307-0.310 (rows a warp).
  kFusedStaged,
};

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

// float64 everywhere and float32 where DRAM is wide against the SMs (WideDram) take the
// fused schedule; float32 elsewhere the terms kernel and full waves.
cudaError_t MeshScheduleFor(DType dtype, MeshSchedule* schedule) {
  *schedule = MeshSchedule::kFusedStaged;
  if (dtype != DType::kFloat32) return cudaSuccess;
  bool wide = false;
  GC_TRY(WideDram(&wide));
  if (!wide) *schedule = MeshSchedule::kTermsThenFullWaves;
  return cudaSuccess;
}

// ---- points: lat/lon arrays -------------------------------------------------------------
// The point rules of kernels/preconditions.h (kLatitudeRule, kLongitudeRule), in T:
// +-90 and 1e6 are exact in float32, so the comparisons equal the float64 ones. NaN
// fails both.
template <typename T>
__device__ __forceinline__ bool IsLatitude(T v) { return v >= T(-90) && v <= T(90); }
template <typename T>
__device__ __forceinline__ bool IsLongitude(T v) { return fabs(v) <= T(1e6); }

// Each reference's half unit vector, once (float64, stored as T).
template <typename T>
__global__ void __launch_bounds__(TermsPolicy::kThreads, TermsPolicy::kMinBlocksPerSm)
    RefTermsKernel(const RefPoint* refs, int64_t n_ref, hm::HalfVector<T>* terms) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < n_ref;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const hm::HalfVector<double> half = hm::HalfUnitVector(refs[r].lat_deg, refs[r].lon_deg);
    terms[r] = {static_cast<T>(half.x), static_cast<T>(half.y), static_cast<T>(half.z)};
  }
}

__device__ __forceinline__ void Unpack(const float4& v, float* x) {
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void Unpack(const double2& v, double* x) { x[0] = v.x, x[1] = v.y; }

// A thread's K points, checked, then their distances to every reference: each point's
// half unit vector once (three terms), then per pair h = |p/2 - q/2|^2 (float32, 6
// operations) or the lean step's inputs (float64, haversine_math.h: ChordHalfAngleLean).
// The next K points are loaded before these are computed, so a thread's loads overlap
// its arithmetic. kVector: a thread's K points are consecutive, loaded and stored 16
// bytes at a time (n a multiple of K, every array 16-byte aligned: LaunchPointsT
// checks); else they are a grid's width apart, one element at a time.
template <typename T, bool kVector>
struct PointsAgent {
  static constexpr int K = kPointsPerThread<T>;
  const T* lat;
  const T* lon;
  int64_t n;
  const hm::HalfVector<T>* terms;
  int64_t n_ref;
  T two_r;
  T* out;
  PointsResult* result;

  __device__ void Run() {
    // Point k of a thread's group is p0 + k * stride: a grid's width apart, or next to
    // each other (kVector), where the groups are a grid's width of K apart.
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = kVector ? 1 : threads;
    const int64_t group_step = K * threads;
    int64_t p0 = kVector ? K * thread : thread;
    T la[K], lo[K];
    Load(p0, stride, la, lo);
    for (; p0 < n; p0 += group_step) {
      T next_la[K], next_lo[K];
      Load(p0 + group_step, stride, next_la, next_lo);
      Points(p0, stride, la, lo);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        la[k] = next_la[k];
        lo[k] = next_lo[k];
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
    if (blockIdx.y == 0 && p < n) {  // one check per point
      if (!IsLatitude(la)) atomicMin(&result->bad_lat, static_cast<unsigned long long>(p));
      if (!IsLongitude(lo)) atomicMin(&result->bad_lon, static_cast<unsigned long long>(p));
    }
  }

  // Points p0 + k * stride: checked, then their distances to every reference.
  __device__ __forceinline__ void Points(int64_t p0, int64_t stride, const T* la, const T* lo) const {
    hm::HalfVector<T> v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      Check(p0 + k * stride, la[k], lo[k]);
      v[k] = hm::HalfUnitVector(la[k], lo[k]);
    }
    const int in_range = InRange(p0, stride);
    for (int64_t r = blockIdx.y; r < n_ref; r += gridDim.y) {
      const hm::HalfVector<T> q = terms[r];  // warp-uniform
      T* dst = out + r * n + p0;
      if constexpr (kVector) {
        if (in_range == 0) break;
        T d[K];
#pragma unroll
        for (int k = 0; k < K; ++k) d[k] = ChordDistance(v[k], q);
        haversine_mesh::StoreVec(dst, d);
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k, dst += stride) {
          if (k >= in_range) break;
          *dst = ChordDistance(v[k], q);
        }
      }
    }
  }

  __device__ __forceinline__ T ChordDistance(const hm::HalfVector<T>& p, const hm::HalfVector<T>& q) const {
    if constexpr (sizeof(T) == 8) {
      return hm::ChordHalfAngleLean(p, q, two_r);
    } else {
      return hm::DistanceFromH(hm::ChordH(p, q), two_r);
    }
  }
};

template <typename T, bool kVector>
__global__ void __launch_bounds__(PointsPolicy::kThreads, PointsPolicy::kMinBlocksPerSm)
    PointsKernel(const T* lat, const T* lon, int64_t n, const hm::HalfVector<T>* terms, int64_t n_ref, T two_r,
                 T* out, PointsResult* result) {
  PointsAgent<T, kVector>{lat, lon, n, terms, n_ref, two_r, out, result}.Run();
}

// ---- host ---------------------------------------------------------------------------------
// The terms kernel and MeshKernel exist for float32 only (MeshScheduleFor).
template <typename T>
constexpr bool kHasTermsSchedule = sizeof(T) == 4;

template <typename T>
cudaError_t LaunchTermsThenMesh(const MeshAxis& lat, const MeshAxis& lon, const RefPoint* refs, int64_t n_ref,
                                T two_r, T* out, const LaunchEnv& env, dim3 grid, dim3 block, bool vec) {
  using P = RowTerms<T, kWithG<T>>;
  using C = ColumnTerms<T, kWithG<T>>;
  Scratch rows, cols;
  GC_TRY(rows.Allocate(static_cast<size_t>(n_ref * lat.count) * sizeof(P), env));
  GC_TRY(cols.Allocate(static_cast<size_t>(n_ref * lon.count) * sizeof(C), env));
  const int64_t total = n_ref * (lat.count + lon.count);
  const unsigned terms_grid = GridFor(CeilDiv(total, TermsPolicy::kThreads), env.sm_count, TermsPolicy::kMinBlocksPerSm);
  MeshTermsKernel<T, kWithG<T>><<<terms_grid, TermsPolicy::kThreads, 0, env.stream>>>(lat, lon, refs, n_ref,
                                                                                      rows.as<P>(), cols.as<C>());
  GC_CHECK_LAUNCH();
  auto kernel = vec ? MeshKernel<T, true> : MeshKernel<T, false>;
  kernel<<<grid, block, 0, env.stream>>>(rows.as<P>(), cols.as<C>(), lat.count, lon.count, n_ref, two_r, out);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
cudaError_t LaunchMeshT(const MeshAxis& lat, const MeshAxis& lon, const RefPoint* refs, int64_t n_ref,
                        double radius, T* out, const LaunchEnv& env, MeshSchedule schedule) {
  const bool fused = !kHasTermsSchedule<T> || schedule == MeshSchedule::kFusedStaged;
  constexpr int kV = Vec16<T>::kCount;
  const bool vec = lon.count % kV == 0 && Aligned16(out);
  const int64_t units = vec ? lon.count / kV : lon.count;
  int bx = 32;  // at least a warp wide: MeshFusedAgent's warps walk rows together
  while (bx < MeshPolicy::kThreads && bx < units) bx *= 2;
  const int by = MeshPolicy::kThreads / bx;
  const int64_t gx = CeilDiv(units, bx);
  GC_REQUIRE(gx <= 0x7fffffff);
  const int64_t gz = std::min<int64_t>(n_ref, 65535);
  // Full waves: as many blocks as fit at once, asked once per kernel.
  int64_t blocks_per_sm = 0;
  if (fused) {
    static const int vec_blocks = ResidentBlocksPerSm(MeshFusedKernel<T, true>, MeshPolicy::kThreads);
    static const int scalar_blocks = ResidentBlocksPerSm(MeshFusedKernel<T, false>, MeshPolicy::kThreads);
    blocks_per_sm = vec ? vec_blocks : scalar_blocks;
  } else if constexpr (kHasTermsSchedule<T>) {
    static const int vec_blocks = ResidentBlocksPerSm(MeshKernel<T, true>, MeshPolicy::kThreads);
    static const int scalar_blocks = ResidentBlocksPerSm(MeshKernel<T, false>, MeshPolicy::kThreads);
    blocks_per_sm = vec ? vec_blocks : scalar_blocks;
  }
  const int64_t want = static_cast<int64_t>(env.sm_count) * blocks_per_sm;
  int64_t gy = std::max<int64_t>(want / (gx * gz), 1);
  if (fused) gy = std::max(gy, CeilDiv(lat.count, by * kFusedRowsPerBlock<T>));
  gy = std::min<int64_t>(gy, std::min<int64_t>(CeilDiv(lat.count, by), 65535));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz));
  const dim3 block(bx, by);
  const T two_r = static_cast<T>(2.0 * radius);
  if (fused) {
    auto kernel = vec ? MeshFusedKernel<T, true> : MeshFusedKernel<T, false>;
    kernel<<<grid, block, 0, env.stream>>>(lat, lon, refs, n_ref, two_r, out);
    GC_CHECK_LAUNCH();
    return cudaSuccess;
  }
  if constexpr (kHasTermsSchedule<T>) {
    return LaunchTermsThenMesh(lat, lon, refs, n_ref, two_r, out, env, grid, block, vec);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t LaunchPointsT(const T* lat, const T* lon, int64_t n, const RefPoint* refs, int64_t n_ref,
                          double radius, T* out, PointsResult* result, const LaunchEnv& env) {
  // 16-byte loads and stores where every row of out starts aligned.
  const bool vector = n % Vec16<T>::kCount == 0 && Aligned16(lat) && Aligned16(lon) && Aligned16(out);
  static const int vector_blocks = ResidentBlocksPerSm(PointsKernel<T, true>, PointsPolicy::kThreads);
  static const int scalar_blocks = ResidentBlocksPerSm(PointsKernel<T, false>, PointsPolicy::kThreads);
  const int64_t want = static_cast<int64_t>(env.sm_count) * (vector ? vector_blocks : scalar_blocks);
  const int64_t groups = CeilDiv(n, PointsPolicy::kThreads * kPointsPerThread<T>);  // blocks at one group a thread
  const int64_t gx = std::min(groups, std::max(want, CeilDiv(groups, kPointsGroupsPerThread<T>)));
  const int64_t gy = std::clamp<int64_t>(want / gx, 1, std::min<int64_t>(n_ref, 65535));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const T two_r = static_cast<T>(2.0 * radius);
  Scratch terms;
  GC_TRY(terms.Allocate(static_cast<size_t>(n_ref) * sizeof(hm::HalfVector<T>), env));
  const unsigned tgrid = GridFor(CeilDiv(n_ref, TermsPolicy::kThreads), env.sm_count, TermsPolicy::kMinBlocksPerSm);
  RefTermsKernel<T><<<tgrid, TermsPolicy::kThreads, 0, env.stream>>>(refs, n_ref, terms.as<hm::HalfVector<T>>());
  GC_CHECK_LAUNCH();
  auto kernel = vector ? PointsKernel<T, true> : PointsKernel<T, false>;
  kernel<<<grid, PointsPolicy::kThreads, 0, env.stream>>>(lat, lon, n, terms.as<hm::HalfVector<T>>(), n_ref, two_r,
                                                          out, result);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
void ListT(std::vector<KernelEntry>& out, const std::string& t) {
  if constexpr (kHasTermsSchedule<T>) {
    out.push_back({"haversine.mesh_terms<" + t + ">", (const void*)&MeshTermsKernel<T, kWithG<T>>});
    out.push_back({"haversine.mesh<" + t + ",vec>", (const void*)&MeshKernel<T, true>});
    out.push_back({"haversine.mesh<" + t + ">", (const void*)&MeshKernel<T, false>});
  }
  out.push_back({"haversine.mesh_fused<" + t + ",vec>", (const void*)&MeshFusedKernel<T, true>});
  out.push_back({"haversine.mesh_fused<" + t + ">", (const void*)&MeshFusedKernel<T, false>});
  out.push_back({"haversine.ref_terms<" + t + ">", (const void*)&RefTermsKernel<T>});
  out.push_back({"haversine.points<" + t + ",vector>", (const void*)&PointsKernel<T, true>});
  out.push_back({"haversine.points<" + t + ">", (const void*)&PointsKernel<T, false>});
}

}  // namespace

cudaError_t LaunchHaversineMesh(DType dtype, const MeshAxis& lat, const MeshAxis& lon,
                                const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                const LaunchEnv& env) {
  GC_REQUIRE(lat.count >= 0 && lon.count >= 0 && n_ref >= 0);
  if (lat.count == 0 || lon.count == 0 || n_ref == 0) return cudaSuccess;
  GC_REQUIRE(refs != nullptr && out != nullptr);
  MeshSchedule schedule;
  GC_TRY(MeshScheduleFor(dtype, &schedule));
  if (dtype == DType::kFloat32) {
    return LaunchMeshT<float>(lat, lon, refs, n_ref, radius, static_cast<float*>(out), env, schedule);
  }
  return LaunchMeshT<double>(lat, lon, refs, n_ref, radius, static_cast<double*>(out), env, schedule);
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
    return LaunchPointsT<float>(static_cast<const float*>(lat), static_cast<const float*>(lon), n_points, refs,
                                n_ref, radius, static_cast<float*>(out), result, env);
  }
  return LaunchPointsT<double>(static_cast<const double*>(lat), static_cast<const double*>(lon), n_points, refs,
                               n_ref, radius, static_cast<double*>(out), result, env);
}

void ListHaversineKernels(std::vector<KernelEntry>& out) {
  ListT<float>(out, "f32");
  ListT<double>(out, "f64");
}

cudaError_t WarmupHaversine(const LaunchEnv& env) {
  // One reference, a 2 x 4 (vector path) and a 2 x 3 (scalar path) mesh, 4 points
  // (vector path) and 3 (scalar path). The mesh's first call also reads the device's
  // clocks (WideDram), which a first grid request would pay otherwise.
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
    GC_TRY(LaunchHaversinePoints(t, buf + 32, buf + 40, 3, ref, 1, 6371.0, buf, result, env));
  }
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
