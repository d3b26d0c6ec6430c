// sin and cos of a float64 phase in 15 FP64 operations and one shared-memory load, for
// the direct Lomb-Scargle sums, where sincos is the whole cost (1e10 pairs per request).
//
// libdevice's sincos spends ~22 FP64 operations, two float64<->int conversions and a
// quadrant swap that diverges across the warp. Here phi = k h + r with h = 2 pi / 256 and
// |r| <= pi / 256: (cos, sin)(k h) come from a 256-entry table, and sin r, cos r from
// Taylor polynomials of degree 5 and 6, truncated below 1e-17. The result is within a few
// ulp of sin(phi), cos(phi) for the float64 phi the caller rounded (as sincos(phi) is).
//
// The table is stored 8 times, interleaved: lane l reads copy l % 8, so the 8 lanes of a
// quarter warp (one shared-memory wavefront for 16-byte loads) always hit 8 different
// bank groups, whatever their k. Random k on one copy would cost ~2.3x the wavefronts.
#pragma once

#include <cuda_runtime.h>

namespace gpucompute::cuda {

struct SinCosTable {
  static constexpr int kAngles = 256;
  static constexpr int kCopies = 8;
  // Within this bound k = rint(phi / h) stays far below 2^51, where the rounding constant
  // below stops giving integers, and |r| exceeds pi / 256 by at most ~1e-4 rad (from
  // 1 / h rounded), which the polynomials absorb. Larger phases take libdevice's sincos.
  static constexpr double kMaxPhase = 1e12;

  double2 entry[kAngles * kCopies];  // (cos, sin) of angle k at [k * kCopies + copy]

  // Every thread of the block takes part; the caller synchronizes before reading.
  __device__ void Fill() {
    for (int k = threadIdx.x; k < kAngles; k += blockDim.x) {
      double s, c;
      sincospi(static_cast<double>(k) / (kAngles / 2), &s, &c);  // exact argument
      for (int copy = 0; copy < kCopies; ++copy) entry[k * kCopies + copy] = make_double2(c, s);
    }
  }

  // This lane's copy: index it with k * kCopies.
  __device__ const double2* LaneCopy() const { return entry + (threadIdx.x % kCopies); }
};

// sin(phi), cos(phi) for |phi| <= SinCosTable::kMaxPhase.
__device__ __forceinline__ void TableSinCos(const double2* lane_copy, double phi, double* s,
                                            double* c) {
  constexpr double kStepsPerRadian = SinCosTable::kAngles / 6.283185307179586476925;
  constexpr double kStepHi = 6.283185307179586232 / SinCosTable::kAngles;  // double(2 pi) / 256
  constexpr double kStepLo = 2.4492935982947064e-16 / SinCosTable::kAngles;  // the rest of h
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: its low bits hold rint(x)
  const double k_rounded = fma(phi, kStepsPerRadian, kRound);
  const double k = k_rounded - kRound;
  const int index = __double2loint(k_rounded) & (SinCosTable::kAngles - 1);  // k mod 256
  double r = fma(-k, kStepHi, phi);  // one rounding of phi - k h_hi, |r| small: exact enough
  r = fma(-k, kStepLo, r);
  const double z = r * r;
  const double sin_r = fma(r * z, fma(z, 1.0 / 120, -1.0 / 6), r);
  const double cos_r = fma(z, fma(z, fma(z, -1.0 / 720, 1.0 / 24), -0.5), 1.0);
  const double2 e = lane_copy[index * SinCosTable::kCopies];
  *s = fma(e.y, cos_r, e.x * sin_r);
  *c = fma(e.x, cos_r, -(e.y * sin_r));
}

}  // namespace gpucompute::cuda
