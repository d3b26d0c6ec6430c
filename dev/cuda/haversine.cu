// The haversine candidates: every last-step formulation (HaversineAngle), mesh schedule
// (HaversineMeshSchedule) and points kernel (HaversinePointsVariant) the shipped kernels
// (kernels/cuda/haversine.cu) were chosen from, each launchable by name, so that
// haversine_lab times them against the shipped launcher and the float64 reference.
// Mesh mode is separable: h(i, j) = A_i + B_i C_j, row terms (A, B) and column terms C
// once per reference in float64 (by a small kernel, or by the mesh kernel itself when
// fused), then one FMA a point and the last step. Points mode: each point's half-angle
// sines and cosines (or half unit vector, kChord*) once, combined with each reference's.
//
//   LaunchHaversineMeshVariant -> MeshTermsKernel, MeshKernel<kRows> -> MeshAgent, or
//     MeshFusedKernel -> MeshFusedAgent (haversine_mesh.cuh)
//   LaunchHaversinePointsVariant -> RefTermsKernel, PointsSplitKernel -> PointsSplitAgent
//     (kDirect: PointsKernel -> PointsAgent)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "dev/cuda/haversine_angles.cuh"
#include "dev/cuda/haversine_mesh.cuh"
#include "dev/cuda/haversine_variants.h"
#include "kernels/cuda/haversine_points.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda::lab {
namespace {

namespace hm = haversine_math;
constexpr double kDegToRad = 0.017453292519943295769236907684886;
using haversine_mesh::MeshFusedKernel;
using haversine_mesh::MeshKernel;
using haversine_mesh::MeshPolicy;
using haversine_mesh::ColumnTerms;
using haversine_mesh::kFusedRowsPerBlock;
using haversine_mesh::kWithG;
using haversine_mesh::RowTerms;
using haversine_mesh::TermsPolicy;

// The points kernels' policy and loads are the shipped ones (haversine_points.cuh):
// PointsSplitAgent's kPointsPerThread also lets float64's five terms a point fit the 64
// registers of 4 blocks per SM.
using haversine_points::kPointsGroupsPerThread;
using haversine_points::kPointsPerThread;
using haversine_points::PointsPolicy;

// The points kernels' last step but for the chords': float32 the polynomial, float64
// asin(sqrt(h)).
template <typename T>
constexpr HaversineAngle kPointsAngle = sizeof(T) == 4 ? HaversineAngle::kAsinPolynomial : HaversineAngle::kAsin;

// ---- points: lat/lon arrays -----------------------------------------------------------
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
      if (blockIdx.y == 0) haversine_points::CheckPoint(result, p, la, lo);  // one check per point
      const T cos_la = cos(la * rad);  // once per point, reused for every reference
      for (int64_t r = blockIdx.y; r < n_ref; r += gridDim.y) {
        const RefPoint ref = refs[r];  // warp-uniform
        const T s1 = sin((la - static_cast<T>(ref.lat_deg)) * half_rad);
        const T s2 = sin((lo - static_cast<T>(ref.lon_deg)) * half_rad);
        const T h = fma(cos_la * static_cast<T>(ref.cos_lat), s2 * s2, s1 * s1);
        out[r * n + p] = hm::DistanceFromH<T, kPointsAngle<T>>(h, two_r);
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

// Points, separable: sin((a - b) / 2) = sin(a/2) cos(b/2) - cos(a/2) sin(b/2), so a
// point's half-angle sines and cosines (two sincos) serve every reference, whose own
// come from RefTermsKernel; a (reference, point) pair then costs a few FMAs and the
// last step. kPointsPerThread points are loaded before any is used (bytes in flight).
template <typename T>
struct RefTerms {
  T sin_half_lat, cos_half_lat, sin_half_lon, cos_half_lon, cos_lat;
  hm::HalfVector<T> half;  // kChord*: half the unit vector
};

template <typename T>
__global__ void __launch_bounds__(TermsPolicy::kThreads, TermsPolicy::kMinBlocksPerSm)
    RefTermsKernel(const RefPoint* refs, int64_t n_ref, RefTerms<T>* terms) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < n_ref;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sla, cla, slo, clo;
    sincos(refs[r].lat_deg * (0.5 * kDegToRad), &sla, &cla);
    sincos(refs[r].lon_deg * (0.5 * kDegToRad), &slo, &clo);
    const hm::HalfVector<double> half = hm::HalfUnitVector(refs[r].lat_deg, refs[r].lon_deg);
    terms[r] = {static_cast<T>(sla), static_cast<T>(cla), static_cast<T>(slo), static_cast<T>(clo),
                static_cast<T>(refs[r].cos_lat),
                {static_cast<T>(half.x), static_cast<T>(half.y), static_cast<T>(half.z)}};
  }
}

