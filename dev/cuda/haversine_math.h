// The haversine arithmetic only the candidates use (haversine_variants.h), host and
// device: the "reduced" last step (HaversineAngle::kAsinReduced*,
// HaversinePointsVariant::kReduced*) and its square roots and forced selects. Everything
// the shipped kernels use too (the lean last step, the mesh terms' and the points' sines
// and cosines, the chords) has its home in kernels/cuda/haversine_math.h, visible here
// by the using-directive. haversine_math_test checks this on the CPU against long
// double, the GPU tests through the kernels. The device-only formulations are
// haversine_angles.cuh.
//
// Reduced last step: asin(sqrt(h)) = pi/4 + asin(2h - 1) / 2 for every h in [0, 1], and
// asin(z) = z R(z^2) with R(w) = asin(sqrt(w)) / sqrt(w). So with g = 1 - h formed from
// its own terms (HaversineG) and m = min(h, g): m <= 1/4 gives sqrt(m) R(m) (pi/2 minus
// that when m = g); 1/4 < m gives pi/4 + z R(z^2) / 2, z = h - g. One polynomial R on
// [0, 1/4] (float64 12 terms, float32 5) serves all three, chosen by selects.
// kAsinReducedBranchFree: the same with the selects forced; kAsinReducedNewton: sqrt(m)
// from the MUFU estimate and a Newton step; kAsinReducedLean (shipped): the same formula
// on 32-bit words with a 5-operation square root (SqrtLean), for h, g >= 0.
#pragma once

#include <cmath>

#include "kernels/cuda/haversine_math.h"

namespace gpucompute::cuda::lab::haversine_math {

using namespace ::gpucompute::cuda::haversine_math;


// sqrt(m) for m > 0 without the IEEE square root's range checks: m rsqrt(m) (rsqrt
// 1 ulp on the device: ~1.5 ulp in all).
template <typename T>
GC_HOST_DEVICE T SqrtOfPositive(T m) {
#if defined(__CUDA_ARCH__)
  return m * rsqrt(m);
#else
  return std::sqrt(m);
#endif
}

// SqrtOfPositive, 0 for m <= 0 (a rounding below 0).
template <typename T>
GC_HOST_DEVICE T SqrtOfNonNegative(T m) {
  return Bits(m) > 0 ? SqrtOfPositive(m) : T(0);
}

// a > b ? x : y, a and b compared as signed integers (Bits; a float's fit in 32
// bits), as one select the compiler cannot see through: NVVM turns the reduced step's
// selects into branches around the square root, and each branch ends a block, so the
// scheduler cannot interleave a thread's points (a 12-deep FMA chain each) across it.
GC_HOST_DEVICE double SelectIfGreater(long long a, long long b, double x, double y) {
#if defined(__CUDA_ARCH__)
  double r;
  asm("{\n\t.reg .pred q;\n\tsetp.gt.s64 q, %3, %4;\n\tselp.f64 %0, %1, %2, q;\n\t}"
      : "=d"(r) : "d"(x), "d"(y), "l"(a), "l"(b));
  return r;
#else
  return a > b ? x : y;
#endif
}
GC_HOST_DEVICE float SelectIfGreater(long long a, long long b, float x, float y) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("{\n\t.reg .pred q;\n\tsetp.gt.s32 q, %3, %4;\n\tselp.f32 %0, %1, %2, q;\n\t}"
      : "=f"(r) : "f"(x), "f"(y), "r"(static_cast<int>(a)), "r"(static_cast<int>(b)));
  return r;
#else
  return a > b ? x : y;
#endif
}

