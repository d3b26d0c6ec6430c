// The shipped haversine arithmetic (kernels/cuda/haversine_math.h), run on the CPU
// against long double references, near the antipode too. On the device the square root's
// estimate is better than here; the kernels' own tests (gpu_backend_test) check them there.
#include "kernels/cuda/haversine_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>

#include "tests/testing/half_angle_reference.h"

namespace gpucompute {
namespace {

namespace hm = cuda::haversine_math;

using test::AsinSqrtReference;
using test::kPiL;
using test::Ulps;
using test::WorstHalfAngleUlps;
using test::WorstNearAntipodalUlps;

// The lean step with SqrtLean from an estimate worse than the device's (RsqrtEstimate on
// the host: 2^-20).
TEST(HaversineMath, HalfAngleLeanWithinAFewUlps) {
  const auto lean = [](double h, double g, double scale) { return hm::ScaledHalfAngleLean(h, g, scale); };
  EXPECT_LE(WorstHalfAngleUlps(1.0, lean), 1.5);
  EXPECT_LE(WorstHalfAngleUlps(2 * 6371.0, lean), 3.0);
}

TEST(HaversineMath, HalfAngleLeanAtTheEndsAndRangeBoundaries) {
  using W = hm::LeanWords;
  EXPECT_EQ(hm::HiWord(0.25), W::kQuarter);
  EXPECT_EQ(hm::HiWord(1.0), W::kOne);
  EXPECT_EQ(hm::HiWord(-1.0), W::kMinusOne);
  EXPECT_EQ(hm::HiWord(0.5), W::kHalf);
  EXPECT_EQ(hm::FromWords(W::kHalfPi, W::kPiLow), static_cast<double>(kPiL / 2));
  EXPECT_EQ(hm::FromWords(W::kQuarterPi, W::kPiLow), static_cast<double>(kPiL / 4));
  EXPECT_EQ(hm::ScaledHalfAngleLean(0.0, 1.0, 1.0), 0.0);  // coincident points: exactly 0
  EXPECT_EQ(hm::ScaledHalfAngleLean(1.0, 0.0, 1.0), static_cast<double>(kPiL / 2));
  // Roundings below 0 (not from the mesh's or the chords' sums, which are >= 0) stay finite.
  EXPECT_EQ(hm::ScaledHalfAngleLean(1.0 + 1e-15, -1e-17, 1.0), static_cast<double>(kPiL / 2));
  EXPECT_LE(std::fabs(hm::ScaledHalfAngleLean(-1e-17, 1.0, 1.0)), 1e-150);
  for (double h : {0.25, std::nextafter(0.25, 1.0), 0.25 * (1 + 0x1p-21), 0.5, 0.75, std::nextafter(0.75, 0.0),
                   0.75 - 0x1p-23}) {
    EXPECT_LE(Ulps<double>(hm::ScaledHalfAngleLean(h, 1 - h, 1.0), AsinSqrtReference(h, 1 - h)), 2.0) << "h " << h;
  }
}

// The lean step a range at a time (ScaledHalfAngleLower / Middle / Upper), each h given to
// the range InLeanRange puts it in, as the mesh kernels do when a warp's h share one.
double HalfAngleByRange(double h, double g, double scale) {
  if (hm::InLeanRange(hm::LeanRange::kLower, h)) return hm::ScaledHalfAngleLower(h, scale);
  if (hm::InLeanRange(hm::LeanRange::kMiddle, h)) return hm::ScaledHalfAngleMiddle(h, scale);
  return hm::ScaledHalfAngleUpper(g, scale);
}

TEST(HaversineMath, HalfAngleByRangeWithinAFewUlps) {
  EXPECT_LE(WorstHalfAngleUlps(1.0, HalfAngleByRange), 1.5);
  EXPECT_LE(WorstHalfAngleUlps(2 * 6371.0, HalfAngleByRange), 3.0);
}

TEST(HaversineMath, HalfAngleByRangeAtTheEndsAndRangeBoundaries) {
  EXPECT_EQ(hm::HiWord(0.75), hm::kThreeQuartersHi);
  EXPECT_EQ(hm::ScaledHalfAngleLower(0.0, 1.0), 0.0);  // coincident points: exactly 0
  EXPECT_EQ(hm::ScaledHalfAngleUpper(0.0, 1.0), static_cast<double>(kPiL / 2));
  for (double h : {0.0, 0x1p-1074, 0.25, std::nextafter(0.25, 0.0), std::nextafter(0.25, 1.0), 0.5, 0.75,
                   std::nextafter(0.75, 0.0), std::nextafter(0.75, 1.0), 1.0}) {
    int ranges = 0;  // each h in exactly one range
    for (auto r : {hm::LeanRange::kLower, hm::LeanRange::kMiddle, hm::LeanRange::kUpper}) ranges += hm::InLeanRange(r, h);
    EXPECT_EQ(ranges, 1) << "h " << h;
    if (h > 0x1p-1022) {
      EXPECT_LE(Ulps<double>(HalfAngleByRange(h, 1 - h, 1.0), AsinSqrtReference(h, 1 - h)), 2.0) << "h " << h;
    }
  }
}

// SqrtLean against long double over [0, 1], down to 2^-1074 (the estimate's argument is
// clamped to the smallest normal: below it only finiteness and size are promised).
TEST(HaversineMath, SqrtLeanWithinAnUlp) {
  EXPECT_EQ(hm::SqrtLean(0.0), 0.0);
  EXPECT_EQ(hm::SqrtLean(1.0), 1.0);
  std::mt19937_64 rng(18);
  std::uniform_real_distribution<double> u(0, 1);
  double worst = 0;
  for (int i = 0; i < 300000; ++i) {
    const double m = std::ldexp(u(rng), -static_cast<int>(u(rng) * (i % 2 ? 60 : 1000)));
    if (m < 0x1p-1022) continue;
    worst = std::max(worst, Ulps<double>(hm::SqrtLean(m), std::sqrt(static_cast<long double>(m))));
  }
  EXPECT_LE(worst, 1.0);
  for (double m : {0x1p-1074, 0x1p-1030, std::nextafter(0x1p-1022, 0.0)}) {
    const double r = hm::SqrtLean(m);
    EXPECT_TRUE(std::isfinite(r) && r >= 0 && r < 1e-150) << m << " -> " << r;
  }
}

TEST(HaversineMath, NearAntipodalDistancesWithinAFewUlps) {
  // g from its own terms. From g = 1 - h the error would grow as 1 / sqrt(1 - h).
  EXPECT_LE(WorstNearAntipodalUlps<double>([](double h, double g, double s) { return hm::ScaledHalfAngleLean(h, g, s); }),
            2.0);
  EXPECT_LE(WorstNearAntipodalUlps<double>(HalfAngleByRange), 2.0);
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

// Points by chords: half unit vectors, the smaller of h
// and g from their difference or sum, the lean step (ChordHalfAngleLean); against long
// double for random pairs, pairs 1e-9 to 1 degree apart and pairs as far from their
// antipode. The coordinates' absolute errors (a few 1e-16) bound the angle's error
// absolutely: per pair |error| <= 4
// ulp + 2 R 1e-15.
TEST(HaversineMath, ChordDistancesWithinUlpsPlusAnAbsoluteBound) {
  constexpr long double kTwoR = 2 * 6371.0088L;
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<double> u(-1, 1);
  double worst = 0, worst_ulps = 0, worst_km = 0;
  for (int i = 0; i < 300000; ++i) {
    const double lat0 = 89 * u(rng), lon0 = 180 * u(rng);
    const double off = std::pow(10.0, -9 * std::fabs(u(rng)));  // 1 degree down to 1e-9
    double lat = 90 * u(rng), lon = 540 * u(rng);
    if (i % 3 == 1) lat = lat0 + off * u(rng), lon = lon0 + off * u(rng);
    if (i % 3 == 2) lat = -lat0 + off * u(rng), lon = lon0 + 180 + off * u(rng);
    const hm::HalfVector<double> p = hm::HalfUnitVector(lat, lon), q = hm::HalfUnitVector(lat0, lon0);
    const double got = hm::ChordHalfAngleLean(p, q, static_cast<double>(kTwoR));
    const long double d = kPiL / 360, dlat = (lat - lat0) * d, dlon = (lon - lon0) * d, sum = (lat + lat0) * d;
    const long double sl = std::sin(dlat), so = std::sin(dlon), cl = std::cos(dlat), co = std::cos(dlon), ss = std::sin(sum);
    const long double want = kTwoR * AsinSqrtReference(sl * sl + std::cos(2 * lat * d) * std::cos(2 * lat0 * d) * so * so,
                                                       cl * cl * co * co + ss * ss * so * so);
    const double err = static_cast<double>(std::fabs(static_cast<long double>(got) - want));
    const double w = static_cast<double>(want), ulp = std::nextafter(w, 2 * w + 1) - w;
    worst = std::max(worst, err / (4 * ulp + static_cast<double>(kTwoR) * 1e-15));
    worst_ulps = std::max(worst_ulps, err / ulp);
    worst_km = std::max(worst_km, err);
  }
  std::printf("chord float64: worst %.3g of the bound; %.3g ulp, %.3g km at most\n", worst, worst_ulps, worst_km);
  EXPECT_LE(worst, 1.0);
}

}  // namespace
}  // namespace gpucompute
