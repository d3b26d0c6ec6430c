// The shipped normalize and haversine launchers (kernels/cuda: LaunchNormalize,
// LaunchHaversineMesh, LaunchHaversinePoints) against the CPU backend in float64: row
// lengths on both sides of each switch of the normalize policy, pointers off 16-byte
// alignment, odd sizes, poisoned outputs that must all be overwritten, bad rows on every
// path; meshes and points across the globe and near the antipodes. Launchers are called
// directly (raw device memory, so pointers can be offset). dev/cuda's
// gpu_kernel_variants_test runs the same checks on the candidates.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/launchers.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/gpu_present.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using test::Cpu;
using test::DeviceBuffer;
using test::Env;
using test::ExpectRelativeL2;
using test::FreshSeed;
using test::kAllNorms;
using test::kDType;
using test::Poisoned;
using test::Put;
using test::Read;
using test::ToDoubles;
using test::Uniform;

template <typename T>
void RunNormalize(const std::vector<T>& x, int64_t rows, int64_t cols, NormKind norm, int in_offset, int out_offset,
                  cuda::NormalizeResult* host_result, std::vector<T>* out) {
  const int64_t n = rows * cols;
  DeviceBuffer<T> in(n, in_offset), o(n, out_offset);
  DeviceBuffer<cuda::NormalizeResult> res(1, 0);
  ASSERT_NE(in.p, nullptr);
  ASSERT_NE(o.p, nullptr);
  in.Upload(x);
  ASSERT_CUDA(cuda::LaunchNormalize(kDType<T>, in.p, o.p, rows, cols, norm, res.p, Env()));
  ASSERT_CUDA(cudaDeviceSynchronize());
  *host_result = res.Download(1)[0];
  *out = o.Download(n);
}

template <typename T>
void CheckNormalize(int64_t rows, int64_t cols) {
  const uint64_t seed = FreshSeed();
  const Shape shape = {rows, cols};
  for (NormKind norm : kAllNorms) {
    const std::vector<T> x = Uniform<T>(rows * cols, norm == NormKind::kSum ? 0.1 : -1.0, 1.0, seed);
    OpContext ctx;
    auto ref = Poisoned(*Cpu(), kDType<T>, shape);
    ASSERT_TRUE(Cpu()->Normalize(*Put(*Cpu(), shape, x), norm, *ref, ctx).ok());
    const std::vector<double> want = ToDoubles(Read<T>(*Cpu(), *ref));
    // Aligned, input off by one element, output off by one element.
    for (const auto [in_off, out_off] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
      SCOPED_TRACE(absl::StrCat(rows, " x ", cols, sizeof(T) == 4 ? " f32" : " f64", " norm ",
                                static_cast<int>(norm), " offsets ", in_off, "/", out_off, " seed ", seed));
      cuda::NormalizeResult result{};
      std::vector<T> got;
      RunNormalize(x, rows, cols, norm, in_off, out_off, &result, &got);
      ASSERT_EQ(result.bad_row, cuda::kNoIndex);
      for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
      ExpectRelativeL2(ToDoubles(got), want, sizeof(T) == 4 ? 1e-6 : 1e-14);
    }
  }
}

// Row lengths around every switch of the policy (normalize_plan.cuh): a lane a row in
// tiles (<= 12 / 10 columns; past 12 float32 rows go to the lane groups), 4-lane groups
// and tiles of 4 lanes a row (<= 32 columns), the register rows of the lane groups (32 /
// 64 / 128 / 256 columns for groups of 4 / 8 / 16 / 32), tiles of several rows (a row <=
// 4 KiB) and of one row (> 32 KiB), the shared-memory limit (~57848 / 28924 columns on
// sm_90, ~41k / 20.7k on sm_80, ~24.5k / 12.2k on sm_86/89), the TMA clusters, the
// clusters and the chunks past them.
TEST(GpuKernels, NormalizeAroundEveryPolicySwitch) {
  REQUIRE_GPU();
  for (int64_t cols :
       {1, 2, 3, 4, 5, 10, 11, 12, 13, 31, 32, 33, 64, 65, 100, 128, 129, 256, 257, 1023, 1024, 1025}) {
    CheckNormalize<float>(301, cols);
    CheckNormalize<double>(301, cols);
  }
  for (int64_t cols : {511, 512, 513, 4095, 4096, 4097, 8191, 8192, 8193}) {
    CheckNormalize<float>(13, cols);
    CheckNormalize<double>(13, cols);
  }
  for (int64_t cols : {12287, 12289, 20700, 24577, 28924, 28925, 41471, 41473, 57848, 57849, 65537}) {
    CheckNormalize<float>(3, cols);
    CheckNormalize<double>(3, cols);
  }
  for (int64_t cols : {40000, 100003, 100004, 231429, 462851}) {
    CheckNormalize<float>(2, cols);
    CheckNormalize<double>(2, cols);
  }
  CheckNormalize<float>(9000, 7);  // several tiles of 2048 rows and a partial one
  CheckNormalize<float>(100, 65537);
  CheckNormalize<double>(60, 65537);
}

