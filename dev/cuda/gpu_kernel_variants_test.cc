// Every normalize path and haversine formulation of the lab (normalize_variants.h,
// haversine_variants.h: the shipped policy and the candidates) against the CPU backend in float64: row lengths on both sides
// of each policy switch, pointers off 16-byte alignment, odd sizes, poisoned outputs
// that must all be overwritten, and bad rows on every path. Launchers are called
// directly (raw device memory, so pointers can be offset).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "dev/cuda/haversine_variants.h"
#include "kernels/cuda/launchers.h"
#include "dev/cuda/normalize_variants.h"
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

constexpr cuda::lab::NormalizeVariant kNormalizeVariants[] = {
    cuda::lab::NormalizeVariant::kDefault, cuda::lab::NormalizeVariant::kTwoReads, cuda::lab::NormalizeVariant::kTile,
    cuda::lab::NormalizeVariant::kCluster, cuda::lab::NormalizeVariant::kNarrowGroups, cuda::lab::NormalizeVariant::kPipelined,
    cuda::lab::NormalizeVariant::kHeld,
    // The same kernels as ones above, other hints, cluster size or order:
    cuda::lab::NormalizeVariant::kPipelinedPlain, cuda::lab::NormalizeVariant::kCluster16,
    cuda::lab::NormalizeVariant::kPipelinedLagged, cuda::lab::NormalizeVariant::kPipelinedRowByRow,
    // The TMA cluster kernels (under the sanitizers: NormalizeClusterBulkSmall).
    cuda::lab::NormalizeVariant::kClusterBulk, cuda::lab::NormalizeVariant::kClusterBulkV4,
    cuda::lab::NormalizeVariant::kClusterBulkHalf};
constexpr size_t kDistinctNormalizeKernels = 7;

// Every variant; under compute-sanitizer (slow) the first kDistinctNormalizeKernels.
std::span<const cuda::lab::NormalizeVariant> NormalizeVariants() {
  return std::span(kNormalizeVariants).first(test::Sanitized() ? kDistinctNormalizeKernels
                                                                : std::size(kNormalizeVariants));
}
constexpr cuda::lab::NormalizeVariant kPipelineVariants[] = {
    cuda::lab::NormalizeVariant::kPipelined, cuda::lab::NormalizeVariant::kPipelinedPlain,
    cuda::lab::NormalizeVariant::kPipelinedLagged, cuda::lab::NormalizeVariant::kPipelinedRowByRow};
constexpr cuda::lab::NormalizeVariant kHeldVariant[] = {cuda::lab::NormalizeVariant::kHeld};
constexpr cuda::lab::NormalizeVariant kClusterBulkVariants[] = {
    cuda::lab::NormalizeVariant::kClusterBulk, cuda::lab::NormalizeVariant::kClusterBulkV4,
    cuda::lab::NormalizeVariant::kClusterBulkHalf};

// Runs one variant on x (rows x cols) and returns the device's result struct and output.
template <typename T>
void RunNormalize(const std::vector<T>& x, int64_t rows, int64_t cols, NormKind norm, cuda::lab::NormalizeVariant v,
                  int in_offset, int out_offset, cuda::NormalizeResult* host_result, std::vector<T>* out) {
  const int64_t n = rows * cols;
  DeviceBuffer<T> in(n, in_offset), o(n, out_offset);
  DeviceBuffer<cuda::NormalizeResult> res(1, 0);
  ASSERT_NE(in.p, nullptr);
  ASSERT_NE(o.p, nullptr);
  in.Upload(x);
  ASSERT_CUDA(cuda::lab::LaunchNormalizeVariant(kDType<T>, in.p, o.p, rows, cols, norm, res.p, Env(), v));
  ASSERT_CUDA(cudaDeviceSynchronize());
  *host_result = res.Download(1)[0];
  *out = o.Download(n);
}

