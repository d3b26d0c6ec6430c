// Every normalize path and haversine formulation of the lab (normalize_variants.h,
// haversine_variants.h: the shipped policy and the candidates) against the CPU backend in float64: row lengths on both sides
// of each policy switch, pointers off 16-byte alignment, odd sizes, poisoned outputs
// that must all be overwritten, and bad rows on every path. Launchers are called
// directly (raw device memory, so pointers can be offset).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "dev/cuda/haversine_variants.h"
#include "kernels/cuda/launchers.h"
#include "dev/cuda/normalize_variants.h"
#include "tests/testing/conformance.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/gpu_present.h"
#include "tests/testing/haversine_checks.h"
#include "tests/testing/normalize_checks.h"

namespace gpucompute {
namespace {

using test::Env;

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

// The variants as the shared checks (tests/testing/normalize_checks.h) take them.
std::vector<test::NormalizeLauncher> NormalizeLaunchers(std::span<const cuda::lab::NormalizeVariant> variants) {
  std::vector<test::NormalizeLauncher> launchers;
  for (cuda::lab::NormalizeVariant v : variants) {
    launchers.push_back({absl::StrCat("variant ", static_cast<int>(v)),
                         [v](DType dtype, const void* in, void* out, int64_t rows, int64_t cols, NormKind norm,
                             cuda::NormalizeResult* result, const cuda::LaunchEnv& env) {
                           return cuda::lab::LaunchNormalizeVariant(dtype, in, out, rows, cols, norm, result, env, v);
                         }});
  }
  return launchers;
}

template <typename T>
void CheckNormalizeVariants(int64_t rows, int64_t cols,
                            std::span<const cuda::lab::NormalizeVariant> variants = NormalizeVariants()) {
  test::CheckNormalize<T>(NormalizeLaunchers(variants), rows, cols);
}

// Every switch of the policy (tests/testing/normalize_checks.h) on every path, the
// clusters (sm_90, the default and kCluster: 8 (16) blocks per row, the last slice
// short; past 8 slices of a tile, chunks) included.
TEST(GpuKernelVariants, NormalizeAroundEveryPolicySwitch) {
  REQUIRE_GPU();
  test::CheckNormalizePolicySwitches(NormalizeLaunchers(NormalizeVariants()), {100003, 231429, 462851});
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

// Zero rows on every path (tests/testing/normalize_checks.h).
template <typename T>
void CheckBadRows(int64_t cols, int64_t rows = 7, int64_t first = 3,
                  std::span<const cuda::lab::NormalizeVariant> variants = NormalizeVariants()) {
  test::CheckBadRows<T>(NormalizeLaunchers(variants), cols, rows, first);
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
// A mesh variant as the shared checks (tests/testing/haversine_checks.h) take it.
test::MeshLaunch MeshVariant(cuda::lab::HaversineAngle angle, cuda::lab::HaversineMeshSchedule schedule) {
  return [=](DType dtype, const cuda::MeshAxis& lat, const cuda::MeshAxis& lon, const cuda::RefPoint* refs,
             int64_t n_ref, double radius, void* out, const cuda::LaunchEnv& env) {
    return cuda::lab::LaunchHaversineMeshVariant(dtype, lat, lon, refs, n_ref, radius, out, env, angle, schedule);
  };
}

// Every last step on every schedule, each with 16-byte stores and (but kFullWaves)
// scalar stores one element off.
std::vector<test::MeshLauncher> MeshLaunchers() {
  std::vector<test::MeshLauncher> launchers;
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
      launchers.push_back({absl::StrCat("angle ", static_cast<int>(angle), " schedule ", static_cast<int>(schedule)),
                           offset, MeshVariant(angle, schedule)});
    }
  }
  return launchers;
}

TEST(GpuKernelVariants, HaversineMeshEveryAngleFormulation) {
  REQUIRE_GPU();
  test::CheckMeshShapes(MeshLaunchers());
}

constexpr std::initializer_list<cuda::lab::HaversinePointsVariant> kEveryPointsVariant = {
    cuda::lab::HaversinePointsVariant::kSplitTerms, cuda::lab::HaversinePointsVariant::kDirect,
    cuda::lab::HaversinePointsVariant::kSplitPrefetch, cuda::lab::HaversinePointsVariant::kReduced,
    cuda::lab::HaversinePointsVariant::kReducedPrefetch, cuda::lab::HaversinePointsVariant::kReducedNewton,
    cuda::lab::HaversinePointsVariant::kReducedNewtonPrefetch, cuda::lab::HaversinePointsVariant::kReducedBranchFree,
    cuda::lab::HaversinePointsVariant::kChord, cuda::lab::HaversinePointsVariant::kChordPrefetch,
    cuda::lab::HaversinePointsVariant::kReducedLean, cuda::lab::HaversinePointsVariant::kChordVector};

// The mesh against long double (tests/testing/haversine_checks.h): formulations from h
// alone lose ~1 / sqrt(1 - h) ulp toward the antipode. The library's asin(sqrt(h)) is
// not held to this: near h = 1 its sqrt's rounding costs u / sqrt(1 - h) (~20 ulp at
// 19900 km), and h's own rounding half that.
template <typename T>
double CheckMeshAgainstLongDouble(cuda::lab::HaversineAngle angle, cuda::lab::HaversineMeshSchedule schedule, double rtol,
                                  long double max_km = std::numeric_limits<long double>::infinity()) {
  return test::CheckMeshAgainstLongDouble<T>(
      MeshVariant(angle, schedule),
      absl::StrCat(" angle ", static_cast<int>(angle), " schedule ", static_cast<int>(schedule)), rtol, max_km);
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

std::vector<test::PointsLauncher> PointsLaunchers(std::initializer_list<cuda::lab::HaversinePointsVariant> variants) {
  std::vector<test::PointsLauncher> launchers;
  for (auto v : variants) {
    // kChordVector takes its 16-byte path only where every array is aligned (and falls
    // back where n is not a multiple of its vector); the others start one element off.
    const int offset = v == cuda::lab::HaversinePointsVariant::kChordVector ? 0 : 1;
    launchers.push_back({absl::StrCat("variant ", static_cast<int>(v)), offset,
                         [v](DType dtype, const void* lat, const void* lon, int64_t n_points,
                             const cuda::RefPoint* refs, int64_t n_ref, double radius, void* out,
                             cuda::PointsResult* result, const cuda::LaunchEnv& env) {
                           return cuda::lab::LaunchHaversinePointsVariant(dtype, lat, lon, n_points, refs, n_ref,
                                                                         radius, out, result, env, v);
                         }});
  }
  return launchers;
}

TEST(GpuKernelVariants, HaversinePointsEveryVariant) {
  REQUIRE_GPU();
  test::CheckPointsShapes(PointsLaunchers(kEveryPointsVariant));
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
    test::CheckPoints<float>(PointsLaunchers({v}), 30012, 5, 1e6);
    test::CheckPoints<double>(PointsLaunchers({v}), 30012, 5, 1e6);
  }
}

}  // namespace
}  // namespace gpucompute
