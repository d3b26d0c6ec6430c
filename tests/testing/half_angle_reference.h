// Long double references for the haversine last step and the errors against them, as
// tests/haversine_math_test.cc (the shipped step) and dev/cuda's haversine_math_test
// (the candidates' steps) measure them on the CPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "kernels/cuda/haversine_math.h"

namespace gpucompute::test {

constexpr long double kPiL = 3.14159265358979323846264338327950288L;

// asin(sqrt(h)) given h and g = 1 - h, from the smaller (no cancellation).
inline long double AsinSqrtReference(long double h, long double g) {
  return h <= g ? std::asin(std::sqrt(h)) : kPiL / 2 - std::asin(std::sqrt(g));
}

template <typename T>
double Ulps(T got, long double want) {
  const T w = static_cast<T>(want);
  const long double ulp = std::nextafter(std::fabs(w), std::numeric_limits<T>::infinity()) - std::fabs(w);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// (h, g = 1 - h): uniform h; h near 0 (down to 2^-60); h near 1, g down to 2^-60 given
// as the kernels form it, not as 1 - h; and h in [0.99, 1] (distances past ~19800 km).
template <typename T>
std::pair<T, T> SampleHG(std::mt19937_64& rng, int i) {
  std::uniform_real_distribution<double> u(0, 1);
  const auto complement = [](T x) { return std::pair<T, T>{x, static_cast<T>(1 - x)}; };
  switch (i % 4) {
    case 0: return complement(static_cast<T>(u(rng)));
    case 1: return complement(static_cast<T>(std::ldexp(u(rng), -static_cast<int>(u(rng) * 60))));
    case 2: {
      const T g = static_cast<T>(std::ldexp(u(rng), -static_cast<int>(u(rng) * 60)));
      return {static_cast<T>(1 - g), g};
    }
    default: {
      const T g = static_cast<T>(0.01 * u(rng));
      return {static_cast<T>(1 - g), g};
    }
  }
}

// The largest error in ulps of step(h, g, scale) = scale asin(sqrt(h)) over SampleHG.
template <typename T, typename Step>
double WorstHalfAngleUlps(T scale, Step step) {
  std::mt19937_64 rng(15);
  double worst = 0;
  for (int i = 0; i < 300000; ++i) {
    const auto [h, g] = SampleHG<T>(rng, i);
    worst = std::max(worst, Ulps<T>(step(h, g, scale), scale * AsinSqrtReference(h, g)));
  }
  return worst;
}

// The largest error in ulps of step(h, g, 2R) for distances from (30, 101) degrees to
// points around its antipode (-30, -79), 1e-7 to 3 degrees off (19700 km to 20015 km,
// h in [0.99, 1)), h and g composed as the mesh kernels do (row terms, column terms,
// h = A + B C, g = HaversineG), against long double.
template <typename T, typename Step>
double WorstNearAntipodalUlps(Step step) {
  namespace hm = cuda::haversine_math;
  constexpr double kLat0 = 30, kLon0 = 101, kTwoR = 2 * 6371.0088;
  const double cos_lat0 = std::cos(kLat0 * static_cast<double>(kPiL / 180));
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(-1, 1);
  double worst = 0;
  for (int i = 0; i < 100000; ++i) {
    const double off = 3 * std::pow(10.0, -7 * std::fabs(u(rng)));  // 3 degrees down to 3e-7
    const double lat = static_cast<T>(-kLat0 + off * u(rng)), lon = static_cast<T>(kLon0 - 180 + off * u(rng));
    const hm::LatitudeTerms row = hm::LatitudePairTerms(lat, kLat0, cos_lat0);
    double sin2, cos2;
    hm::LongitudeTerms(lon - kLon0, &sin2, &cos2);
    const T h = hm::Fma(static_cast<T>(row.cos_product), static_cast<T>(sin2), static_cast<T>(row.sin2_half_dlat));
    const T g = hm::HaversineG(static_cast<T>(row.cos2_half_dlat), static_cast<T>(row.sin2_half_lat_sum),
                               static_cast<T>(sin2), static_cast<T>(cos2));
    const long double d = kPiL / 360, dlat = (lat - kLat0) * d, dlon = (lon - kLon0) * d, sum = (lat + kLat0) * d;
    const long double want_h = std::sin(dlat) * std::sin(dlat) +
                               std::cos(lat * 2 * d) * std::cos(kLat0 * 2 * d) * std::sin(dlon) * std::sin(dlon);
    const long double want_g = std::cos(dlat) * std::cos(dlat) * std::cos(dlon) * std::cos(dlon) +
                               std::sin(sum) * std::sin(sum) * std::sin(dlon) * std::sin(dlon);
    const T got = step(h, g, static_cast<T>(kTwoR));
    worst = std::max(worst, Ulps<T>(got, kTwoR * AsinSqrtReference(want_h, want_g)));
  }
  return worst;
}

}  // namespace gpucompute::test