template <typename T>
void CheckNormalizeVariants(int64_t rows, int64_t cols,
                            std::span<const cuda::lab::NormalizeVariant> variants = NormalizeVariants()) {
  const uint64_t seed = FreshSeed();
  const Shape shape = {rows, cols};
  for (NormKind norm : kAllNorms) {
    const std::vector<T> x = Uniform<T>(rows * cols, norm == NormKind::kSum ? 0.1 : -1.0, 1.0, seed);
    OpContext ctx;
    auto ref = Poisoned(*Cpu(), kDType<T>, shape);
    ASSERT_TRUE(Cpu()->Normalize(*Put(*Cpu(), shape, x), norm, *ref, ctx).ok());
    const std::vector<double> want = ToDoubles(Read<T>(*Cpu(), *ref));
    for (cuda::lab::NormalizeVariant v : variants) {
      // Aligned, input off by one element, output off by one element.
      for (const auto [in_off, out_off] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
        SCOPED_TRACE(absl::StrCat(rows, " x ", cols, sizeof(T) == 4 ? " f32" : " f64", " norm ",
                                  static_cast<int>(norm), " variant ", static_cast<int>(v), " offsets ",
                                  in_off, "/", out_off, " seed ", seed));
        cuda::NormalizeResult result{};
        std::vector<T> got;
        RunNormalize(x, rows, cols, norm, v, in_off, out_off, &result, &got);
        ASSERT_EQ(result.bad_row, cuda::kNoIndex);
        for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
        ExpectRelativeL2(ToDoubles(got), want, sizeof(T) == 4 ? 1e-6 : 1e-14);
      }
    }
  }
}

// Row lengths around every switch of the policy: a lane a row in tiles (<= 12 / 10
// columns; past 12 float32 rows go to the lane groups), 4-lane groups and tiles of 4
// lanes a row (<= 32 columns), the per-row slot cap (<= 4 columns in
// float32, 2 in float64), tiles of several rows (a
// row <= 4 KiB: 1024 / 512 columns) and of one row (> 32 KiB: 8192 / 4096), the
// shared-memory limit (~57848 / 28924 columns on sm_90, ~41k / 20.7k on sm_80,
// ~24.5k / 12.2k on sm_86/89), the register rows of the lane groups (32 / 64 / 128 /
// 256 columns for groups of 4 / 8 / 16 / 32), the chunks (> 4096) and the clusters
// (sm_90, the default and kCluster: 8 blocks of up to ~57.8k float32).
TEST(GpuKernelVariants, NormalizeAroundEveryPolicySwitch) {
  REQUIRE_GPU();
  for (int64_t cols :
       {1, 2, 3, 4, 5, 10, 11, 12, 13, 31, 32, 33, 64, 65, 100, 128, 129, 256, 257, 1023, 1024, 1025}) {
    CheckNormalizeVariants<float>(301, cols);
    CheckNormalizeVariants<double>(301, cols);
  }
  for (int64_t cols : {511, 512, 513, 4095, 4096, 4097, 8191, 8192, 8193}) {
    CheckNormalizeVariants<float>(13, cols);
    CheckNormalizeVariants<double>(13, cols);
  }
  for (int64_t cols : {12287, 12289, 20700, 24577, 28924, 28925, 41471, 41473, 57848, 57849, 65537}) {
    CheckNormalizeVariants<float>(3, cols);
    CheckNormalizeVariants<double>(3, cols);
  }
  // Clusters (sm_90): 8 (16) blocks per row, the last slice short; past 8 slices of a tile, chunks.
  for (int64_t cols : {100003, 231429, 462851}) {
    CheckNormalizeVariants<float>(2, cols);
    CheckNormalizeVariants<double>(2, cols);
  }
  CheckNormalizeVariants<float>(9000, 7);  // several tiles of 2048 rows and a partial one
  // Many rows of chunks (one launch each for the reduction and the scaling); for the
  // pipeline, reductions and scalings interleaved (more chunks than the lag).
  CheckNormalizeVariants<float>(100, 65537);
  CheckNormalizeVariants<double>(60, 65537);
}

// The pipeline's two orders, each side of the switch at a quarter of L2 (lagged below,
// row by row above; ~12.5 MB rows on an H100), rows ending mid-chunk and mid-vector.
TEST(GpuKernelVariants, NormalizePipelineRowByRow) {
  REQUIRE_GPU();
  int device = 0, l2 = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  ASSERT_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  for (int64_t step : {-1, 1}) {
    CheckNormalizeVariants<float>(3, l2 / 16 + step * 4099, kPipelineVariants);
    CheckNormalizeVariants<double>(2, l2 / 32 + step * 2049, kPipelineVariants);
  }
}

