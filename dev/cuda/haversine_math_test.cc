// The arithmetic only the haversine candidates use (dev/cuda/haversine_math.h: the
// reduced last step and its forced forms), run on the CPU against long double
// references, near the antipode too. The shipped arithmetic, which the candidates share,
// is tests/haversine_math_test.cc's. On the device sqrt(m) comes from rsqrt (1 ulp
// more); the kernels' own tests (gpu_kernel_variants_test) check that.
#include "dev/cuda/haversine_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "tests/testing/half_angle_reference.h"

namespace gpucompute {
namespace {

namespace hm = cuda::lab::haversine_math;

using test::AsinSqrtReference;
using test::kPiL;
using test::SampleHG;
using test::Ulps;
using test::WorstNearAntipodalUlps;

template <typename T>
double WorstHalfAngleUlps(T scale) {
  return test::WorstHalfAngleUlps(scale, [](T h, T g, T sc) { return hm::ScaledHalfAngleReduced(h, g, sc); });
}

TEST(HaversineMath, HalfAngleReducedWithinAFewUlps) {
  // With a correctly rounded sqrt. Measured: 1.42 and 1.46 ulp at scale 1; 2.43 and
  // 2.49 times 2 R (one more rounding, and an error of y in its ulps is up to twice
  // that in the product's, as for every asin(sqrt(h)) times 2 R).
  EXPECT_LE(WorstHalfAngleUlps<double>(1.0), 1.5);
  EXPECT_LE(WorstHalfAngleUlps<double>(2 * 6371.0), 3.0);
  EXPECT_LE(WorstHalfAngleUlps<float>(1.0f), 1.5);
  EXPECT_LE(WorstHalfAngleUlps<float>(2 * 6371.0f), 3.0);
}

TEST(HaversineMath, HalfAngleReducedAtTheEndsAndRangeBoundaries) {
  EXPECT_EQ(hm::ScaledHalfAngleReduced(0.0, 1.0, 1.0), 0.0);
  EXPECT_EQ(hm::ScaledHalfAngleReduced(-1e-17, 1.0, 1.0), 0.0);  // roundings below 0 give 0
  EXPECT_EQ(hm::ScaledHalfAngleReduced(1.0, 0.0, 1.0), static_cast<double>(kPiL / 2));
  EXPECT_EQ(hm::ScaledHalfAngleReduced(1.0 + 1e-15, -1e-17, 1.0), static_cast<double>(kPiL / 2));
  EXPECT_EQ(hm::ScaledHalfAngleReduced(0.0f, 1.0f, 1.0f), 0.0f);
  EXPECT_EQ(hm::ScaledHalfAngleReduced(1.0f, 0.0f, 1.0f), static_cast<float>(kPiL / 2));
  for (double h : {0.25, std::nextafter(0.25, 1.0), 0.5, 0.75, std::nextafter(0.75, 0.0)}) {
    EXPECT_LE(Ulps<double>(hm::ScaledHalfAngleReduced(h, 1 - h, 1.0), AsinSqrtReference(h, 1 - h)), 2.0) << "h " << h;
  }
}

// The branch-free and Newton forms (HaversineAngle::kAsinReducedBranchFree,
// kAsinReducedNewton) differ from the plain one on the device only in their control
// flow and square root; here, where all take std::sqrt, their forced selects must
// pick the same ranges: equal results, ends included.
template <typename T, hm::ReducedForm kForm>
int64_t FormDifferences() {
  std::mt19937_64 rng(16);
  int64_t differ = 0;
  for (int i = 0; i < 100000; ++i) {
    const auto [h, g] = SampleHG<T>(rng, i);
    differ += hm::ScaledHalfAngleReduced<T, kForm>(h, g, T(2 * 6371)) != hm::ScaledHalfAngleReduced(h, g, T(2 * 6371));
  }
  for (T h : {T(0), T(-1e-17), T(0.25), std::nextafter(T(0.25), T(1)), T(0.5), T(0.75), T(1)}) {
    differ += hm::ScaledHalfAngleReduced<T, kForm>(h, 1 - h, T(1)) != hm::ScaledHalfAngleReduced(h, 1 - h, T(1));
  }
  return differ;
}

TEST(HaversineMath, HalfAngleReducedForcedFormsSelectTheSameRanges) {
  EXPECT_EQ((FormDifferences<double, hm::ReducedForm::kBranchFree>()), 0);
  EXPECT_EQ((FormDifferences<double, hm::ReducedForm::kNewton>()), 0);
  EXPECT_EQ((FormDifferences<float, hm::ReducedForm::kBranchFree>()), 0);
  EXPECT_EQ((FormDifferences<float, hm::ReducedForm::kNewton>()), 0);
}

TEST(HaversineMath, NearAntipodalDistancesWithinAFewUlps) {
  // g from its own terms: measured 1.10 (float64) and 1.15 ulp (float32). From g =
  // 1 - h the error grows as 1 / sqrt(1 - h): ~10 ulp at 19900 km, 1900 (float32) and
  // 6e7 (float64) ulp 3e-7 degrees off.
  const auto reduced = [](auto h, auto g, auto scale) { return hm::ScaledHalfAngleReduced(h, g, scale); };
  EXPECT_LE(WorstNearAntipodalUlps<double>(reduced), 2.0);
  EXPECT_LE(WorstNearAntipodalUlps<float>(reduced), 2.0);
}

}  // namespace
}  // namespace gpucompute
