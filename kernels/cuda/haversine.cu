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
//     (haversine_points.cuh: PointGroups)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/haversine_math.h"
#include "kernels/cuda/haversine_mesh.cuh"
#include "kernels/cuda/haversine_points.cuh"
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
using haversine_points::kPointsGroupsPerThread;
using haversine_points::kPointsPerThread;
using haversine_points::PointsPolicy;

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

// A thread's groups of K points (haversine_points.cuh: PointGroups), checked, then their
// distances to every reference: each point's half unit vector once (three terms), then
// per pair h = |p/2 - q/2|^2 (float32, 6 operations) or the lean step's inputs (float64,
// haversine_math.h: ChordHalfAngleLean).
template <typename T, bool kVector>
struct PointsAgent {
  haversine_points::PointGroups<T, kPointsPerThread<T>, kVector> points;
  const hm::HalfVector<T>* terms;
  int64_t n_ref;
  T two_r;
  T* out;

  __device__ void Run() { points.ForEach(*this); }

  __device__ __forceinline__ void Points(int64_t p0, int64_t stride, const T* la, const T* lo) const {
    points.Chords(p0, stride, la, lo, n_ref, out, *this);
  }

  __device__ __forceinline__ hm::HalfVector<T> RefHalf(int64_t r) const { return terms[r]; }

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
  PointsAgent<T, kVector>{{lat, lon, n, result}, terms, n_ref, two_r, out}.Run();
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
  GC_TRY((haversine_mesh::LaunchMeshTerms<T, kWithG<T>>(lat, lon, refs, n_ref, env, &rows, &cols)));
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
  dim3 grid, block;
  GC_TRY(haversine_mesh::MeshGridFor(units, lat.count, n_ref, blocks_per_sm, fused ? kFusedRowsPerBlock<T> : 0, 1, env,
                                     &grid, &block));
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