// A zero row is never divided by: the lowest bad row is reported, the others are
// normalized, on every path (rows `first` and `first` + 2 are zero).
template <typename T>
void CheckBadRows(int64_t cols, int64_t rows = 7, int64_t first = 3,
                  std::span<const cuda::lab::NormalizeVariant> variants = NormalizeVariants()) {
  std::vector<T> x = Uniform<T>(rows * cols, 0.5, 1.5, FreshSeed());
  for (int64_t r : {first, first + 2}) std::fill(x.begin() + r * cols, x.begin() + (r + 1) * cols, T(0));
  for (NormKind norm : kAllNorms) {
    for (cuda::lab::NormalizeVariant v : variants) {
      SCOPED_TRACE(absl::StrCat(cols, " cols", sizeof(T) == 4 ? " f32" : " f64", " norm ", static_cast<int>(norm),
                                " variant ", static_cast<int>(v)));
      cuda::NormalizeResult result{};
      std::vector<T> got;
      RunNormalize(x, rows, cols, norm, v, 0, 0, &result, &got);
      EXPECT_EQ(result.bad_row, static_cast<unsigned long long>(first));
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_TRUE(std::isfinite(got[c])) << "row 0 was not normalized";
        ASSERT_TRUE(std::isfinite(got[(rows - 1) * cols + c])) << "the last row was not normalized";
        ASSERT_TRUE(std::isnan(got[first * cols + c])) << "the zero row was written";
      }
    }
  }
}

TEST(GpuKernelVariants, NormalizeBadRowsOnEveryPath) {
  REQUIRE_GPU();
  for (int64_t cols : {3, 50, 100, 2000, 9000, 70001}) {
    CheckBadRows<float>(cols);
    CheckBadRows<double>(cols);
  }
  CheckBadRows<float>(65537, 100, 96);  // among many chunked rows
}

TEST(GpuKernelVariants, NormalizeBadRowsUnderRacecheck) {  // small: racecheck is slow
  REQUIRE_GPU();
  for (int64_t cols : {3, 100, 2000, 9000}) CheckBadRows<float>(cols);
  CheckBadRows<float>(60001, 5, 1);  // past a tile: clusters, chunks, the pipeline
  CheckBadRows<float>(60004, 5, 1, kHeldVariant);  // whole 16-byte vectors: the held items
}

// The held items (rows of whole 16-byte vectors only): rows of several 37 KiB items
// ending mid-item, many rows, and rows of more items than the grid has slots (6 an
// SM), whose first items are deferred and scaled again from memory.
TEST(GpuKernelVariants, NormalizeHeldRows) {
  REQUIRE_GPU();
  CheckNormalizeVariants<float>(50, 100004, kHeldVariant);
  CheckNormalizeVariants<double>(50, 50002, kHeldVariant);
  CheckNormalizeVariants<float>(7, 65540, kHeldVariant);
  // The default's held items on sm_90: rows the TMA clusters would split 16 ways
  // (float32) or 8 (float64), and rows past them.
  constexpr cuda::lab::NormalizeVariant kDefaultAndHeld[] = {cuda::lab::NormalizeVariant::kDefault,
                                                        cuda::lab::NormalizeVariant::kHeld};
  CheckNormalizeVariants<float>(4, 300000, kDefaultAndHeld);
  CheckNormalizeVariants<double>(4, 75000, kDefaultAndHeld);
  CheckNormalizeVariants<float>(3, 1000000, kDefaultAndHeld);
  CheckNormalizeVariants<double>(3, 600000, kDefaultAndHeld);
  const int64_t past_grid = 8 * int64_t{Env().sm_count} + 3;  // 32 KiB pieces: ~7 items an SM
  CheckNormalizeVariants<float>(2, past_grid * 8192 - 4, kHeldVariant);
  CheckNormalizeVariants<double>(2, past_grid * 4096 - 2, kHeldVariant);
  CheckBadRows<float>(100004, 7, 3, kHeldVariant);
  CheckBadRows<double>(50002, 7, 3, kHeldVariant);
}