// The held items on sm_90: rows the TMA clusters would split 16 ways (float32) or 8
// (float64), rows past them, and rows past half the grid's slots (the pipeline or the
// chunks); rows of one TMA cluster's two blocks, many of them.
TEST(GpuKernels, NormalizeLongRows) {
  REQUIRE_GPU();
  if (test::Sanitized()) GTEST_SKIP() << "too slow there: NormalizeBadRowsUnderRacecheck covers these paths";
  CheckNormalize<float>(4, 300000);
  CheckNormalize<double>(4, 75000);
  CheckNormalize<float>(3, 1000000);
  CheckNormalize<double>(3, 600000);
  CheckNormalize<float>(2, 4000000);
  CheckNormalize<float>(600, 8200);
  CheckNormalize<double>(300, 8200);
}

// A zero row is never divided by: the lowest bad row is reported, the others are
// normalized (rows `first` and `first` + 2 are zero).
template <typename T>
void CheckBadRows(int64_t cols, int64_t rows = 7, int64_t first = 3) {
  std::vector<T> x = Uniform<T>(rows * cols, 0.5, 1.5, FreshSeed());
  for (int64_t r : {first, first + 2}) std::fill(x.begin() + r * cols, x.begin() + (r + 1) * cols, T(0));
  for (NormKind norm : kAllNorms) {
    SCOPED_TRACE(absl::StrCat(cols, " cols", sizeof(T) == 4 ? " f32" : " f64", " norm ", static_cast<int>(norm)));
    cuda::NormalizeResult result{};
    std::vector<T> got;
    RunNormalize(x, rows, cols, norm, 0, 0, &result, &got);
    EXPECT_EQ(result.bad_row, static_cast<unsigned long long>(first));
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_TRUE(std::isfinite(got[c])) << "row 0 was not normalized";
      ASSERT_TRUE(std::isfinite(got[(rows - 1) * cols + c])) << "the last row was not normalized";
      ASSERT_TRUE(std::isnan(got[first * cols + c])) << "the zero row was written";
    }
  }
}

TEST(GpuKernels, NormalizeBadRowsOnEveryPath) {
  REQUIRE_GPU();
  for (int64_t cols : {3, 20, 50, 100, 2000, 9000, 70001, 100004}) {
    CheckBadRows<float>(cols);
    CheckBadRows<double>(cols);
  }
  CheckBadRows<float>(65537, 100, 96);  // among many chunked rows
  CheckBadRows<float>(8200, 600, 500);  // among many TMA cluster rows
}

TEST(GpuKernels, NormalizeBadRowsUnderRacecheck) {  // small: racecheck is slow
  REQUIRE_GPU();
  for (int64_t cols : {3, 20, 100, 2000, 9000}) CheckBadRows<float>(cols);
  CheckBadRows<double>(50);
  CheckBadRows<float>(60001, 5, 1);   // past a tile, unaligned: clusters
  CheckBadRows<float>(60004, 5, 1);   // aligned: the TMA clusters
  CheckBadRows<float>(300000, 5, 1);  // the held items (rows 1 and 3 zero, 4 the last)
  CheckBadRows<double>(20000, 5, 1);
}

// Rows held in registers, several a lane group: more rows than the grid has groups of 4
// lanes, so each group loads its next row ahead (float32 rows across 128-byte lines: 33,
// 100 and 200 columns) or one row at a time (64 columns, whole lines), as scalars (33)
// or 16-byte vectors (64, 100, 200); a bad row among the last.
TEST(GpuKernels, NormalizeRowGroupsManyRowsAGroup) {
  REQUIRE_GPU();
  const int64_t rows = 2 * int64_t{Env().sm_count} * 8 * (256 / 4) + 5;  // twice the 4-lane groups
  const std::vector<int64_t> widths =
      test::Sanitized() ? std::vector<int64_t>{20, 33} : std::vector<int64_t>{20, 33, 64, 100, 200};
  for (int64_t cols : widths) {
    CheckNormalize<float>(rows, cols);
    CheckBadRows<float>(cols, rows, rows - 7);
  }
}

