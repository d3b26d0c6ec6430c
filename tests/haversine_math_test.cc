// The arithmetic of the reduced haversine variants (kernels/cuda/haversine_math.h),
// run on the CPU against long double references. On the device sqrt(m) comes from
// rsqrt (1 ulp more); the kernels' own tests (gpu_kernel_variants_test) check that.
#include "kernels/cuda/haversine_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace gpucompute {
namespace {

namespace hm = cuda::haversine_math;

constexpr long double kPiL = 3.14159265358979323846264338327950288L;

// asin(sqrt(h)) with no cancellation: past h = 1/2 from 1 - h (exact there).
long double AsinSqrtReference(long double h) {
  return h > 0.5L ? kPiL / 2 - std::asin(std::sqrt(1.0L - h)) : std::asin(std::sqrt(h));
}

template <typename T>
double Ulps(T got, long double want) {
  const T w = static_cast<T>(want);
  const long double ulp = std::nextafter(std::fabs(w), std::numeric_limits<T>::infinity()) - std::fabs(w);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// Uniform h, h near 0 (down to 2^-60) and h near 1 (1 - h down to 2^-50).
template <typename T>
T SampleH(std::mt19937_64& rng, int i) {
  std::uniform_real_distribution<double> u(0, 1);
  switch (i % 3) {
    case 0: return static_cast<T>(u(rng));
    case 1: return static_cast<T>(std::ldexp(u(rng), -static_cast<int>(u(rng) * 60)));
    default: return static_cast<T>(1 - std::ldexp(u(rng), -static_cast<int>(u(rng) * 50)));
  }
}

template <typename T>
double WorstHalfAngleUlps(T scale) {
  std::mt19937_64 rng(15);
  double worst = 0;
  for (int i = 0; i < 300000; ++i) {
    const T h = SampleH<T>(rng, i);
    worst = std::max(worst, Ulps<T>(hm::ScaledHalfAngleReduced(h, scale), scale * AsinSqrtReference(h)));
  }
  return worst;
}

TEST(HaversineMath, HalfAngleReducedWithinAFewUlps) {
  // With a correctly rounded sqrt. Measured: 1.16 and 1.29 ulp at scale 1; 2.14 and
  // 2.36 times 2 R (one more rounding, and an error of y in its ulps is up to twice
  // that in the product's, as for every asin(sqrt(h)) times 2 R).
  EXPECT_LE(WorstHalfAngleUlps<double>(1.0), 1.5);
  EXPECT_LE(WorstHalfAngleUlps<double>(2 * 6371.0), 2.5);
  EXPECT_LE(WorstHalfAngleUlps<float>(1.0f), 1.5);
  EXPECT_LE(WorstHalfAngleUlps<float>(2 * 6371.0f), 2.5);
}

TEST(HaversineMath, HalfAngleReducedAtTheEndsAndRangeBoundaries) {
  EXPECT_EQ(hm::HalfAngleReduced(0.0), 0.0);
  EXPECT_EQ(hm::HalfAngleReduced(-1e-17), 0.0);  // roundings past either end are clamped
  EXPECT_EQ(hm::HalfAngleReduced(1.0), static_cast<double>(kPiL / 2));
  EXPECT_EQ(hm::HalfAngleReduced(1.0 + 1e-15), static_cast<double>(kPiL / 2));
  EXPECT_EQ(hm::HalfAngleReduced(0.0f), 0.0f);
  for (double h : {0.25, std::nextafter(0.25, 1.0), 0.5, 0.75, std::nextafter(0.75, 0.0)}) {
    EXPECT_LE(Ulps<double>(hm::HalfAngleReduced(h), AsinSqrtReference(h)), 2.0) << "h " << h;
  }
}

// sin and cos of x / 2 degrees, up to a sign common to both as the haversine's
// squares allow.
template <typename T>
double WorstSinCosError(double max_degrees) {
  std::mt19937_64 rng(16);
  std::uniform_real_distribution<double> u(-max_degrees, max_degrees);
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const T x = static_cast<T>(u(rng));
    T s, c;
    hm::SinCosHalfDegreesUpToSign(x, &s, &c);
    const long double t = std::fmod(static_cast<long double>(x), 720.0L) * kPiL / 360;
    const long double ws = std::sin(t), wc = std::cos(t);
    const long double same = std::fabs(s - ws) + std::fabs(c - wc);
    const long double flipped = std::fabs(s + ws) + std::fabs(c + wc);
    const long double err = std::max(std::fabs((same <= flipped ? s : -s) - ws),
                                     std::fabs((same <= flipped ? c : -c) - wc));
    worst = std::max(worst, static_cast<double>(err / std::numeric_limits<T>::epsilon()));
  }
  return worst;
}

TEST(HaversineMath, SinCosDegreesWithinTwoRoundings) {
  // In units of epsilon (absolute, sin and cos <= 1): measured 0.62 (float64), 0.61 (float32).
  EXPECT_LE(WorstSinCosError<double>(90), 1.0);
  EXPECT_LE(WorstSinCosError<double>(1e6), 1.0);  // the longitude rule
  EXPECT_LE(WorstSinCosError<float>(90), 1.0);
  EXPECT_LE(WorstSinCosError<float>(1e6), 1.0);
}

}  // namespace
}  // namespace gpucompute