// Rows held in registers, several a lane group: more rows than the grid has groups
// of 4 lanes (every row-group launch is capped at 8 blocks a multiprocessor), so each
// group loads its next row ahead (RowGroupAgent::RegisterRows, float32 rows across
// 128-byte lines: 7, 33, 100 and 200 columns) or one row at a time (64 columns, whole
// lines), as scalars (7, 33) or 16-byte vectors (64, 100, 200); a bad row among the last.
TEST(GpuKernelVariants, NormalizeRowGroupsManyRowsAGroup) {
  REQUIRE_GPU();
  constexpr cuda::lab::NormalizeVariant kRegisterRowVariants[] = {
      cuda::lab::NormalizeVariant::kDefault, cuda::lab::NormalizeVariant::kNarrowGroups, cuda::lab::NormalizeVariant::kTwoReads};
  const int64_t rows = 2 * int64_t{Env().sm_count} * 8 * (256 / 4) + 5;  // twice the 4-lane groups
  const std::vector<int64_t> widths =
      test::Sanitized() ? std::vector<int64_t>{7, 33} : std::vector<int64_t>{7, 33, 64, 100, 200};
  for (int64_t cols : widths) {
    CheckNormalizeVariants<float>(rows, cols, kRegisterRowVariants);
    CheckBadRows<float>(cols, rows, rows - 7, kRegisterRowVariants);
  }
}

// The TMA cluster path (sm_90; elsewhere, and where bulk copies cannot run, the
// default): clusters of 2, 4, 8 and 16 blocks (float32 rows of 40000, 100004 (the last
// slice shorter), 200000 and 250000 elements; float64 half as many), more rows than
// clusters (both buffers and both partial slots reused, a bad row late), rows whose
// bytes are not a multiple of 16 and offset pointers (the default runs).
TEST(GpuKernelVariants, NormalizeClusterBulk) {
  REQUIRE_GPU();
  if (test::Sanitized()) GTEST_SKIP() << "too slow there: NormalizeClusterBulkSmall is the sanitizers' test";
  for (int64_t cols : {40000, 100004, 200000, 250000}) {
    CheckNormalizeVariants<float>(5, cols, kClusterBulkVariants);
    CheckNormalizeVariants<double>(3, cols / 2, kClusterBulkVariants);
    CheckBadRows<float>(cols, 7, 3, kClusterBulkVariants);
    CheckBadRows<double>(cols / 2, 7, 3, kClusterBulkVariants);
  }
  CheckNormalizeVariants<float>(600, 8200, kClusterBulkVariants);  // 32.8 KB rows: 2 blocks each
  CheckNormalizeVariants<double>(300, 8200, kClusterBulkVariants);
  CheckNormalizeVariants<float>(3, 40001, kClusterBulkVariants);
  CheckNormalizeVariants<double>(3, 20001, kClusterBulkVariants);
  CheckBadRows<float>(8200, 600, 500, kClusterBulkVariants);
}

