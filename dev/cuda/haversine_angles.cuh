// The last step's formulations, device only (haversine_variants.h: HaversineAngle), and
// DistanceFromH / DistanceFromHG, which pick one.
#pragma once

#include <cuda_runtime.h>

#include "dev/cuda/haversine_math.h"
#include "dev/cuda/haversine_variants.h"

namespace gpucompute::cuda::lab::haversine_math {

// ---- the earlier formulations of the last step, and the choice (device only) ----------
// atan2(sqrt(h), sqrt(1 - h)) for h in [0, 1] in float32 without the library's
// branches and IEEE division/sqrt slow paths (the f32 mesh kernel was issue-bound at
// ~80 instructions per point): with g = 1 - h, the smaller of the two angles has
// tangent t = sqrt(min(h, g) / max(h, g)) in [0, 1]; atan(t) = t + t^3 P(t^2) with a
// degree-7 weighted least-squares fit (1.5 ulp in float32), and the larger angle is
// pi/2 - atan(t). __fdividef (2 ulp, max(h, g) >= 0.5) and rsqrtf (2 ulp) keep the
// total near 3 ulp: ~25 instructions, 2 MUFU.
__device__ __forceinline__ float HalfCentralAngle(float h) {
  const float g = 1.0f - h;
  const float lo = fminf(h, g), hi = fmaxf(h, g);
  const float q = __fdividef(lo, hi);
  const float t = q > 0.0f ? q * rsqrtf(q) : 0.0f;
  const float u = t * t;
  float p = 2.920677885e-03f;
  p = fmaf(p, u, -1.636787318e-02f);
  p = fmaf(p, u, 4.321177676e-02f);
  p = fmaf(p, u, -7.552207261e-02f);
  p = fmaf(p, u, 1.066600159e-01f);
  p = fmaf(p, u, -1.421105415e-01f);
  p = fmaf(p, u, 1.999377310e-01f);
  p = fmaf(p, u, -3.333315253e-01f);
  const float a = fmaf(t * u, p, t);
  return h <= g ? a : 1.57079632679489662f - a;
}

// asin(sqrt(h)) as asin(sqrt(m)), m = min(h, 1 - h) <= 1/2, and pi/2 minus that when
// h > 1/2 (asin(sqrt(h)) + asin(sqrt(1 - h)) = pi/2; 1 - h is exact there): the
// library asin stays on its short polynomial branch and one square root replaces
// atan2's two and its division.
template <typename T>
__device__ __forceinline__ T HalfAngleByAsin(T h) {
  const T g = T(1) - h;
  const T a = asin(sqrt(fmin(h, g)));
  return h <= g ? a : static_cast<T>(1.5707963267948966192) - a;
}

// asin(sqrt(m)) / sqrt(m) for m in [0, 1/2], in float64: the Chebyshev interpolant at
// 20 nodes (computed in 60-digit arithmetic from the series sum (2k)! m^k /
// (4^k (k!)^2 (2k + 1)), converted to monomials and rounded): fit error 8e-18, about
// 1 ulp with Horner. 19 FMAs, no branch, no division.
__device__ __forceinline__ double AsinSqrtRatio(double m) {
  constexpr double kC[20] = {
      1.0, 0.16666666666666963, 0.07499999999921603, 0.044642857225197834,
      0.030381939881673394, 0.022372313172485805, 0.017349310327158196, 0.01401917204006966,
      0.01092934906491237, 0.015091795028583365, -0.026316324552338826, 0.1809574620911065,
      -0.6641236302549411, 2.0016041109291547, -4.535791802822955, 7.768165374555008,
      -9.669659398550623, 8.32498352944691, -4.438816692066939, 1.1264192878807509,
  };
  double p = kC[19];
#pragma unroll
  for (int k = 18; k >= 0; --k) p = fma(p, m, kC[k]);
  return p;
}

// HalfAngleByAsin with polynomials, for h in [0, 1]. float32: the shipped kernels'
// (kernels/cuda/haversine_math.h). float64: a = x + x (ratio - 1), the ratio - 1
// exact (the ratio is in [1, 1.11]).
template <typename T>
__device__ __forceinline__ T HalfAngleByPolynomial(T h) {
  if constexpr (sizeof(T) == 4) {
    return ::gpucompute::cuda::haversine_math::HalfAngleByPolynomial(h);
  } else {
    const double g = 1.0 - h;
    const double m = fmin(h, g);
    const double x = sqrt(m);
    const double a = fma(x, AsinSqrtRatio(m) - 1.0, x);
    return h <= g ? a : 1.5707963267948966192 - a;
  }
}

// The formulations of the last step the benchmark compares (haversine_variants.h):
// kAtan2: atan2(sqrt(h), sqrt(1 - h)) (float32: HalfCentralAngle); kAsinSplit:
// HalfAngleByAsin; kAsin: asin(sqrt(h)); kAsinPolynomial: HalfAngleByPolynomial.
// kAsinReduced*: DistanceFromHG.
template <typename T, HaversineAngle kAngle>
__device__ __forceinline__ T HalfAngle(T h) {
  if constexpr (kAngle == HaversineAngle::kAsinSplit) {
    return HalfAngleByAsin(h);
  } else if constexpr (kAngle == HaversineAngle::kAsin) {
    return asin(sqrt(h));
  } else if constexpr (kAngle == HaversineAngle::kAsinPolynomial) {
    return HalfAngleByPolynomial(h);
  } else if constexpr (sizeof(T) == 4) {
    return HalfCentralAngle(h);
  } else {
    return atan2(sqrt(h), sqrt(1.0 - h));
  }
}

// d = 2 R asin(sqrt(h)), h clamped to [0, 1]. The kAsinReduced* formulations are not
// here: they take g = 1 - h as well (DistanceFromHG).
template <typename T, HaversineAngle kAngle>
__device__ __forceinline__ T DistanceFromH(T h, T two_r) {
  static_assert(!TakesG(kAngle));
  h = fmin(fmax(h, T(0)), T(1));
  return two_r * HalfAngle<T, kAngle>(h);
}

// d = 2 R asin(sqrt(h)) by a kAsinReduced* formulation, g = 1 - h from its own terms
// (float32 kAsinReducedLean: kAsinReduced's arithmetic).
template <typename T, HaversineAngle kAngle>
__device__ __forceinline__ T DistanceFromHG(T h, T g, T two_r) {
  static_assert(TakesG(kAngle));
  if constexpr (kAngle == HaversineAngle::kAsinReducedLean && sizeof(T) == 8) {
    return ScaledHalfAngleLean(h, g, two_r);
  } else {
    constexpr ReducedForm kForm = kAngle == HaversineAngle::kAsinReducedNewton       ? ReducedForm::kNewton
                                  : kAngle == HaversineAngle::kAsinReducedBranchFree ? ReducedForm::kBranchFree
                                                                                     : ReducedForm::kPlain;
    return ScaledHalfAngleReduced<T, kForm>(h, g, two_r);
  }
}

}  // namespace gpucompute::cuda::lab::haversine_math