__device__ __forceinline__ void SinCos(float x, float* s, float* c) { sincosf(x, s, c); }
__device__ __forceinline__ void SinCos(double x, double* s, double* c) { sincos(x, s, c); }

// A thread's groups of points come from the shipped loads (haversine_points.cuh:
// PointGroups). kPrefetch (HaversinePointsVariant::kSplitPrefetch): the next K points
// are loaded before the current ones are computed (without it, each iteration waits for
// its loads); the chord kernels do the same.
// kLast, the last step: a kAsinReduced* formulation (HaversinePointsVariant::kReduced*)
// also takes haversine_math.h's half-angle sines and cosines in degrees and forms g.
// kChord (HaversinePointsVariant::kChord*): each point's half unit vector instead, h
// from chords (haversine_math.h: ChordH; float64's lean step ChordHalfAngleLean).
// kVector (kChordVector): a thread's K points are consecutive, loaded and stored 16
// bytes at a time (n a multiple of K, every array 16-byte aligned: LaunchPointsT
// checks), instead of a grid's width apart one element at a time.
template <typename T, bool kPrefetch, HaversineAngle kLast = kPointsAngle<T>, bool kChord = false,
          bool kVector = false>
struct PointsSplitAgent {
  static constexpr int K = kPointsPerThread<T>;
  static_assert(!kVector || (kChord && K == Vec16<T>::kCount));
  haversine_points::PointGroups<T, K, kVector> points;
  const RefTerms<T>* terms;
  int64_t n_ref;
  T two_r;
  T* out;

  __device__ void Run() { points.template ForEach<kPrefetch>(*this); }

  // Points p0 + k * stride: checked, then their distances to every reference (kChord:
  // three terms a point instead of five; per pair 6 operations for h, 6 for g).
  __device__ __forceinline__ void Points(int64_t p0, int64_t stride, const T* la, const T* lo) const {
    if constexpr (kChord) {
      points.Chords(p0, stride, la, lo, n_ref, out, *this);
    } else {
      HalfAngles(p0, stride, la, lo);
    }
  }

