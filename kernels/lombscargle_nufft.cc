#include "kernels/lombscargle_nufft.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace gpucompute {
namespace {

// Roundings of a frequency an array may carry and still count as evenly spaced:
// numpy.linspace's points are within two of the ideal spacing through its ends.
constexpr double kEvenSpacingRoundings = 8;

// Widest kernel: FINUFFT's limit, reached at accuracy 1e-14.
constexpr int kMaxKernelWidth = 16;

// The NUFFT runs where its estimated work, in units of one (sample, frequency)
// term of the direct sums, is below this fraction of theirs.
constexpr double kAutoNufftWorkRatio = 0.5;

// What a NUFFT call costs whatever its size, in the same units: its spreading,
// transform and power launches one after the other: on a GPU a small NUFFT takes
// several times what the direct sums of 2^18 terms do.
constexpr double kNufftCallWork = 1 << 18;

int64_t NextSmooth(int64_t n) {
  for (;; ++n) {
    int64_t rest = n;
    for (int64_t p : {2, 3, 5, 7}) {
      while (rest % p == 0) rest /= p;
    }
    if (rest == 1) return n;
  }
}

// Gauss-Legendre nodes and weights on [0, 1], by Newton's method on P_q.
void GaussLegendre(int q, std::vector<double>& nodes, std::vector<double>& weights) {
  nodes.resize(q);
  weights.resize(q);
  for (int i = 0; i < q; ++i) {
    double z = std::cos(std::numbers::pi * (i + 0.75) / (q + 0.5));
    double derivative = 1;
    for (int iteration = 0; iteration < 100; ++iteration) {
      double p0 = 1, p1 = z;
      for (int k = 2; k <= q; ++k) {
        const double p2 = ((2 * k - 1) * z * p1 - (k - 1) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      derivative = q * (z * p1 - p0) / (z * z - 1);
      const double step = p1 / derivative;
      z -= step;
      if (std::abs(step) < 1e-16) break;
    }
    nodes[i] = (1 + z) / 2;
    weights[i] = 1 / ((1 - z * z) * derivative * derivative);  // 2 / (...) halved for [0, 1]
  }
}

}  // namespace

absl::Status CheckNufftAccuracy(double accuracy, absl::string_view field) {
  if (accuracy >= kMinNufftAccuracy && accuracy <= kMaxNufftAccuracy) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " is ", accuracy, "; it must lie in [",
                                                 kMinNufftAccuracy, ", ", kMaxNufftAccuracy, "]"));
}

absl::string_view LombScargleMethodName(LombScargleMethod method) {
  switch (method) {
    case LombScargleMethod::kAuto: return "auto";
    case LombScargleMethod::kDirect: return "direct";
    case LombScargleMethod::kNufft: return "nufft";
  }
  return "unknown";
}

EvenFrequencies EvenGrid(const Linspace& grid) {
  const double step =
      grid.count > 1 ? (grid.stop - grid.start) / static_cast<double>(grid.count - 1) : 0.0;
  return {grid.start, step, grid.count};
}

double EvenSpacingTolerance(DType dtype, LombScargleMethod method) {
  const bool float32 = method == LombScargleMethod::kNufft && dtype == DType::kFloat32;
  return kEvenSpacingRoundings *
         (float32 ? std::numeric_limits<float>::epsilon() : std::numeric_limits<double>::epsilon());
}

double EvenSpacingAllowed(const EvenFrequencies& even, double tolerance) {
  const double last = even.start + static_cast<double>(even.count - 1) * even.step;
  return tolerance * std::max(std::abs(even.start), std::abs(last));
}

absl::Status UnevenError(const EvenFrequencies& even, int64_t k, double f, double allowed) {
  const double departure = std::abs(f - (even.start + static_cast<double>(k) * even.step));
  return absl::InvalidArgumentError(absl::StrCat(
      "freqs[", k, "] is ", f, ", ", departure, " from the even spacing through freqs[0] and freqs[",
      even.count - 1, "] (allowed: ", allowed, "); the NUFFT needs evenly spaced frequencies"));
}

template <typename T>
absl::StatusOr<EvenFrequencies> EvenlySpaced(const T* f, int64_t count, double tolerance) {
  EvenFrequencies even{static_cast<double>(f[0]), 0.0, count};
  if (count > 1) {
    even.step = (static_cast<double>(f[count - 1]) - even.start) / static_cast<double>(count - 1);
  }
  const double allowed = EvenSpacingAllowed(even, tolerance);
  for (int64_t k = 1; k + 1 < count; ++k) {
    const double fk = static_cast<double>(f[k]);
    if (!(std::abs(fk - (even.start + static_cast<double>(k) * even.step)) <= allowed)) {
      return UnevenError(even, k, fk, allowed);
    }
  }
  return even;
}
template absl::StatusOr<EvenFrequencies> EvenlySpaced(const float*, int64_t, double);
template absl::StatusOr<EvenFrequencies> EvenlySpaced(const double*, int64_t, double);