// float64 sqrt(m) from MUFU.RSQ64H's estimate y0 (rsqrt.approx.ftz.f64, ~2^-23
// relative) without the library rsqrt's range checks and slow-path branch: one
// coupled Newton step for s = sqrt(m) and h = 1/(2 sqrt(m)) together (s0 = m y0,
// h0 = y0/2, r = 1/2 - s0 h0: both to ~e0^2), then s + (m - s^2) h, the residual by
// FMA. 7 double operations, ~0.5 ulp for any estimate within 2^-16 (checked in long
// double on the CPU with the estimate perturbed); m below the smallest normal (the
// estimate flushes it) gives 0.
GC_HOST_DEVICE double SqrtByRsqrtNewton(double m) {
#if defined(__CUDA_ARCH__)
  double y;
  asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(m));
  double s = m * y, h = 0.5 * y;
  const double r = Fma(-s, h, 0.5);
  s = Fma(s, r, s);
  h = Fma(h, r, h);
  const double root = Fma(Fma(-s, s, m), h, s);
  return SelectIfGreater(Bits(m), Bits(0x1p-1022) - 1, root, 0.0);
#else
  return Bits(m) > 0 ? std::sqrt(m) : 0.0;
#endif
}

// How the reduced step takes sqrt(m) and makes its choices (HaversineAngle::
// kAsinReduced, kAsinReducedBranchFree, kAsinReducedNewton).
enum class ReducedForm {
  kPlain,       // m rsqrt(m); selects, which NVVM turns into branches around the sqrt
  kBranchFree,  // m rsqrt(m), every select forced (SelectIfGreater)
  kNewton,      // float64 SqrtByRsqrtNewton, every select forced
};

// sqrt(m) for the reduced step (m <= 1/4), 0 for m <= 0.
template <ReducedForm kForm, typename T>
GC_HOST_DEVICE T ReducedSqrt(T m) {
  if constexpr (kForm == ReducedForm::kNewton && sizeof(T) == 8) {
    return SqrtByRsqrtNewton(m);
  } else if constexpr (kForm == ReducedForm::kPlain) {
    return SqrtOfNonNegative(m);
  } else {
    return SelectIfGreater(Bits(m), 0, SqrtOfPositive(m), T(0));
  }
}

// scale * asin(sqrt(h)) from h and g = 1 - h, each formed without cancellation
// (HaversineG): near h = 1 the angle is pi/2 - asin(sqrt(g)), and g = 1 - h from a
// rounded h would carry h's absolute error, u / (2 sqrt(g)) in the angle (~10 ulp at
// 19900 km; the library asin(sqrt(h)) adds its sqrt's rounding, twice that). As
// scale (base + k x (1 + w tail(w))), m = min(h, g): (base, k, x, w) = (0, 1, sqrt(m),
// m) for m = h <= 1/4, (pi/2, -1, sqrt(m), m) for m = g <= 1/4, and (pi/4, 1/2, z, z^2)
// between, z = h - g = 2h - 1. The range tests compare bits (integer pipe; a rounding
// below 0 has negative bits and gives sqrt 0); base and k are selected constants, so
// the kernels keep no extra registers for them (folding scale into them saves a
// multiply but holds four more doubles across the loop: the fused kernel spilled).
// kForm: ReducedForm (kBranchFree, kNewton: the selects of m, w and x and the
// square root's forced, no branch at all).
template <typename T, ReducedForm kForm = ReducedForm::kPlain>
GC_HOST_DEVICE T ScaledHalfAngleReduced(T h, T g, T scale) {
  const bool upper = Bits(h) > Bits(g);
  const T z = h - g;
  T m, w, x;
  if constexpr (kForm != ReducedForm::kPlain) {
    m = SelectIfGreater(Bits(h), Bits(g), g, h);
    w = SelectIfGreater(Bits(m), Bits(T(0.25)), z * z, m);
    x = SelectIfGreater(Bits(m), Bits(T(0.25)), z, ReducedSqrt<kForm>(m));
  } else {
    m = upper ? g : h;
    w = Bits(m) > Bits(T(0.25)) ? z * z : m;
    x = Bits(m) > Bits(T(0.25)) ? z : ReducedSqrt<kForm>(m);
  }
  const bool middle = Bits(m) > Bits(T(0.25));
  const T k = middle ? T(0.5) : (upper ? T(-1) : T(1));
  const T base = middle ? static_cast<T>(kPi / 4) : (upper ? static_cast<T>(kPi / 2) : T(0));
  return scale * Fma(k, AsinByTail(x, w), base);
}


}  // namespace gpucompute::cuda::lab::haversine_math
