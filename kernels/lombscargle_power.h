// The power of one frequency from its weighted sums, and a first-order bound on
// its error when the sums carry errors (the NUFFT's): one formula for the CPU and
// the CUDA kernels. Plain C++, no Abseil: compiled by nvcc too.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GC_HOST_DEVICE __host__ __device__
#else
#define GC_HOST_DEVICE
#endif

namespace gpucompute {

// Weighted sums over one row at one frequency (weights summing to 1).
struct Sums {
  double cc, ss, cs, yc, ys, c, s;
};

// Absolute errors of sums that are not exact: in each of C, S, CC, SS, CS (g),
// and in YC, YS (r).
struct SumErrors {
  double g = 0, r = 0;
};

// What the power depends on besides the sums.
struct PowerSettings {
  double y_sum = 0;   // Y = sum w y
  double yy_sum = 0;  // YY = sum w y^2
  int64_t samples = 0;
  bool normalize = false;
  bool floating_mean = false;
};

// First-order bound on the error of 2 r^T G^-1 r, G = [[cc, cs], [cs, ss]],
// r = (yc, ys), given errors dg in G (2-norm) and dr in r; infinite where dg
// reaches half of G's smallest eigenvalue.
GC_HOST_DEVICE inline double PowerErrorBound(double cc, double ss, double cs, double yc,
                                             double ys, double dg, double dr) {
  const double lambda_min = (cc + ss) / 2 - hypot((cc - ss) / 2, cs);
  if (!(lambda_min > 2 * dg)) return INFINITY;
  const double d = cc * ss - cs * cs;
  const double a = (yc * ss - ys * cs) / d, b = (ys * cc - yc * cs) / d;  // G^-1 r
  const double v = hypot(a, b);
  return 4 * v * dr + 4 * v * v * dg;  // 2 |v|^2 dg, doubled for the neglected terms
}

// SciPy 1.15's generalized periodogram at one frequency. With `errors`, also
// *error_bound (PowerErrorBound through the floating mean and the output scale).
GC_HOST_DEVICE inline double Power(Sums sums, const PowerSettings& settings,
                                   const SumErrors* errors = nullptr,
                                   double* error_bound = nullptr) {
  const double y_sum = settings.y_sum;
  if (settings.floating_mean) {
    sums.yc -= y_sum * sums.c;
    sums.ys -= y_sum * sums.s;
    sums.cc -= sums.c * sums.c;
    sums.ss -= sums.s * sums.s;
    sums.cs -= sums.c * sums.s;
  }
  const double d = sums.cc * sums.ss - sums.cs * sums.cs;
  const double a = (sums.yc * sums.ss - sums.ys * sums.cs) / d;
  const double b = (sums.ys * sums.cc - sums.yc * sums.cs) / d;
  const double p = 2 * (a * sums.yc + b * sums.ys);
  const double variance = settings.floating_mean ? settings.yy_sum - y_sum * y_sum : settings.yy_sum;
  const double scale =
      settings.normalize ? 1 / (2 * variance) : static_cast<double>(settings.samples) / 4;
  if (errors != nullptr) {
    // A floating mean's products add |C| e + |S| e to G and |Y| e to r.
    const double mean_g = settings.floating_mean ? 2 : 0;
    const double mean_r = settings.floating_mean ? fabs(y_sum) * errors->g : 0;
    *error_bound = fabs(scale) * PowerErrorBound(sums.cc, sums.ss, sums.cs, sums.yc, sums.ys,
                                                     (1 + mean_g) * errors->g,
                                                     sqrt(2.0) * (errors->r + mean_r));
  }
  return p * scale;
}

// The sums from the three NUFFT transforms at one frequency: of w (C + iS), of
// w y (YC + iYS) and of w at twice the frequency (C2 + iS2), the weights summing
// to 1: CC = (1 + C2) / 2, SS = (1 - C2) / 2, CS = S2 / 2.
GC_HOST_DEVICE inline Sums SumsFromTransforms(double c, double s, double yc, double ys, double c2,
                                              double s2) {
  return {(1 + c2) / 2, (1 - c2) / 2, s2 / 2, yc, ys, c, s};
}

}  // namespace gpucompute