NufftPlan PlanNufft(int64_t frequencies, double accuracy) {
  NufftPlan plan;
  const int digits = static_cast<int>(std::ceil(-std::log10(accuracy)));
  plan.width = std::clamp(digits + 3, 2, kMaxKernelWidth);
  plan.beta = 2.30 * plan.width;
  plan.modes = frequencies;
  plan.half = frequencies / 2;
  plan.grid = NextSmooth(std::max<int64_t>(2 * frequencies, 2 * plan.width));
  return plan;
}

double NufftSumError(const NufftPlan& plan) {
  // Worst |spread, transformed and deconvolved unit source - e^{i m t}| over the
  // source's offset from the grid (128 steps) and m / n in [0, 1/4] (2001 steps),
  // with beta = 2.30 w and this file's quadrature, times 1.25: 4 to 35 times
  // 10^(1 - w), largest at the band's edge. A row of few samples reaches it (its
  // samples' errors do not average out).
  static constexpr double kWorstByWidth[kMaxKernelWidth + 1] = {
      0, 0, 0.20, 3.4e-2, 4.6e-3, 4.7e-4, 3.9e-5, 3.4e-6, 4.9e-7,
      6.4e-8, 9.1e-9, 1.1e-9, 9.8e-11, 9.2e-12, 1.2e-12, 1.6e-13, 4.4e-14};
  return std::max(kWorstByWidth[plan.width], 1e-13);
}

NufftQuadrature NufftKernelQuadrature(const NufftPlan& plan) {
  // The kernel centred at t spread over grid points l gives, at mode m,
  //   sum_l phi((l - u) / (w / 2)) e^{i m l 2 pi / n} ~ e^{i m t} p(m),
  //   p(m) = w int_0^1 phi(z) cos(m (2 pi / n) (w / 2) z) dz   (phi is even).
  // phi is analytic inside (-1, 1) and below e^-beta at the ends: 2 w + 2 nodes
  // reach float64 rounding.
  std::vector<double> nodes, weights;
  GaussLegendre(2 * plan.width + 2, nodes, weights);
  NufftQuadrature quadrature;
  const double scale = 2 * std::numbers::pi / static_cast<double>(plan.grid) * (plan.width / 2.0);
  for (size_t q = 0; q < nodes.size(); ++q) {
    quadrature.weight.push_back(plan.width * weights[q] * NufftKernel(nodes[q], plan.beta));
    quadrature.angle.push_back(scale * nodes[q]);
  }
  return quadrature;
}

std::vector<double> NufftDeconvolution(const NufftPlan& plan) {
  const NufftQuadrature quadrature = NufftKernelQuadrature(plan);
  const int64_t largest = NufftLargestMode(plan);
  std::vector<double> p(largest + 1, 0.0);
  for (size_t q = 0; q < quadrature.weight.size(); ++q) {
    // e^{i m angle} by rotation, restarted exactly every kRestart modes.
    constexpr int64_t kRestart = 256;
    const double angle = quadrature.angle[q];
    const std::complex<double> turn = std::polar(1.0, angle);
    std::complex<double> rotation;
    for (int64_t m = 0; m <= largest; ++m) {
      rotation = m % kRestart == 0 ? std::polar(1.0, angle * static_cast<double>(m)) : rotation * turn;
      p[m] += quadrature.weight[q] * rotation.real();
    }
  }
  for (double& value : p) value = 1 / value;
  return p;
}

absl::StatusOr<LombScargleMethod> ChooseLombScargleMethod(const LombScargleOptions& options,
                                                          const LombScargleShape& shape,
                                                          const absl::Status& uneven) {
  switch (options.method) {
    case LombScargleMethod::kDirect: return LombScargleMethod::kDirect;
    case LombScargleMethod::kNufft:
      if (!uneven.ok()) return uneven;
      return LombScargleMethod::kNufft;
    case LombScargleMethod::kAuto: break;
  }
  if (!uneven.ok()) return LombScargleMethod::kDirect;
  // Spreading: about 4 w direct terms per sample; each FFT: ~1.25 n log2 n.
  const NufftPlan plan = PlanNufft(shape.frequencies, options.accuracy);
  const double n = static_cast<double>(plan.grid);
  const double rows = static_cast<double>(shape.batch);
  const double nufft = rows * (4.0 * plan.width * static_cast<double>(shape.samples) +
                               3 * 1.25 * n * std::log2(n) +
                               3.0 * static_cast<double>(shape.frequencies)) +
                       kNufftCallWork;
  const double direct =
      rows * static_cast<double>(shape.samples) * static_cast<double>(shape.frequencies);
  return nufft < kAutoNufftWorkRatio * direct ? LombScargleMethod::kNufft
                                              : LombScargleMethod::kDirect;
}

}  // namespace gpucompute
