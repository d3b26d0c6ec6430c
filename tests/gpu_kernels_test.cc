// The shipped normalize and haversine launchers (kernels/cuda: LaunchNormalize,
// LaunchHaversineMesh, LaunchHaversinePoints) against the CPU backend in float64: row
// lengths on both sides of each switch of the normalize policy, pointers off 16-byte
// alignment, odd sizes, poisoned outputs that must all be overwritten, bad rows on every
// path; meshes and points across the globe and near the antipodes. Launchers are called
// directly (raw device memory, so pointers can be offset). dev/cuda's
// gpu_kernel_variants_test runs the same checks on the candidates.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/launchers.h"
#include "tests/testing/conformance.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/gpu_present.h"
#include "tests/testing/haversine_checks.h"
#include "tests/testing/normalize_checks.h"

namespace gpucompute {
namespace {

using test::Env;

// The shipped launchers, as the shared checks (tests/testing) take them.
const test::NormalizeLauncher kShippedNormalize[] = {{"shipped", cuda::LaunchNormalize}};

template <typename T>
void CheckNormalize(int64_t rows, int64_t cols) {
  test::CheckNormalize<T>(kShippedNormalize, rows, cols);
}

// Every switch of the policy (tests/testing/normalize_checks.h), the plain clusters
// and the TMA clusters of 2 and 16 blocks included.
TEST(GpuKernels, NormalizeAroundEveryPolicySwitch) {
  REQUIRE_GPU();
  test::CheckNormalizePolicySwitches(kShippedNormalize, {40000, 100003, 100004, 231429, 462851});
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

template <typename T>
void CheckBadRows(int64_t cols, int64_t rows = 7, int64_t first = 3) {
  test::CheckBadRows<T>(kShippedNormalize, cols, rows, first);
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
// Both store paths: 16-byte stores, and scalar stores one element off.
const test::MeshLauncher kShippedMesh[] = {{"shipped", 0, cuda::LaunchHaversineMesh},
                                           {"shipped", 1, cuda::LaunchHaversineMesh}};

TEST(GpuKernels, HaversineMeshMatchesReference) {
  REQUIRE_GPU();
  test::CheckMeshShapes(kShippedMesh);
}

// The mesh against long double (float64 forms g = 1 - h from its own terms near the
// antipodes); float32's step from h alone loses ~1 / sqrt(1 - h) ulp toward them.
template <typename T>
double CheckMeshAgainstLongDouble(double rtol, long double max_km = std::numeric_limits<long double>::infinity()) {
  return test::CheckMeshAgainstLongDouble<T>(cuda::LaunchHaversineMesh, "", rtol, max_km);
}

// float64 within a few ulp everywhere (9 to 18 measured); float32 from h alone within
// 1e-6 (~8 ulp) up to 15000 km (h ~ 0.93).
TEST(GpuKernels, HaversineMeshWithinAFewUlpsOfLongDouble) {
  REQUIRE_GPU();
  CheckMeshAgainstLongDouble<double>(2e-15);
  CheckMeshAgainstLongDouble<float>(1e-6, 15000);
}

// The 16-byte path where every array is aligned and n a multiple of the vector, and
// one element at a time from latitudes and output one element off.
const test::PointsLauncher kShippedPoints[] = {{"shipped", 0, cuda::LaunchHaversinePoints},
                                               {"shipped", 1, cuda::LaunchHaversinePoints}};

template <typename T>
void CheckPoints(int64_t n, int n_ref, double lon_range = 540) {
  test::CheckPoints<T>(kShippedPoints, n, n_ref, lon_range);
}

TEST(GpuKernels, HaversinePointsMatchReference) {
  REQUIRE_GPU();
  test::CheckPointsShapes(kShippedPoints);
}

// Longitudes are reduced by exact multiples of 180 degrees: out to the rule's 1e6.
TEST(GpuKernels, HaversinePointsFarLongitudes) {
  REQUIRE_GPU();
  CheckPoints<float>(30012, 5, 1e6);
  CheckPoints<double>(30012, 5, 1e6);
}

}  // namespace
}  // namespace gpucompute