// Small enough for compute-sanitizer's memcheck, racecheck and synccheck: every norm
// against the reference, and rows wrapping around the clusters (more rows than an H100
// runs clusters of 2 at once) with a bad row among them.
TEST(GpuKernelVariants, NormalizeClusterBulkSmall) {
  REQUIRE_GPU();
  CheckNormalizeVariants<double>(2, 20000, kClusterBulkVariants);
  CheckBadRows<float>(8200, 300, 250, kClusterBulkVariants);
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
void CheckMeshAngles(const LatLonMesh& mesh, const std::vector<GeoPoint>& refs, double rel_l2) {
  const int64_t n_ref = static_cast<int64_t>(refs.size());
  const Shape shape = {n_ref, mesh.lat.count, mesh.lon.count};
  const int64_t n = n_ref * mesh.lat.count * mesh.lon.count;
  OpContext ctx;
  auto ref = Poisoned(*Cpu(), DType::kFloat64, shape);
  ASSERT_TRUE(Cpu()->HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *ref, ctx).ok());
  const std::vector<double> want = Read<double>(*Cpu(), *ref);
  const DeviceRefs d_refs(refs);
  for (auto angle : {cuda::lab::HaversineAngle::kAtan2, cuda::lab::HaversineAngle::kAsinSplit, cuda::lab::HaversineAngle::kAsin,
                     cuda::lab::HaversineAngle::kAsinPolynomial, cuda::lab::HaversineAngle::kAsinReduced,
                     cuda::lab::HaversineAngle::kAsinReducedNewton, cuda::lab::HaversineAngle::kAsinReducedBranchFree,
                     cuda::lab::HaversineAngle::kAsinReducedLean}) {
    for (auto [schedule, offset] : {std::pair{cuda::lab::HaversineMeshSchedule::kCovering, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kCovering, 1},  // scalar stores
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWaves, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesTwoRows, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesTwoRows, 1},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFused, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFused, 1},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFusedWide, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFusedWide, 1},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFusedStaged, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFusedStaged, 1},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFusedWideStaged, 0},
                                    std::pair{cuda::lab::HaversineMeshSchedule::kFullWavesFusedWideStaged, 1}}) {
      SCOPED_TRACE(absl::StrCat(mesh.lat.count, " x ", mesh.lon.count, sizeof(T) == 4 ? " f32" : " f64",
                                " angle ", static_cast<int>(angle), " schedule ", static_cast<int>(schedule),
                                " offset ", offset));
      DeviceBuffer<T> out(n, offset);
      ASSERT_CUDA(cuda::lab::LaunchHaversineMeshVariant(
          kDType<T>, {mesh.lat.start, mesh.lat.stop, mesh.lat.count}, {mesh.lon.start, mesh.lon.stop, mesh.lon.count},
          d_refs.buffer.p, n_ref, kDefaultEarthRadiusKm, out.p, Env(), angle, schedule));
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<T> got = out.Download(n);
      for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
      ExpectRelativeL2(ToDoubles(got), want, rel_l2);
    }
  }
}

TEST(GpuKernelVariants, HaversineMeshEveryAngleFormulation) {
  REQUIRE_GPU();
  const std::vector<GeoPoint> refs = {{30, 101}, {-12.5, 40}, {89.9, -170}};
  // Across the globe, including points near each reference's antipode (h near 1).
  const LatLonMesh globe{{-89.5, 89.5, 181}, {-179, 181, 363}};
  CheckMeshAngles<float>(globe, refs, 2e-6);
  CheckMeshAngles<double>(globe, refs, 1e-12);
  // Around the first reference's antipode (-30, -79), where 1 - h is ~1e-11 and the
  // distance is that ill-conditioned in h itself (the CPU reference included).
  const LatLonMesh antipode{{-30.01, -29.99, 34}, {-79.01, -78.99, 36}};
  CheckMeshAngles<double>(antipode, refs, 1e-9);
  CheckMeshAngles<float>({{29, 31, 7}, {99, 101, 9}}, refs, 2e-6);  // odd sizes, tiny
  CheckMeshAngles<float>({{-60, 70, 50}, {-170, 170, 64}}, refs, 2e-6);  // float4 stores (64 columns)
}

constexpr std::initializer_list<cuda::lab::HaversinePointsVariant> kEveryPointsVariant = {
    cuda::lab::HaversinePointsVariant::kSplitTerms, cuda::lab::HaversinePointsVariant::kDirect,
    cuda::lab::HaversinePointsVariant::kSplitPrefetch, cuda::lab::HaversinePointsVariant::kReduced,
    cuda::lab::HaversinePointsVariant::kReducedPrefetch, cuda::lab::HaversinePointsVariant::kReducedNewton,
    cuda::lab::HaversinePointsVariant::kReducedNewtonPrefetch, cuda::lab::HaversinePointsVariant::kReducedBranchFree,
    cuda::lab::HaversinePointsVariant::kChord, cuda::lab::HaversinePointsVariant::kChordPrefetch,
    cuda::lab::HaversinePointsVariant::kReducedLean, cuda::lab::HaversinePointsVariant::kChordVector};

// The reduced variant elementwise against long double, across the globe and through
// each antipode (h near 1, where it forms g = 1 - h from its own terms): a few ulp plus
// one ulp of a 180-degree coordinate (the device's linspace may round differently).
// The library's asin(sqrt(h)) is not held to this: near h = 1 its sqrt's rounding
// costs u / sqrt(1 - h) (~20 ulp at 19900 km), and h's own rounding half that.
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