  // The split and reduced variants: half-angle sines and cosines a point.
  __device__ __forceinline__ void HalfAngles(int64_t p0, int64_t stride, const T* la, const T* lo) const {
    constexpr bool kReduced = TakesG(kLast);
    const T half_rad = static_cast<T>(0.5 * kDegToRad);
    T sla[K], cla[K], slo[K], clo[K], cos_la[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      points.Check(p0 + k * stride, la[k], lo[k]);
      if constexpr (kReduced) {
        hm::SinCosHalfDegrees(la[k], &sla[k], &cla[k]);  // |lat| <= 90 once checked
        hm::SinCosHalfDegreesUpToSign(lo[k], &slo[k], &clo[k]);
      } else {
        SinCos(la[k] * half_rad, &sla[k], &cla[k]);
        SinCos(lo[k] * half_rad, &slo[k], &clo[k]);
      }
      cos_la[k] = (cla[k] - sla[k]) * (cla[k] + sla[k]);  // cos^2 - sin^2 of the half angle
    }
    const int in_range = points.InRange(p0, stride);
    for (int64_t r = blockIdx.y; r < n_ref; r += gridDim.y) {
      const RefTerms<T> t = terms[r];  // warp-uniform
      T* dst = out + r * points.n + p0;
#pragma unroll
      for (int k = 0; k < K; ++k, dst += stride) {
        if (k >= in_range) break;
        const T s1 = fma(sla[k], t.cos_half_lat, -cla[k] * t.sin_half_lat);
        const T s2 = fma(slo[k], t.cos_half_lon, -clo[k] * t.sin_half_lon);
        const T h = fma(cos_la[k] * t.cos_lat, s2 * s2, s1 * s1);
        if constexpr (kReduced) {
          // g = 1 - h from cos(dlat/2), cos(dlon/2), sin(lat sum / 2), no cancellation:
          // 10 operations more here, 3 fewer in the last step.
          const T c1 = fma(cla[k], t.cos_half_lat, sla[k] * t.sin_half_lat);
          const T c2 = fma(clo[k], t.cos_half_lon, slo[k] * t.sin_half_lon);
          const T sum = fma(sla[k], t.cos_half_lat, cla[k] * t.sin_half_lat);
          const T cc = c1 * c2, ss = sum * s2;
          *dst = hm::DistanceFromHG<T, kLast>(h, fma(cc, cc, ss * ss), two_r);
        } else {
          *dst = hm::DistanceFromH<T, kLast>(h, two_r);
        }
      }
    }
  }

  __device__ __forceinline__ hm::HalfVector<T> RefHalf(int64_t r) const { return terms[r].half; }

  __device__ __forceinline__ T ChordDistance(const hm::HalfVector<T>& p, const hm::HalfVector<T>& q) const {
    if constexpr (TakesG(kLast)) {
      static_assert(kLast == HaversineAngle::kAsinReducedLean && sizeof(T) == 8, "chords take g in float64 lean only");
      return hm::ChordHalfAngleLean(p, q, two_r);
    } else {
      return hm::DistanceFromH<T, kLast>(hm::ChordH(p, q), two_r);
    }
  }
};

// Blocks per SM the split kernel is built for (its register cap): the Newton step
// with prefetched points spilled at 64 registers (the reduced one with prefetch does
// too, and is kept as measured; so do 8 bytes of kReducedLean's and Newton's without
// prefetch). The chord kernels fit 64 with prefetch (three terms a point, not five).
template <bool kPrefetch, HaversineAngle kLast>
constexpr int kPointsMinBlocksPerSm =
    kPrefetch && kLast == HaversineAngle::kAsinReducedNewton ? 3 : PointsPolicy::kMinBlocksPerSm;

template <typename T, bool kPrefetch, HaversineAngle kLast = kPointsAngle<T>, bool kChord = false,
          bool kVector = false>
__global__ void __launch_bounds__(PointsPolicy::kThreads, (kPointsMinBlocksPerSm<kPrefetch, kLast>))
    PointsSplitKernel(const T* lat, const T* lon, int64_t n, const RefTerms<T>* terms, int64_t n_ref,
                      T two_r, T* out, PointsResult* result) {
  PointsSplitAgent<T, kPrefetch, kLast, kChord, kVector>{{lat, lon, n, result}, terms, n_ref, two_r, out}.Run();
}

