// Lomb-Scargle on evenly spaced frequencies through type-1 non-uniform FFTs, as
// nifty-ls does with FINUFFT: the numerics both backends share.
//
// With f_k = f0 + k df (k < M), h = M / 2 and t_j = df x_j (mod 2 pi),
//   sum_j c_j exp(i f_k x_j) = F(k - h),  F(m) = sum_j c'_j exp(i m t_j),
//   c'_j = c_j exp(i (f0 + h df) x_j),
// a type-1 NUFFT over the modes m in [-h, M - h). F is 2 pi periodic in every t_j,
// so x may span any range. F is computed by spreading c'_j onto a periodic grid of
// n >= 2M points with the "exponential of semicircle" kernel
//   phi(z) = exp(beta (sqrt(1 - z^2) - 1)),  z = (grid point - t_j n / 2 pi) / (w / 2),
// w points wide, an FFT of the grid, and dividing mode m by the kernel's Fourier
// transform (Barnett, Magland, af Klinteberg, SIAM J. Sci. Comput. 2019).
//
// Where a frequency's power is ill-conditioned (G, below, nearly singular: low
// frequencies, few samples, a floating mean), the sums' small absolute error can
// grow past the accuracy asked for; those frequencies are found from a
// first-order error bound and computed again by the direct sums.
//
// Three transforms per row give every sum of the periodogram: w and w y at f_k
// (C, S, YC, YS), and w at 2 f_k, since cos^2 = (1 + cos 2fx) / 2,
// sin^2 = (1 - cos 2fx) / 2 and cos sin = sin(2fx) / 2. The 2 f_k transform uses
// the same modes with 2 f0, 2 df: its c'_j carry the square of the first phase.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/shape_rules.h"

namespace gpucompute {

// The accuracy a request may ask of the NUFFT: float64 rounding of the sums bounds
// the finest; the coarsest still needs a kernel of two points.
inline constexpr double kMinNufftAccuracy = 1e-14;
inline constexpr double kMaxNufftAccuracy = 1e-2;

// INVALID_ARGUMENT naming `field` unless accuracy lies in [kMinNufftAccuracy, kMaxNufftAccuracy].
absl::Status CheckNufftAccuracy(double accuracy, absl::string_view field);

absl::string_view LombScargleMethodName(LombScargleMethod method);

// f_k = start + k step, k < count.
struct EvenFrequencies {
  double start = 0;
  double step = 0;
  int64_t count = 0;
};

EvenFrequencies EvenGrid(const Linspace& grid);

// How far an array's frequencies may depart from the even spacing through its
// ends, relative to the largest |f|, and still be taken as that spacing: a few
// float64 roundings (the phases then err no more than the direct sums' own), or
// under an explicit kNufft a few roundings of the array's dtype.
double EvenSpacingTolerance(DType dtype, LombScargleMethod method);

// The even spacing through f[0] and f[count - 1], or INVALID_ARGUMENT naming the
// first frequency that departs from it by more than EvenSpacingAllowed.
template <typename T>
absl::StatusOr<EvenFrequencies> EvenlySpaced(const T* f, int64_t count, double tolerance);
// The departure allowed: tolerance * the larger |end| (an even spacing's largest |f|).
double EvenSpacingAllowed(const EvenFrequencies& even, double tolerance);
// EvenlySpaced's error for frequency k of value f.
absl::Status UnevenError(const EvenFrequencies& even, int64_t k, double f, double allowed);

// The size of one NUFFT: kernel width and shape, modes, grid.
struct NufftPlan {
  int width = 0;      // w, grid points the kernel covers
  double beta = 0;    // kernel shape
  int64_t modes = 0;  // M
  int64_t half = 0;   // h: frequency k is mode k - h
  int64_t grid = 0;   // n >= 2M, a product of 2, 3, 5 and 7 (fast for every FFT library)
};

// Kernel width for `accuracy` (the powers' relative error, on the row's largest
// power) as FINUFFT picks it at upsampling 2: w = digits + 2, beta = 2.30 w.
NufftPlan PlanNufft(int64_t frequencies, double accuracy);

// The kernel's Fourier transform at mode m by Gauss-Legendre quadrature over its
// support: p(m) = sum_q weight[q] cos(m angle[q]).
struct NufftQuadrature {
  std::vector<double> weight, angle;
};
inline constexpr int kMaxNufftQuadratureNodes = 40;
NufftQuadrature NufftKernelQuadrature(const NufftPlan& plan);

// Modes of the transform: |m| runs over 0 .. NufftLargestMode.
inline int64_t NufftLargestMode(const NufftPlan& plan) {
  return plan.half > plan.modes - 1 - plan.half ? plan.half : plan.modes - 1 - plan.half;
}

// 1 / p(|m|) for |m| = 0 .. NufftLargestMode.
std::vector<double> NufftDeconvolution(const NufftPlan& plan);

// A frequency is computed again by the direct sums when its error bound passes this
// share of the accuracy times the row's largest power (the rest is left to rounding).
inline constexpr double kNufftRedoFraction = 0.5;

// Error of one transform's sums relative to sum |c_j|: one source's worst error
// (bounding every row's by the triangle inequality), never below float64's phase
// rounding.
double NufftSumError(const NufftPlan& plan);

// The kernel at z in [-1, 1].
inline double NufftKernel(double z, double beta) {
  return std::exp(beta * (std::sqrt(1 - z * z) - 1));
}

// kDirect or kNufft. kAuto: NUFFT where the frequencies are evenly spaced and its
// estimated work, a fixed cost per call included, is well below the direct sums'
// (small requests run direct). kNufft on frequencies that are not
// evenly spaced fails with `uneven`, the reason EvenlySpaced gave.
absl::StatusOr<LombScargleMethod> ChooseLombScargleMethod(const LombScargleOptions& options,
                                                          const LombScargleShape& shape,
                                                          const absl::Status& uneven);

}  // namespace gpucompute