// ---- haversine ----------------------------------------------------------------------------
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

template <typename T>
void CheckMesh(const LatLonMesh& mesh, const std::vector<GeoPoint>& refs, double rel_l2) {
  const int64_t n_ref = static_cast<int64_t>(refs.size());
  const Shape shape = {n_ref, mesh.lat.count, mesh.lon.count};
  const int64_t n = n_ref * mesh.lat.count * mesh.lon.count;
  OpContext ctx;
  auto ref = Poisoned(*Cpu(), DType::kFloat64, shape);
  ASSERT_TRUE(Cpu()->HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *ref, ctx).ok());
  const std::vector<double> want = Read<double>(*Cpu(), *ref);
  const DeviceRefs d_refs(refs);
  for (int offset : {0, 1}) {  // 16-byte stores, scalar stores
    SCOPED_TRACE(absl::StrCat(mesh.lat.count, " x ", mesh.lon.count, sizeof(T) == 4 ? " f32" : " f64", " offset ",
                              offset));
    DeviceBuffer<T> out(n, offset);
    ASSERT_CUDA(cuda::LaunchHaversineMesh(kDType<T>, {mesh.lat.start, mesh.lat.stop, mesh.lat.count},
                                          {mesh.lon.start, mesh.lon.stop, mesh.lon.count}, d_refs.buffer.p, n_ref,
                                          kDefaultEarthRadiusKm, out.p, Env()));
    ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<T> got = out.Download(n);
    for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
    ExpectRelativeL2(ToDoubles(got), want, rel_l2);
  }
}

TEST(GpuKernels, HaversineMeshMatchesReference) {
  REQUIRE_GPU();
  const std::vector<GeoPoint> refs = {{30, 101}, {-12.5, 40}, {89.9, -170}};
  // Across the globe, including points near each reference's antipode (h near 1).
  const LatLonMesh globe{{-89.5, 89.5, 181}, {-179, 181, 363}};
  CheckMesh<float>(globe, refs, 2e-6);
  CheckMesh<double>(globe, refs, 1e-12);
  // Around the first reference's antipode (-30, -79), where 1 - h is ~1e-11 and the
  // distance is that ill-conditioned in h itself (the CPU reference included).
  const LatLonMesh antipode{{-30.01, -29.99, 34}, {-79.01, -78.99, 36}};
  CheckMesh<double>(antipode, refs, 1e-9);
  CheckMesh<float>({{29, 31, 7}, {99, 101, 9}}, refs, 2e-6);  // odd sizes, tiny
  CheckMesh<float>({{-60, 70, 50}, {-170, 170, 64}}, refs, 2e-6);  // float4 stores (64 columns)
}

// The mesh elementwise against long double, across the globe and through each antipode
// (h near 1, where float64 forms g = 1 - h from its own terms): a few ulp plus one ulp
// of a 180-degree coordinate (the device's linspace may round differently).
long double LongDoubleDistance(double lat, double lon, const GeoPoint& ref) {
  const long double d = 3.14159265358979323846264338327950288L / 360;
  const long double dlat = (static_cast<long double>(lat) - ref.lat) * d, dlon = (static_cast<long double>(lon) - ref.lon) * d;
  const long double sum = (static_cast<long double>(lat) + ref.lat) * d;
  const long double sl = std::sin(dlat), cl = std::cos(dlat), so = std::sin(dlon), co = std::cos(dlon), ss = std::sin(sum);
  const long double h = sl * sl + std::cos(2 * lat * d) * std::cos(2 * ref.lat * d) * so * so;
  const long double g = cl * cl * co * co + ss * ss * so * so;
  return 2 * static_cast<long double>(kDefaultEarthRadiusKm) * std::atan2(std::sqrt(h), std::sqrt(g));
}

double LinspaceAtLikeTheDevice(const Linspace& a, int64_t i) {
  if (a.count == 1) return a.start;
  if (i == a.count - 1) return a.stop;
  return std::fma(static_cast<double>(i), (a.stop - a.start) / static_cast<double>(a.count - 1), a.start);
}