// ---- host ------------------------------------------------------------------------------
template <typename T, HaversineAngle kAngle, HaversineMeshSchedule kSchedule>
cudaError_t LaunchMeshT(const MeshAxis& lat, const MeshAxis& lon, const RefPoint* refs,
                        int64_t n_ref, double radius, T* out, const LaunchEnv& env) {
  using S = HaversineMeshSchedule;
  constexpr bool kWide = kSchedule == S::kFullWavesFusedWide || kSchedule == S::kFullWavesFusedWideStaged;
  constexpr bool kStaged = kSchedule == S::kFullWavesFusedStaged || kSchedule == S::kFullWavesFusedWideStaged;
  constexpr bool kFused = kWide || kStaged || kSchedule == S::kFullWavesFused;
  constexpr int kRows = kSchedule == HaversineMeshSchedule::kFullWavesTwoRows ? 2 : 1;
  constexpr int kVecs = kWide ? 2 : 1;  // vectors of columns per thread (fused)
  constexpr int kV = Vec16<T>::kCount;
  const bool vec = lon.count % kV == 0 && Aligned16(out);
  const int64_t units = CeilDiv(vec ? lon.count / kV : lon.count, kFused ? kVecs : 1);
  int64_t blocks_per_sm = MeshPolicy::kMinBlocksPerSm * 2;  // kCovering: two waves of 4
  if constexpr (kFused) {  // full waves: asked once per kernel
    static const int vec_blocks =
        ResidentBlocksPerSm(MeshFusedKernel<T, true, kAngle, kVecs, kStaged>, MeshPolicy::kThreads);
    static const int scalar_blocks =
        ResidentBlocksPerSm(MeshFusedKernel<T, false, kAngle, kVecs, kStaged>, MeshPolicy::kThreads);
    blocks_per_sm = vec ? vec_blocks : scalar_blocks;
  } else if constexpr (kSchedule != HaversineMeshSchedule::kCovering) {
    static const int vec_blocks = ResidentBlocksPerSm(MeshKernel<T, true, kAngle, kRows>, MeshPolicy::kThreads);
    static const int scalar_blocks = ResidentBlocksPerSm(MeshKernel<T, false, kAngle, kRows>, MeshPolicy::kThreads);
    blocks_per_sm = vec ? vec_blocks : scalar_blocks;
  }
  dim3 grid, block;
  GC_TRY(::gpucompute::cuda::haversine_mesh::MeshGridFor(units, lat.count, n_ref, blocks_per_sm,
                                                         kFused ? kFusedRowsPerBlock<T> : 0, kRows, env, &grid,
                                                         &block));
  const T two_r = static_cast<T>(2.0 * radius);
  if constexpr (kFused) {
    auto kernel =
        vec ? MeshFusedKernel<T, true, kAngle, kVecs, kStaged> : MeshFusedKernel<T, false, kAngle, kVecs, kStaged>;
    kernel<<<grid, block, 0, env.stream>>>(lat, lon, refs, n_ref, two_r, out);
    GC_CHECK_LAUNCH();
    return cudaSuccess;
  }
  using P = RowTerms<T, kWithG<kAngle>>;
  using C = ColumnTerms<T, kWithG<kAngle>>;
  Scratch rows, cols;
  GC_TRY((::gpucompute::cuda::haversine_mesh::LaunchMeshTerms<T, kWithG<kAngle>>(lat, lon, refs, n_ref, env, &rows,
                                                                                &cols)));
  auto kernel = vec ? MeshKernel<T, true, kAngle, kRows> : MeshKernel<T, false, kAngle, kRows>;
  kernel<<<grid, block, 0, env.stream>>>(rows.as<P>(), cols.as<C>(), lat.count, lon.count, n_ref, two_r, out);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
using PointsSplitKernelFn = void (*)(const T*, const T*, int64_t, const RefTerms<T>*, int64_t, T, T*, PointsResult*);

// A split kernel and how many of its blocks fit on an SM at once (asked once).
template <typename T, bool kPrefetch, HaversineAngle kLast, bool kChord = false, bool kVector = false>
std::pair<PointsSplitKernelFn<T>, int> PointsSplitFullWaves() {
  static const int blocks =
      ResidentBlocksPerSm(PointsSplitKernel<T, kPrefetch, kLast, kChord, kVector>, PointsPolicy::kThreads);
  return {PointsSplitKernel<T, kPrefetch, kLast, kChord, kVector>, blocks};
}

// kChord's last step: float64 the lean reduced step (g from chords), float32 h alone
// and the polynomial.
template <typename T>
constexpr HaversineAngle kChordAngle = sizeof(T) == 4 ? HaversineAngle::kAsinPolynomial : HaversineAngle::kAsinReducedLean;

template <typename T>
cudaError_t LaunchPointsT(const T* lat, const T* lon, int64_t n, const RefPoint* refs,
                          int64_t n_ref, double radius, T* out, PointsResult* result,
                          const LaunchEnv& env, HaversinePointsVariant variant) {
  using V = HaversinePointsVariant;
  const bool split = variant != V::kDirect;
  // kChordVector's 16-byte loads and stores: every row of out starts aligned.
  const bool vector = n % Vec16<T>::kCount == 0 && Aligned16(lat) && Aligned16(lon) && Aligned16(out);
  const int64_t per_thread = split ? kPointsPerThread<T> : 1;
  // The split kernel of each variant; two waves of 4 per SM, the reduced variants as
  // many blocks as fit at once.
  constexpr HaversineAngle kReduced = HaversineAngle::kAsinReduced;
  constexpr HaversineAngle kNewton = HaversineAngle::kAsinReducedNewton;
  constexpr HaversineAngle kBranchFree = HaversineAngle::kAsinReducedBranchFree;
  std::pair<PointsSplitKernelFn<T>, int> kernel{PointsSplitKernel<T, false>, PointsPolicy::kMinBlocksPerSm * 2};
  switch (variant) {
    case V::kSplitTerms:
    case V::kDirect: break;
    case V::kSplitPrefetch: kernel.first = PointsSplitKernel<T, true>; break;
    case V::kReduced: kernel = PointsSplitFullWaves<T, false, kReduced>(); break;
    case V::kReducedPrefetch: kernel = PointsSplitFullWaves<T, true, kReduced>(); break;
    case V::kReducedNewton: kernel = PointsSplitFullWaves<T, false, kNewton>(); break;
    case V::kReducedNewtonPrefetch: kernel = PointsSplitFullWaves<T, true, kNewton>(); break;
    case V::kReducedBranchFree: kernel = PointsSplitFullWaves<T, false, kBranchFree>(); break;
    case V::kChord: kernel = PointsSplitFullWaves<T, false, kChordAngle<T>, true>(); break;
    case V::kChordPrefetch: kernel = PointsSplitFullWaves<T, true, kChordAngle<T>, true>(); break;
    case V::kChordVector:
      kernel = vector ? PointsSplitFullWaves<T, true, kChordAngle<T>, true, true>()
                      : PointsSplitFullWaves<T, true, kChordAngle<T>, true>();
      break;
    case V::kReducedLean: kernel = PointsSplitFullWaves<T, false, HaversineAngle::kAsinReducedLean>(); break;
  }
  const int blocks_per_sm = kernel.second;
  const int64_t want = static_cast<int64_t>(env.sm_count) * blocks_per_sm;
  const int64_t groups = CeilDiv(n, PointsPolicy::kThreads * per_thread);  // blocks at one group a thread
  const int64_t gx = std::min(groups, std::max(want, CeilDiv(groups, kPointsGroupsPerThread<T>)));
  const int64_t gy = std::clamp<int64_t>(want / gx, 1, std::min<int64_t>(n_ref, 65535));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const T two_r = static_cast<T>(2.0 * radius);
  if (!split) {
    PointsKernel<T><<<grid, PointsPolicy::kThreads, 0, env.stream>>>(lat, lon, n, refs, n_ref, two_r, out, result);
    GC_CHECK_LAUNCH();
    return cudaSuccess;
  }
  Scratch terms;
  GC_TRY(terms.Allocate(static_cast<size_t>(n_ref) * sizeof(RefTerms<T>), env));
  const unsigned tgrid = GridFor(CeilDiv(n_ref, TermsPolicy::kThreads), env.sm_count, TermsPolicy::kMinBlocksPerSm);
  RefTermsKernel<T><<<tgrid, TermsPolicy::kThreads, 0, env.stream>>>(refs, n_ref, terms.as<RefTerms<T>>());
  GC_CHECK_LAUNCH();
  kernel.first<<<grid, PointsPolicy::kThreads, 0, env.stream>>>(lat, lon, n, terms.as<RefTerms<T>>(), n_ref, two_r,
                                                                 out, result);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchHaversineMeshVariant(DType dtype, const MeshAxis& lat, const MeshAxis& lon,
                                       const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                       const LaunchEnv& env, HaversineAngle angle,
                                       HaversineMeshSchedule schedule) {
  GC_REQUIRE(lat.count >= 0 && lon.count >= 0 && n_ref >= 0);
  if (lat.count == 0 || lon.count == 0 || n_ref == 0) return cudaSuccess;
  GC_REQUIRE(refs != nullptr && out != nullptr);
  auto with_angle = [&](auto tag, auto schedule_tag) -> cudaError_t {
    using T = decltype(tag);
    constexpr HaversineMeshSchedule kS = decltype(schedule_tag)::value;
    auto launch = [&](auto angle_tag) {
      return LaunchMeshT<T, decltype(angle_tag)::value, kS>(lat, lon, refs, n_ref, radius, static_cast<T*>(out), env);
    };
    using A = HaversineAngle;
    switch (angle) {
      case A::kAtan2: return launch(std::integral_constant<A, A::kAtan2>{});
      case A::kAsinSplit: return launch(std::integral_constant<A, A::kAsinSplit>{});
      case A::kAsin: return launch(std::integral_constant<A, A::kAsin>{});
      case A::kAsinPolynomial: return launch(std::integral_constant<A, A::kAsinPolynomial>{});
      case A::kAsinReduced: return launch(std::integral_constant<A, A::kAsinReduced>{});
      case A::kAsinReducedNewton: return launch(std::integral_constant<A, A::kAsinReducedNewton>{});
      case A::kAsinReducedBranchFree: return launch(std::integral_constant<A, A::kAsinReducedBranchFree>{});
      case A::kAsinReducedLean: return launch(std::integral_constant<A, A::kAsinReducedLean>{});
    }
    return cudaErrorInvalidValue;
  };
  auto run = [&](auto tag) -> cudaError_t {
    using S = HaversineMeshSchedule;
    switch (schedule) {
      case S::kCovering: return with_angle(tag, std::integral_constant<S, S::kCovering>{});
      case S::kFullWaves: return with_angle(tag, std::integral_constant<S, S::kFullWaves>{});
      case S::kFullWavesTwoRows: return with_angle(tag, std::integral_constant<S, S::kFullWavesTwoRows>{});
      case S::kFullWavesFused: return with_angle(tag, std::integral_constant<S, S::kFullWavesFused>{});
      case S::kFullWavesFusedWide: return with_angle(tag, std::integral_constant<S, S::kFullWavesFusedWide>{});
      case S::kFullWavesFusedStaged: return with_angle(tag, std::integral_constant<S, S::kFullWavesFusedStaged>{});
      case S::kFullWavesFusedWideStaged:
        return with_angle(tag, std::integral_constant<S, S::kFullWavesFusedWideStaged>{});
    }
    return cudaErrorInvalidValue;
  };
  return dtype == DType::kFloat32 ? run(float{}) : run(double{});
}

cudaError_t LaunchHaversinePointsVariant(DType dtype, const void* lat, const void* lon, int64_t n_points,
                                         const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                         PointsResult* result, const LaunchEnv& env,
                                         HaversinePointsVariant variant) {
  GC_REQUIRE(n_points >= 0 && n_ref >= 0 && result != nullptr);
  // 0xff bytes: both indices kNoIndex.
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(PointsResult), env.stream));
  if (n_points == 0 || n_ref == 0) return cudaSuccess;
  GC_REQUIRE(lat != nullptr && lon != nullptr && refs != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return LaunchPointsT<float>(static_cast<const float*>(lat), static_cast<const float*>(lon),
                                n_points, refs, n_ref, radius, static_cast<float*>(out), result,
                                env, variant);
  }
  return LaunchPointsT<double>(static_cast<const double*>(lat), static_cast<const double*>(lon),
                               n_points, refs, n_ref, radius, static_cast<double*>(out), result,
                               env, variant);
}

}  // namespace gpucompute::cuda::lab