// Returns the largest error in ulps (and prints it)
// over the distances up to max_km (formulations from h alone lose ~1 / sqrt(1 - h) ulp
// toward the antipode).
template <typename T>
double CheckMeshAgainstLongDouble(cuda::lab::HaversineAngle angle, cuda::lab::HaversineMeshSchedule schedule, double rtol,
                                  long double max_km = std::numeric_limits<long double>::infinity()) {
  const LatLonMesh globe{{-89.5, 89.5, 361}, {-180, 180, 724}};
  const std::vector<GeoPoint> refs = {{30, 101}, {-0.25, 0.5}};
  const DeviceRefs d_refs(refs);
  const int64_t n = static_cast<int64_t>(refs.size()) * globe.lat.count * globe.lon.count;
  DeviceBuffer<T> out(n, 0);
  const cudaError_t launched = cuda::lab::LaunchHaversineMeshVariant(
      kDType<T>, {globe.lat.start, globe.lat.stop, globe.lat.count}, {globe.lon.start, globe.lon.stop, globe.lon.count},
      d_refs.buffer.p, static_cast<int64_t>(refs.size()), kDefaultEarthRadiusKm, out.p, Env(), angle, schedule);
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
  EXPECT_EQ(bad, 0) << (sizeof(T) == 4 ? "f32" : "f64") << " angle " << static_cast<int>(angle) << " schedule "
                    << static_cast<int>(schedule);
  std::printf("haversine ulps: mesh %s angle %d schedule %d: max %.2f ulp of long double\n", sizeof(T) == 4 ? "f32" : "f64",
              static_cast<int>(angle), static_cast<int>(schedule), max_ulps);
  return max_ulps;
}

// The max includes the device's linspace rounding a coordinate differently (up to
// coordinate_ulp_km, a few ulp of a short distance), the same for every formulation:
// the Newton square roots (~0.5 ulp: SqrtByRsqrtNewton, SqrtLean) may cost at most 1 ulp
// over the library rsqrt, and forcing the selects changes no arithmetic.
TEST(GpuKernelVariants, HaversineReducedWithinAFewUlpsOfLongDouble) {
  REQUIRE_GPU();
  using S = cuda::lab::HaversineMeshSchedule;
  for (auto schedule : {S::kCovering, S::kFullWavesFused, S::kFullWavesFusedWide, S::kFullWavesFusedStaged,
                        S::kFullWavesFusedWideStaged}) {
    // float64 9 to 18 ulp, float32 8 to 16: catches a bad formulation, not 1 ulp.
    const double reduced = CheckMeshAgainstLongDouble<double>(cuda::lab::HaversineAngle::kAsinReduced, schedule, 2e-15);
    const double newton = CheckMeshAgainstLongDouble<double>(cuda::lab::HaversineAngle::kAsinReducedNewton, schedule, 2e-15);
    const double branch_free =
        CheckMeshAgainstLongDouble<double>(cuda::lab::HaversineAngle::kAsinReducedBranchFree, schedule, 2e-15);
    const double lean = CheckMeshAgainstLongDouble<double>(cuda::lab::HaversineAngle::kAsinReducedLean, schedule, 2e-15);
    EXPECT_LE(newton, reduced + 1) << "schedule " << static_cast<int>(schedule);
    EXPECT_LE(branch_free, reduced + 1) << "schedule " << static_cast<int>(schedule);
    EXPECT_LE(lean, reduced + 1) << "schedule " << static_cast<int>(schedule);
    for (auto angle : {cuda::lab::HaversineAngle::kAsinReduced, cuda::lab::HaversineAngle::kAsinReducedNewton,
                       cuda::lab::HaversineAngle::kAsinReducedBranchFree, cuda::lab::HaversineAngle::kAsinReducedLean}) {
      CheckMeshAgainstLongDouble<float>(angle, schedule, 1e-6);
    }
  }
}

