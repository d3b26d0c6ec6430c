// The checks of a haversine launcher, shared by tests/gpu_kernels_test.cc (the shipped
// LaunchHaversineMesh and LaunchHaversinePoints) and dev/cuda's gpu_kernel_variants_test
// (every candidate): meshes and points against the CPU backend in float64, with
// poisoned outputs that must all be overwritten, and the mesh elementwise against long
// double across the globe and through each antipode. Header-only, for targets built
// with CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cuda/launchers.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/half_angle_reference.h"
#include "tests/testing/tensors.h"

namespace gpucompute::test {

// The references on the device, with their cosines of latitude as the server computes them.
struct DeviceRefs {
  DeviceBuffer<cuda::RefPoint> buffer;
  explicit DeviceRefs(const std::vector<GeoPoint>& refs) : buffer(static_cast<int64_t>(refs.size()), 0) {
    std::vector<cuda::RefPoint> h(refs.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      h[i] = {refs[i].lat, refs[i].lon, std::cos(refs[i].lat * 0.017453292519943295769), 0};
    }
    buffer.Upload(h);
  }
};

// A mesh launcher under test (LaunchHaversineMesh's signature), its name in failure
// traces and the offset in elements of its output from a 256-byte boundary (1: scalar
// stores).
using MeshLaunch = std::function<cudaError_t(DType, const cuda::MeshAxis&, const cuda::MeshAxis&,
                                             const cuda::RefPoint*, int64_t, double, void*, const cuda::LaunchEnv&)>;
struct MeshLauncher {
  std::string name;
  int offset = 0;
  MeshLaunch launch;
};

template <typename T>
void CheckMesh(std::span<const MeshLauncher> launchers, const LatLonMesh& mesh, const std::vector<GeoPoint>& refs,
               double rel_l2) {
  const int64_t n_ref = static_cast<int64_t>(refs.size());
  const Shape shape = {n_ref, mesh.lat.count, mesh.lon.count};
  const int64_t n = n_ref * mesh.lat.count * mesh.lon.count;
  OpContext ctx;
  auto ref = Poisoned(*Cpu(), DType::kFloat64, shape);
  ASSERT_TRUE(Cpu()->HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *ref, ctx).ok());
  const std::vector<double> want = Read<double>(*Cpu(), *ref);
  const DeviceRefs d_refs(refs);
  for (const MeshLauncher& launcher : launchers) {
    SCOPED_TRACE(absl::StrCat(mesh.lat.count, " x ", mesh.lon.count, sizeof(T) == 4 ? " f32 " : " f64 ",
                              launcher.name, " offset ", launcher.offset));
    DeviceBuffer<T> out(n, launcher.offset);
    ASSERT_CUDA(launcher.launch(kDType<T>, {mesh.lat.start, mesh.lat.stop, mesh.lat.count},
                                {mesh.lon.start, mesh.lon.stop, mesh.lon.count}, d_refs.buffer.p, n_ref,
                                kDefaultEarthRadiusKm, out.p, Env()));
    ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<T> got = out.Download(n);
    for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
    ExpectRelativeL2(ToDoubles(got), want, rel_l2);
  }
}

// Meshes across the globe (including points near each reference's antipode, h near 1),
// around the first reference's antipode (-30, -79), where 1 - h is ~1e-11 and the
// distance is that ill-conditioned in h itself (the CPU reference included), odd sizes,
// and 64 columns (float4 stores).
inline void CheckMeshShapes(std::span<const MeshLauncher> launchers) {
  const std::vector<GeoPoint> refs = {{30, 101}, {-12.5, 40}, {89.9, -170}};
  const LatLonMesh globe{{-89.5, 89.5, 181}, {-179, 181, 363}};
  CheckMesh<float>(launchers, globe, refs, 2e-6);
  CheckMesh<double>(launchers, globe, refs, 1e-12);
  const LatLonMesh antipode{{-30.01, -29.99, 34}, {-79.01, -78.99, 36}};
  CheckMesh<double>(launchers, antipode, refs, 1e-9);
  CheckMesh<float>(launchers, {{29, 31, 7}, {99, 101, 9}}, refs, 2e-6);
  CheckMesh<float>(launchers, {{-60, 70, 50}, {-170, 170, 64}}, refs, 2e-6);
}