// |got - want| in units in the last place of T at want.
template <typename T>
double Ulps(T got, long double want) {
  const T w = static_cast<T>(want);
  const long double ulp = static_cast<long double>(std::nextafter(w, std::numeric_limits<T>::infinity())) - w;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// Returns the largest error in ulps (and prints it) over the distances up to max_km
// (float32's step from h alone loses ~1 / sqrt(1 - h) ulp toward the antipode).
template <typename T>
double CheckMeshAgainstLongDouble(double rtol, long double max_km = std::numeric_limits<long double>::infinity()) {
  const LatLonMesh globe{{-89.5, 89.5, 361}, {-180, 180, 724}};
  const std::vector<GeoPoint> refs = {{30, 101}, {-0.25, 0.5}};
  const DeviceRefs d_refs(refs);
  const int64_t n = static_cast<int64_t>(refs.size()) * globe.lat.count * globe.lon.count;
  DeviceBuffer<T> out(n, 0);
  const cudaError_t launched = cuda::LaunchHaversineMesh(
      kDType<T>, {globe.lat.start, globe.lat.stop, globe.lat.count}, {globe.lon.start, globe.lon.stop, globe.lon.count},
      d_refs.buffer.p, static_cast<int64_t>(refs.size()), kDefaultEarthRadiusKm, out.p, Env());
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
  EXPECT_EQ(bad, 0) << (sizeof(T) == 4 ? "f32" : "f64");
  std::printf("haversine ulps: mesh %s: max %.2f ulp of long double\n", sizeof(T) == 4 ? "f32" : "f64", max_ulps);
  return max_ulps;
}

// float64 within a few ulp everywhere (9 to 18 measured); float32 from h alone within
// 1e-6 (~8 ulp) up to 15000 km (h ~ 0.93).
TEST(GpuKernels, HaversineMeshWithinAFewUlpsOfLongDouble) {
  REQUIRE_GPU();
  CheckMeshAgainstLongDouble<double>(2e-15);
  CheckMeshAgainstLongDouble<float>(1e-6, 15000);
}

template <typename T>
void CheckPoints(int64_t n, int n_ref, double lon_range = 540) {
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
  for (int offset : {0, 1}) {
    SCOPED_TRACE(absl::StrCat(n, " points x ", n_ref, sizeof(T) == 4 ? " f32" : " f64", " offset ", offset,
                              " seed ", seed));
    // 16-byte loads and stores only where every array is aligned and n a multiple of the
    // vector; else one element at a time.
    DeviceBuffer<T> la(n, offset), lo(n, 0), out(n * n_ref, offset);
    DeviceBuffer<cuda::PointsResult> res(1, 0);
    la.Upload(lat);
    lo.Upload(lon);
    ASSERT_CUDA(cuda::LaunchHaversinePoints(kDType<T>, la.p, lo.p, n, d_refs.buffer.p, n_ref, kDefaultEarthRadiusKm,
                                            out.p, res.p, Env()));
    ASSERT_CUDA(cudaDeviceSynchronize());
    const cuda::PointsResult r = res.Download(1)[0];
    EXPECT_EQ(r.bad_lat, cuda::kNoIndex);
    EXPECT_EQ(r.bad_lon, cuda::kNoIndex);
    const std::vector<T> got = out.Download(n * n_ref);
    for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
    ExpectRelativeL2(ToDoubles(got), want, sizeof(T) == 4 ? 1e-5 : 1e-12);
    double max_ulps = 0;
    for (size_t i = 0; i < got.size(); ++i) max_ulps = std::max(max_ulps, Ulps(got[i], want[i]));
    std::printf("haversine ulps: points %s (%lld x %d): max %.2f ulp of the float64 reference\n",
                sizeof(T) == 4 ? "f32" : "f64", static_cast<long long>(n), n_ref, max_ulps);
  }
}

TEST(GpuKernels, HaversinePointsMatchReference) {
  REQUIRE_GPU();
  // Fewer points than one thread's share, odd tails, whole vectors.
  for (int64_t n : {1, 5, 8, 1023, 1024, 300007, 300008}) {
    if (test::Sanitized() && n > 5000) continue;  // memcheck: the small shapes cover every path
    CheckPoints<float>(n, 3);
    CheckPoints<double>(n, 3);
  }
  CheckPoints<double>(4099, 70);  // more references than blocks in y
}

// Longitudes are reduced by exact multiples of 180 degrees: out to the rule's 1e6.
TEST(GpuKernels, HaversinePointsFarLongitudes) {
  REQUIRE_GPU();
  CheckPoints<float>(30012, 5, 1e6);
  CheckPoints<double>(30012, 5, 1e6);
}

}  // namespace
}  // namespace gpucompute
