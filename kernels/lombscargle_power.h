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
  bool amplitude = false;  // SciPy's "amplitude" instead of a power (PeriodogramValue)
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

// The sums a floating mean fits around: the products of the means taken off.
GC_HOST_DEVICE inline Sums CenteredSums(Sums sums, const PowerSettings& settings) {
  if (settings.floating_mean) {
    sums.yc -= settings.y_sum * sums.c;
    sums.ys -= settings.y_sum * sums.s;
    sums.cc -= sums.c * sums.c;
    sums.ss -= sums.s * sums.s;
    sums.cs -= sums.c * sums.s;
  }
  return sums;
}

// The errors in G (2-norm) and in r that errors in the raw sums leave in the
// centred ones: a floating mean's products add |C| e + |S| e to G and |Y| e to r.
struct CenteredErrors {
  double g, r;
};
GC_HOST_DEVICE inline CenteredErrors CenteredErrorsOf(const SumErrors& errors,
                                                      const PowerSettings& settings) {
  const double mean_g = settings.floating_mean ? 2 : 0;
  const double mean_r = settings.floating_mean ? fabs(settings.y_sum) * errors.g : 0;
  return {(1 + mean_g) * errors.g, sqrt(2.0) * (errors.r + mean_r)};
}

// a b - c d within about 1.5 ulp (Kahan's algorithm, one fma for each product).
// The determinant CC SS - CS^2 and the numerators of G^-1 r cancel where G is
// nearly singular; the plain products' rounding would then reach the power as
// u / lambda_min(G) (1e-8 of it at lambda_min = 5e-9), while the power itself
// moves by only 2 |G^-1 r|^2 u when the sums do (PowerErrorBound).
GC_HOST_DEVICE inline double DifferenceOfProducts(double a, double b, double c, double d) {
  const double cd = c * d;
  const double cd_error = fma(-c, d, cd);  // cd - c d, exactly
  return fma(a, b, -cd) + cd_error;
}

// SciPy 1.15's generalized periodogram at one frequency. With `errors`, also
// *error_bound (PowerErrorBound through the floating mean and the output scale).
GC_HOST_DEVICE inline double Power(Sums sums, const PowerSettings& settings,
                                   const SumErrors* errors = nullptr,
                                   double* error_bound = nullptr) {
  const double y_sum = settings.y_sum;
  sums = CenteredSums(sums, settings);
  const double d = DifferenceOfProducts(sums.cc, sums.ss, sums.cs, sums.cs);
  const double a = DifferenceOfProducts(sums.yc, sums.ss, sums.ys, sums.cs) / d;
  const double b = DifferenceOfProducts(sums.ys, sums.cc, sums.yc, sums.cs) / d;
  const double p = 2 * (a * sums.yc + b * sums.ys);
  const double variance = settings.floating_mean ? settings.yy_sum - y_sum * y_sum : settings.yy_sum;
  const double scale =
      settings.normalize ? 1 / (2 * variance) : static_cast<double>(settings.samples) / 4;
  if (errors != nullptr) {
    const CenteredErrors e = CenteredErrorsOf(*errors, settings);
    *error_bound =
        fabs(scale) * PowerErrorBound(sums.cc, sums.ss, sums.cs, sums.yc, sums.ys, e.g, e.r);
  }
  return p * scale;
}

// float64's epsneg (2^-53): SciPy's floor under the fit's two diagonal sums.
inline constexpr double kAmplitudeFloor = 1.1102230246251565e-16;

// A complex amplitude (SciPy's normalize="amplitude"), or a power in `re`.
struct PeriodogramValue {
  double re = 0, im = 0;
};

// SciPy 1.15's normalize="amplitude" at one frequency: A + iB of the weighted
// least-squares fit y ~ A cos(f x) + B sin(f x) (+ c), solved as SciPy does in the
// frame turned by tau = atan2(2 CS, CC - SS) / 2, where G is diagonal, its diagonal
// floored at kAmplitudeFloor (where G is singular to rounding: SciPy's finite
// value), and turned back: (a + ib) e^{i tau}. With `errors`, *error_bound
// bounds |error| to first order: G^-1 (dr - dG v), doubled for the neglected terms.
GC_HOST_DEVICE inline PeriodogramValue Amplitude(Sums sums, const PowerSettings& settings,
                                                 const SumErrors* errors = nullptr,
                                                 double* error_bound = nullptr) {
  sums = CenteredSums(sums, settings);
  const double tau = 0.5 * atan2(2 * sums.cs, sums.cc - sums.ss);
  const double st = sin(tau), ct = cos(tau);
  const double yc = sums.yc * ct + sums.ys * st;
  const double ys = sums.ys * ct - sums.yc * st;
  const double cross = 2 * sums.cs * ct * st;
  double cc = sums.cc * ct * ct + cross + sums.ss * st * st;
  double ss = sums.cc * st * st - cross + sums.ss * ct * ct;
  cc = cc < kAmplitudeFloor ? kAmplitudeFloor : cc;  // NaN stays NaN, as in SciPy
  ss = ss < kAmplitudeFloor ? kAmplitudeFloor : ss;
  const double a = yc / cc, b = ys / ss;
  const PeriodogramValue value{a * ct - b * st, a * st + b * ct};
  if (errors != nullptr) {
    const CenteredErrors e = CenteredErrorsOf(*errors, settings);
    const double lambda_min = cc < ss ? cc : ss;
    *error_bound = lambda_min > 2 * e.g ? 2 * (e.r + e.g * hypot(a, b)) / lambda_min : INFINITY;
  }
  return value;
}

// The value at one frequency the settings ask for: Power in `re`, or Amplitude.
GC_HOST_DEVICE inline PeriodogramValue ValueOf(const Sums& sums, const PowerSettings& settings,
                                               const SumErrors* errors = nullptr,
                                               double* error_bound = nullptr) {
  if (settings.amplitude) return Amplitude(sums, settings, errors, error_bound);
  return {Power(sums, settings, errors, error_bound), 0};
}

// The least |power| or |amplitude| a value with that error bound can have: a row's
// accuracy is measured on the largest of these, so that values its sums cannot
// resolve (an infinite bound: an amplitude where G is singular, whose floored
// diagonal turns the sums' errors into any size) do not loosen it for the rest.
GC_HOST_DEVICE inline double ResolvedMagnitude(const PeriodogramValue& value, bool amplitude,
                                               double error_bound) {
  const double least = (amplitude ? hypot(value.re, value.im) : fabs(value.re)) - error_bound;
  return least < 0 ? 0 : least;  // NaN stays NaN: the whole row is then redone
}

// Frequency i's value into out (B x M): one T, or two (real, imaginary) for an amplitude.
template <typename T>
GC_HOST_DEVICE inline void StoreValue(const PeriodogramValue& value, bool amplitude, int64_t i,
                                      T* out) {
  if (amplitude) {
    out[2 * i] = static_cast<T>(value.re);
    out[2 * i + 1] = static_cast<T>(value.im);
  } else {
    out[i] = static_cast<T>(value.re);
  }
}

// The sums from the three NUFFT transforms at one frequency: of w (C + iS), of
// w y (YC + iYS) and of w at twice the frequency (C2 + iS2), the weights summing
// to 1: CC = (1 + C2) / 2, SS = (1 - C2) / 2, CS = S2 / 2.
GC_HOST_DEVICE inline Sums SumsFromTransforms(double c, double s, double yc, double ys, double c2,
                                              double s2) {
  return {(1 + c2) / 2, (1 - c2) / 2, s2 / 2, yc, ys, c, s};
}

}  // namespace gpucompute