inline long double LongDoubleDistance(double lat, double lon, const GeoPoint& ref) {
  const long double d = kPiL / 360;
  const long double dlat = (static_cast<long double>(lat) - ref.lat) * d, dlon = (static_cast<long double>(lon) - ref.lon) * d;
  const long double sum = (static_cast<long double>(lat) + ref.lat) * d;
  const long double sl = std::sin(dlat), cl = std::cos(dlat), so = std::sin(dlon), co = std::cos(dlon), ss = std::sin(sum);
  const long double h = sl * sl + std::cos(2 * lat * d) * std::cos(2 * ref.lat * d) * so * so;
  const long double g = cl * cl * co * co + ss * ss * so * so;
  return 2 * static_cast<long double>(kDefaultEarthRadiusKm) * std::atan2(std::sqrt(h), std::sqrt(g));
}

inline double LinspaceAtLikeTheDevice(const Linspace& a, int64_t i) {
  if (a.count == 1) return a.start;
  if (i == a.count - 1) return a.stop;
  return std::fma(static_cast<double>(i), (a.stop - a.start) / static_cast<double>(a.count - 1), a.start);
}

// The mesh elementwise against long double, across the globe and through each antipode
// (h near 1): within rtol plus one ulp of a 180-degree coordinate (the device's linspace
// may round differently) over the distances up to max_km. Returns the largest error in
// ulps (and prints it, with `label`).
template <typename T>
double CheckMeshAgainstLongDouble(const MeshLaunch& launch, const std::string& label, double rtol,
                                  long double max_km = std::numeric_limits<long double>::infinity()) {
  const LatLonMesh globe{{-89.5, 89.5, 361}, {-180, 180, 724}};
  const std::vector<GeoPoint> refs = {{30, 101}, {-0.25, 0.5}};
  const DeviceRefs d_refs(refs);
  const int64_t n = static_cast<int64_t>(refs.size()) * globe.lat.count * globe.lon.count;
  DeviceBuffer<T> out(n, 0);
  const cudaError_t launched =
      launch(kDType<T>, {globe.lat.start, globe.lat.stop, globe.lat.count},
             {globe.lon.start, globe.lon.stop, globe.lon.count}, d_refs.buffer.p, static_cast<int64_t>(refs.size()),
             kDefaultEarthRadiusKm, out.p, Env());
  const cudaError_t synced = cudaDeviceSynchronize();
  EXPECT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
  EXPECT_EQ(synced, cudaSuccess) << cudaGetErrorString(synced);
  if (launched != cudaSuccess || synced != cudaSuccess) return 0;
  const std::vector<T> got = out.Download(n);
  double max_ulps = 0;
  const double coordinate_ulp_km = 2.9e-14 * 111.2;  // one ulp of 180 degrees, in km
  int64_t bad = 0, i = 0;
  for (const GeoPoint& ref : refs) {
    for (int64_t k = 0; k < globe.lat.count; ++k) {
      for (int64_t j = 0; j < globe.lon.count; ++j, ++i) {
        const long double want = LongDoubleDistance(LinspaceAtLikeTheDevice(globe.lat, k),
                                                    LinspaceAtLikeTheDevice(globe.lon, j), ref);
        if (want > max_km) continue;
        max_ulps = std::max(max_ulps, Ulps(got[i], want));
        if (!(std::fabs(got[i] - want) <= rtol * want + coordinate_ulp_km) && ++bad <= 5) {
          ADD_FAILURE() << "element " << i << ": device " << got[i] << ", long double "
                        << static_cast<double>(want);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << (sizeof(T) == 4 ? "f32" : "f64") << label;
  std::printf("haversine ulps: mesh %s%s: max %.2f ulp of long double\n", sizeof(T) == 4 ? "f32" : "f64",
              label.c_str(), max_ulps);
  return max_ulps;
}

// A points launcher under test (LaunchHaversinePoints's signature), its name in failure
// traces, and the offset in elements of its latitudes and output from a 256-byte
// boundary (16-byte loads and stores only where every array is aligned and n a multiple
// of the vector; else one element at a time).
struct PointsLauncher {
  std::string name;
  int offset = 0;
  std::function<cudaError_t(DType, const void*, const void*, int64_t, const cuda::RefPoint*, int64_t, double, void*,
                            cuda::PointsResult*, const cuda::LaunchEnv&)>
      launch;
};

template <typename T>
void CheckPoints(std::span<const PointsLauncher> launchers, int64_t n, int n_ref, double lon_range = 540) {
  const uint64_t seed = FreshSeed();
  std::vector<GeoPoint> refs;
  const std::vector<double> rl = Uniform<double>(n_ref, -89, 89, seed + 7), ro = Uniform<double>(n_ref, -180, 180, seed + 8);
  for (int r = 0; r < n_ref; ++r) refs.push_back({rl[r], ro[r]});
  const std::vector<T> lat = Uniform<T>(n, -90, 90, seed), lon = Uniform<T>(n, -lon_range, lon_range, seed + 1);
  // The reference gets the longitudes reduced mod 360 (exact): the same points, without
  // the CPU's own float64 rounding of 1e6 degrees in radians.
  const std::vector<double> lat64(lat.begin(), lat.end());
  std::vector<double> lon64;
  for (T v : lon) lon64.push_back(std::fmod(static_cast<double>(v), 360.0));
  OpContext ctx;
  auto ref = Poisoned(*Cpu(), DType::kFloat64, {n_ref, n});
  ASSERT_TRUE(Cpu()->HaversinePoints(*Put(*Cpu(), {n}, lat64), *Put(*Cpu(), {n}, lon64), refs,
                                     kDefaultEarthRadiusKm, *ref, ctx).ok());
  const std::vector<double> want = Read<double>(*Cpu(), *ref);
  const DeviceRefs d_refs(refs);
  for (const PointsLauncher& launcher : launchers) {
    SCOPED_TRACE(absl::StrCat(n, " points x ", n_ref, sizeof(T) == 4 ? " f32 " : " f64 ", launcher.name, " offset ",
                              launcher.offset, " seed ", seed));
    DeviceBuffer<T> la(n, launcher.offset), lo(n, 0), out(n * n_ref, launcher.offset);
    DeviceBuffer<cuda::PointsResult> res(1, 0);
    la.Upload(lat);
    lo.Upload(lon);
    ASSERT_CUDA(launcher.launch(kDType<T>, la.p, lo.p, n, d_refs.buffer.p, n_ref, kDefaultEarthRadiusKm, out.p, res.p,
                                Env()));
    ASSERT_CUDA(cudaDeviceSynchronize());
    const cuda::PointsResult r = res.Download(1)[0];
    EXPECT_EQ(r.bad_lat, cuda::kNoIndex);
    EXPECT_EQ(r.bad_lon, cuda::kNoIndex);
    const std::vector<T> got = out.Download(n * n_ref);
    for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
    ExpectRelativeL2(ToDoubles(got), want, sizeof(T) == 4 ? 1e-5 : 1e-12);
    double max_ulps = 0;
    for (size_t i = 0; i < got.size(); ++i) max_ulps = std::max(max_ulps, Ulps(got[i], want[i]));
    std::printf("haversine ulps: points %s %s (%lld x %d): max %.2f ulp of the float64 reference\n",
                sizeof(T) == 4 ? "f32" : "f64", launcher.name.c_str(), static_cast<long long>(n), n_ref, max_ulps);
  }
}

// Fewer points than one thread's share, odd tails, whole vectors (under memcheck the
// small shapes, which cover every path), and more references than blocks in y.
inline void CheckPointsShapes(std::span<const PointsLauncher> launchers) {
  for (int64_t n : {1, 5, 8, 1023, 1024, 300007, 300008}) {
    if (Sanitized() && n > 5000) continue;
    CheckPoints<float>(launchers, n, 3);
    CheckPoints<double>(launchers, n, 3);
  }
  CheckPoints<double>(launchers, 4099, 70);
}

}  // namespace gpucompute::test