// The float32 mesh default (kAsinPolynomial) takes h alone: within 1e-6 (~8 ulp) up to
// 15000 km (h ~ 0.93).
TEST(GpuKernelVariants, HaversineFloat32PolynomialWithinAFewUlpsOfLongDouble) {
  REQUIRE_GPU();
  using S = cuda::lab::HaversineMeshSchedule;
  for (auto schedule : {S::kCovering, S::kFullWaves, S::kFullWavesFused, S::kFullWavesFusedWide}) {
    CheckMeshAgainstLongDouble<float>(cuda::lab::HaversineAngle::kAsinPolynomial, schedule, 1e-6, 15000);
  }
}

template <typename T>
void CheckPointsVariants(int64_t n, int n_ref, double lon_range = 540,
                         std::initializer_list<cuda::lab::HaversinePointsVariant> variants = kEveryPointsVariant) {
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
  for (auto v : variants) {
    SCOPED_TRACE(absl::StrCat(n, " points x ", n_ref, sizeof(T) == 4 ? " f32" : " f64", " variant ",
                              static_cast<int>(v), " seed ", seed));
    // kChordVector takes its 16-byte path only where every array is aligned (and falls
    // back where n is not a multiple of its vector); the others start one element off.
    const int offset = v == cuda::lab::HaversinePointsVariant::kChordVector ? 0 : 1;
    DeviceBuffer<T> la(n, offset), lo(n, 0), out(n * n_ref, offset);
    DeviceBuffer<cuda::PointsResult> res(1, 0);
    la.Upload(lat);
    lo.Upload(lon);
    ASSERT_CUDA(cuda::lab::LaunchHaversinePointsVariant(kDType<T>, la.p, lo.p, n, d_refs.buffer.p, n_ref,
                                                   kDefaultEarthRadiusKm, out.p, res.p, Env(), v));
    ASSERT_CUDA(cudaDeviceSynchronize());
    const cuda::PointsResult r = res.Download(1)[0];
    EXPECT_EQ(r.bad_lat, cuda::kNoIndex);
    EXPECT_EQ(r.bad_lon, cuda::kNoIndex);
    const std::vector<T> got = out.Download(n * n_ref);
    for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
    ExpectRelativeL2(ToDoubles(got), want, sizeof(T) == 4 ? 1e-5 : 1e-12);
    double max_ulps = 0;
    for (size_t i = 0; i < got.size(); ++i) max_ulps = std::max(max_ulps, Ulps(got[i], want[i]));
    std::printf("haversine ulps: points %s variant %d (%lld x %d): max %.2f ulp of the float64 reference\n",
                sizeof(T) == 4 ? "f32" : "f64", static_cast<int>(v), static_cast<long long>(n), n_ref, max_ulps);
  }
}

TEST(GpuKernelVariants, HaversinePointsEveryVariant) {
  REQUIRE_GPU();
  // Fewer points than one thread's share, odd tails, whole vectors.
  for (int64_t n : {1, 5, 8, 1023, 1024, 300007, 300008}) {
    if (test::Sanitized() && n > 5000) continue;  // memcheck: the small shapes cover every path
    CheckPointsVariants<float>(n, 3);
    CheckPointsVariants<double>(n, 3);
  }
  CheckPointsVariants<double>(4099, 70);  // more references than blocks in y
}

// The reduced and chord variants reduce longitudes by exact multiples of 180 degrees: out to
// the rule's 1e6, where the others' float32 radians lose the angle.
TEST(GpuKernelVariants, HaversinePointsReducedFarLongitudes) {
  REQUIRE_GPU();
  for (auto v : {cuda::lab::HaversinePointsVariant::kReduced, cuda::lab::HaversinePointsVariant::kReducedPrefetch,
                 cuda::lab::HaversinePointsVariant::kReducedNewton, cuda::lab::HaversinePointsVariant::kReducedNewtonPrefetch,
                 cuda::lab::HaversinePointsVariant::kReducedBranchFree, cuda::lab::HaversinePointsVariant::kChord,
                 cuda::lab::HaversinePointsVariant::kChordPrefetch, cuda::lab::HaversinePointsVariant::kReducedLean,
                 cuda::lab::HaversinePointsVariant::kChordVector}) {
    CheckPointsVariants<float>(30012, 5, 1e6, {v});
    CheckPointsVariants<double>(30012, 5, 1e6, {v});
  }
}

}  // namespace
}  // namespace gpucompute
