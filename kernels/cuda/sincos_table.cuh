// sin and cos of the float64 phase f x in 13-15 FP64 operations and one shared-memory
// load, for the direct Lomb-Scargle sums, where sincos is the whole cost (1e10 pairs per
// request).
//
// libdevice's sincos spends ~22 FP64 operations, two float64<->int conversions and a
// quadrant swap that diverges across the warp. Here the frequency comes scaled to table
// steps as a pair f' = f / h = hi + lo (h = 2 pi / kAngles, StepsOf), so one fma gives
// k = rint(hi x) and two more the fraction u = f' x - k of a step, from the exact
// products: the phase is the exact product f x, never rounded on its own (as the float32
// path and the CPU backend do; a rounded f x is off by up to 1e-4 rad at 1e12).
// (cos, sin)(k h) come from a kAngles-entry table; sin(h u) and cos(h u), |h u| <= pi /
// kAngles, from short polynomials in u whose truncation stays below 1e-17; degrees by
// table size below. The result is within a few ulp of sin, cos of the exact f x.
//
// The table is stored kCopies times, interleaved: lane l reads copy l % kCopies. With 8
// copies the 8 lanes of a quarter warp (one shared-memory wavefront for 16-byte loads)
// always hit 8 different bank groups, whatever their k; with fewer, lanes that share a
// copy collide when their k differ in the bank group (~2x the wavefronts at 2 copies).
// The table lives in dynamic shared memory (up to 64 KiB): Bytes() at launch.
#pragma once

#include <cuda_runtime.h>

namespace gpucompute::cuda {

template <int kAnglesT, int kCopiesT>
struct SinCosTable {
  static constexpr int kAngles = kAnglesT;
  static constexpr int kCopies = kCopiesT;
  static_assert((kAngles & (kAngles - 1)) == 0 && kAngles >= 256 && kAngles <= 2048);
  // Within this bound k = rint(f' x) stays far below 2^51, where the rounding constant
  // below stops giving integers. Larger phases take libdevice's sincos.
  static constexpr double kMaxPhase = 1e12;
  static constexpr double kStep = 6.283185307179586476925 / kAngles;   // h
  // 1 / h = kAngles / (2 pi) as hi + lo (scaling by a power of 2 is exact).
  static constexpr double kStepsPerRadianHi = kAngles * 0.15915494309189535;
  static constexpr double kStepsPerRadianLo = kAngles * -9.839338337591243e-18;

  static constexpr size_t Bytes() { return sizeof(double2) * kAngles * kCopies; }

  // (cos, sin) of angle k at [k * kCopies + copy]. Every thread of the block takes part;
  // the caller synchronizes before reading.
  __device__ static void Fill(double2* entry) {
    for (int k = threadIdx.x; k < kAngles; k += blockDim.x) {
      double s, c;
      sincospi(static_cast<double>(k) / (kAngles / 2), &s, &c);  // exact argument
      for (int copy = 0; copy < kCopies; ++copy) entry[k * kCopies + copy] = make_double2(c, s);
    }
  }

  // This lane's copy: index it with k * kCopies.
  __device__ static const double2* LaneCopy(const double2* entry) {
    return entry + (threadIdx.x % kCopies);
  }

  // A frequency f in table steps, f / h = hi + lo to ~2^-100 relative.
  __device__ __forceinline__ static void StepsOf(double f, double* hi, double* lo) {
    *hi = f * kStepsPerRadianHi;
    *lo = fma(f, kStepsPerRadianLo, fma(f, kStepsPerRadianHi, -*hi));
  }

  // sin(f x), cos(f x) for a frequency in table steps (StepsOf) and |f x| <= kMaxPhase.
  __device__ __forceinline__ static void SinCos(const double2* lane_copy, double f_hi, double f_lo,
                                                double x, double* s, double* c) {
    constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: its low bits hold rint(x)
    constexpr double h = kStep;
    const double k_rounded = fma(f_hi, x, kRound);
    const double k = k_rounded - kRound;
    const int index = __double2loint(k_rounded) & (kAngles - 1);  // k mod kAngles
    // |u| <= ~1/2: hi x - k exact before its one rounding, then lo x (< ~1e-2 steps).
    const double u = fma(f_lo, x, fma(f_hi, x, -k));
    const double z = u * u;
    // sin(h u) = u (h + s3 z + s5 z^2), cos(h u) = 1 + c2 z + c4 z^2 (+ c6 z^3); Taylor
    // coefficients, or minimax ones where a term is dropped (max error below 1e-17).
    double sin_r, cos_r;
    if constexpr (kAngles >= 2048) {
      // x - 0.16666664962445393 x^3 on |x| <= pi / 2048: error 9.3e-18 (x^5 / 120: 7e-17).
      sin_r = u * fma(z, -0.16666664962445393 * h * h * h, h);
    } else {
      sin_r = u * fma(z, fma(z, h * h * h * h * h / 120, -h * h * h / 6), h);
    }
    if constexpr (kAngles >= 1024) {
      cos_r = fma(z, fma(z, h * h * h * h / 24, -h * h / 2), 1.0);
    } else if constexpr (kAngles == 512) {
      // 1 - x^2 / 2 + 0.04166661991285275 x^4 on |x| <= pi / 512: error 7.8e-18.
      cos_r = fma(z, fma(z, 0.04166661991285275 * h * h * h * h, -h * h / 2), 1.0);
    } else {
      cos_r = fma(z, fma(z, fma(z, -h * h * h * h * h * h / 720, h * h * h * h / 24), -h * h / 2), 1.0);
    }
    const double2 e = lane_copy[index * kCopies];
    *s = fma(e.y, cos_r, e.x * sin_r);
    *c = fma(e.x, cos_r, -(e.y * sin_r));
  }
};

}  // namespace gpucompute::cuda
