// Lomb-Scargle's two methods on every backend: the NUFFT against the float64
// direct reference (tests/testing/tensors.h) at sizes, accuracies and grids the
// option sweep of backend_conformance_test does not reach, the choice kAuto
// makes, and the requests a backend refuses. CUDA instances skip the NUFFT until
// that backend has it (Subject::kHasNufft).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/lombscargle_nufft.h"
#include "tests/testing/conformance.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::Batching;
using test::Freqs;
using test::LombScargleConformance;
using test::Weights;

template <typename P>
class LombScargleMethods : public LombScargleConformance<P> {};
TYPED_TEST_SUITE(LombScargleMethods, test::Subjects, test::SubjectNames);

constexpr auto kNufft = LombScargleMethod::kNufft;

TYPED_TEST(LombScargleMethods, NufftAtSizesAndEdges) {
  const LombScargleOptions nufft{.method = kNufft}, nufft_fm{.normalize = true,
                                                            .floating_mean = true,
                                                            .method = kNufft};
  this->ForEachSeed([&] {
    for (int64_t m : {1, 2, 3, 64, 4097}) {
      this->Check({200, m, Batching::kNone, Weights::kNone, Freqs::kGrid, nufft});
    }
    this->Check({2000, 6000, Batching::kSharedX, Weights::kPerRow, Freqs::kGrid, nufft_fm, 2,
                 true});
    this->Check({300, 5000, Batching::kBatchedX, Weights::kShared, Freqs::kLinspaceArray,
                 nufft_fm, 3, true});
    const LombScargleOptions amplitude_fm{.floating_mean = true, .method = kNufft, .amplitude = true};
    this->Check({2000, 6000, Batching::kSharedX, Weights::kPerRow, Freqs::kGrid, amplitude_fm, 2,
                 true});
  });
}

// NufftSumError bounds one source's error at every offset from the grid and mode: the
// spreading kernel's values summed as e^{i m (l - u) 2 pi / n}, over the deconvolution.
TEST(NufftPlan, SumErrorBoundsOneSource) {
  for (int digits = 2; digits <= 14; ++digits) {
    const NufftPlan plan = PlanNufft(150, std::pow(10.0, -digits));
    const NufftQuadrature quadrature = NufftKernelQuadrature(plan);
    const double half_width = plan.width / 2.0, turn = 2 * std::numbers::pi / static_cast<double>(plan.grid);
    double worst = 0;
    for (int step = 0; step < 64; ++step) {
      const double u = 40 + step / 64.0;  // grid position of the source
      const int64_t first = static_cast<int64_t>(std::ceil(u - half_width));
      for (int64_t m = 0; m <= NufftLargestMode(plan); ++m) {
        std::complex<double> spread;
        for (int l = 0; l < plan.width; ++l) {
          const double d = static_cast<double>(first + l) - u;
          spread += NufftKernel(std::min(1.0, std::abs(d / half_width)), plan.beta) *
                    std::polar(1.0, static_cast<double>(m) * d * turn);
        }
        double p = 0;
        for (size_t q = 0; q < quadrature.weight.size(); ++q) {
          p += quadrature.weight[q] * std::cos(static_cast<double>(m) * quadrature.angle[q]);
        }
        worst = std::max(worst, std::abs(spread / p - 1.0));
      }
    }
    EXPECT_LE(worst, NufftSumError(plan)) << "width " << plan.width;
    EXPECT_GE(worst, NufftSumError(plan) / 40) << "width " << plan.width << ": bound too loose";
  }
}

// Few samples and a floating mean leave G nearly singular at the lowest frequencies,
// where the NUFFT hands powers to its direct redo: every option there, small enough
// for GPUCOMPUTE_SEED_SWEEP to run on thousands of seeds (bench/run_gpu_kernels.sh
// ls_sweep). A float32 row whose normalized weights were rounded to float32 failed
// here: they do not sum to 1, and CC - C^2 cancels down to that error at f ~ 1 / span(x).
TYPED_TEST(LombScargleMethods, NufftOnIllConditionedSmallRows) {
  struct Shape {
    int64_t samples, frequencies;
    Batching batching;
    Weights weights;
    Freqs freqs;
  };
  const Shape shapes[] = {
      {3, 7, Batching::kNone, Weights::kNone, Freqs::kGrid},
      {5, 150, Batching::kNone, Weights::kShared, Freqs::kGrid},
      {17, 150, Batching::kBatchedX, Weights::kPerRow, Freqs::kLinspaceArray},
      {61, 150, Batching::kNone, Weights::kNone, Freqs::kGrid},
      {61, 50, Batching::kSharedX, Weights::kNone, Freqs::kLinspaceArray},
  };
  this->ForEachSeed([&] {
    for (const Shape& s : shapes) {
      for (int flags = 0; flags < 12; ++flags) {  // flags / 4: power, normalize, amplitude
        const LombScargleOptions o{.precenter = (flags & 1) != 0, .normalize = flags / 4 == 1,
                                   .floating_mean = (flags & 2) != 0, .method = kNufft,
                                   .amplitude = flags / 4 == 2};
        this->Check({s.samples, s.frequencies, s.batching, s.weights, s.freqs, o});
      }
    }
  });
}

// Three samples and a floating mean: the fit interpolates them, so at every frequency
// the power is the whole variance, 2 (YY - Y^2) N / 4, however nearly singular G is
// there. These are the samples seed 7624080821218305922 drew for
// NufftOnIllConditionedSmallRows: grid point 5 has lambda_min(G) = 4.8e-9, where
// D = CC SS - CS^2 and G^-1 r in plain products put the power 1.7e-9 off (the kernels)
// and 1.2e-9 off (the reference); the sums' own rounding moves it by up to 6e-13.
TYPED_TEST(LombScargleMethods, ExactFitOfThreeSamplesAtANearlySingularFrequency) {
  using T = typename TypeParam::Element;
  if (sizeof(T) == 4) GTEST_SKIP() << "float32 sums: 6e-8 |G^-1 r|^2 = 7e-4 of the power here";
  std::vector<double> x = {50.07402088140326, 12.014139455691176, 51.5816633942888};
  std::vector<double> y = {2.681015167405909, -0.5800485338984087, 2.6621747012107204};
  auto x_array = this->Upload({3}, x);
  auto y_array = this->Upload({3}, y);
  const double mean = (y[0] + y[1] + y[2]) / 3;
  double variance = 0;
  for (double v : y) variance += (v - mean) * (v - mean) / 3;
  const double want = 2 * variance * 3 / 4;
  const Linspace grid{0.01, 10, 7};
  for (LombScargleMethod method : {LombScargleMethod::kDirect, kNufft}) {
    SCOPED_TRACE(LombScargleMethodName(method));
    auto out = this->Poisoned({7});
    const LombScargleOptions o{.floating_mean = true, .method = method, .accuracy = 1e-12};
    const absl::Status status =
        this->backend_->LombScargle(*x_array, *y_array, nullptr, nullptr, grid, o, *out, this->ctx_);
    if (method == kNufft && !TypeParam::Subject::kHasNufft) continue;
    ASSERT_TRUE(status.ok()) << status.message();
    const std::vector<double> got = this->Download(*out);
    for (int64_t k = 0; k < 7; ++k) EXPECT_NEAR(got[k], want, 1e-11 * want) << "frequency " << k;
  }
}

TYPED_TEST(LombScargleMethods, NufftKeepsTheAccuracyAskedFor) {
  this->ForEachSeed([&] {
    for (double accuracy : {1e-2, 1e-5, 1e-9, 1e-12}) {
      const LombScargleOptions o{.precenter = true, .method = kNufft, .accuracy = accuracy};
      this->Check({700, 5000, Batching::kNone, Weights::kShared, Freqs::kGrid, o, 1, true});
    }
  });
}

// Grids that cross zero or run downwards (no point on 0), and frequencies far from
// zero on a long baseline (large phases).
TYPED_TEST(LombScargleMethods, NufftOnUnusualGrids) {
  using T = typename TypeParam::Element;
  for (const Linspace grid : {Linspace{-5.005, 5.0, 2000}, Linspace{9.0, 0.5, 3001},
                              Linspace{1000.0, 1010.0, 4000}}) {
    SCOPED_TRACE(grid.start);
    std::vector<double> x = this->Uniform(300, 0, 500), y = this->Uniform(300, -1, 1);
    auto x_array = this->Upload({300}, x);
    auto y_array = this->Upload({300}, y);
    auto out = this->Poisoned({grid.count});
    const LombScargleOptions options{.normalize = true, .method = kNufft};
    const absl::Status status = this->backend_->LombScargle(*x_array, *y_array, nullptr, nullptr,
                                                            grid, options, *out, this->ctx_);
    if (!TypeParam::Subject::kHasNufft) continue;
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<double> freqs(grid.count);
    for (int64_t k = 0; k < grid.count; ++k) freqs[k] = grid.At(k);
    const std::vector<double> want =
        test::LombScarglePowers(x, false, y, nullptr, false, freqs, 1, 300, options);
    const std::vector<double> got = this->Download(*out);
    double largest = 0;
    for (double v : want) largest = std::max(largest, std::abs(v));
    const double bound = test::NufftBound(options, sizeof(T) == 4) * largest;
    for (int64_t k = 0; k < grid.count; ++k) {
      ASSERT_NEAR(got[k], want[k], bound) << "frequency " << k << " = " << freqs[k];
    }
  }
}

// Series of different lengths in one request (row_offsets): each row as if alone, on
// both methods and every option.
TYPED_TEST(LombScargleMethods, RaggedBatchesMatchEachSeriesAlone) {
  using T = typename TypeParam::Element;
  const std::vector<int64_t> lengths = {17, 61, 200, 33};  // few samples are ill-conditioned
  std::vector<int64_t> offsets = {0};
  for (int64_t n : lengths) offsets.push_back(offsets.back() + n);
  const int64_t total = offsets.back(), m = 300;
  std::vector<double> x = this->Uniform(total, 0, 100), y = this->Uniform(total, -1, 3);
  std::vector<double> w = this->Uniform(total, 0.1, 2);
  auto x_array = this->Upload({total}, x);
  auto y_array = this->Upload({total}, y);
  auto w_array = this->Upload({total}, w);
  const Linspace grid{0.05, 10, m};
  std::vector<double> freqs(m);
  for (int64_t k = 0; k < m; ++k) freqs[k] = grid.At(k);
  for (LombScargleMethod method : {LombScargleMethod::kDirect, kNufft}) {
    for (int flags = 0; flags < 24; ++flags) {  // flags / 8: power, normalize, amplitude
      LombScargleOptions o{.precenter = (flags & 1) != 0, .normalize = flags / 8 == 1,
                           .floating_mean = (flags & 2) != 0, .method = method,
                           .amplitude = flags / 8 == 2};
      o.row_offsets = offsets;
      const bool weighted = (flags & 4) != 0;
      const int64_t values = o.amplitude ? 2 : 1;  // per frequency
      SCOPED_TRACE(absl::StrCat(LombScargleMethodName(method), " flags ", flags));
      auto out = this->Poisoned(o.amplitude ? Shape{4, m, 2} : Shape{4, m});
      const absl::Status status = this->backend_->LombScargle(
          *x_array, *y_array, weighted ? w_array.get() : nullptr, nullptr, grid, o, *out, this->ctx_);
      ASSERT_TRUE(status.ok()) << status.message();
      const std::vector<double> got = this->Download(*out);
      for (size_t b = 0; b < lengths.size(); ++b) {
        const auto slice = [&](const std::vector<double>& v) {
          return std::vector<double>(v.begin() + offsets[b], v.begin() + offsets[b + 1]);
        };
        const std::vector<double> row_w = slice(w);
        std::vector<test::LombScargleConditioning> conditioning;
        const std::vector<double> want =
            test::Reference(slice(x), false, slice(y), weighted ? &row_w : nullptr, false, freqs, 1,
                            lengths[b], o, conditioning);
        double largest = 0;
        for (int64_t k = 0; k < m; ++k) {
          largest = std::max(largest, values == 2 ? std::hypot(want[2 * k], want[2 * k + 1])
                                                  : std::abs(want[k]));
        }
        // float32: the output's rounding; float64: the CPU's direct bound, or the NUFFT's.
        const double bound = (sizeof(T) == 4 ? 1e-5 : method == kNufft ? o.accuracy : 1e-9) * largest;
        for (int64_t i = 0; i < m * values; ++i) {
          ASSERT_NEAR(got[b * m * values + i], want[i], bound)
              << "row " << b << " frequency " << i / values;
        }
      }
    }
  }
}

// SciPy's "amplitude" of a clean sinusoid y = A cos(f0 x) + B sin(f0 x) + c at f0: the
// fit's A + iB, on both methods.
TYPED_TEST(LombScargleMethods, AmplitudeOfASinusoid) {
  using T = typename TypeParam::Element;
  const double tolerance = sizeof(T) == 4 ? 1e-4 : 1e-9;
  std::vector<double> x = this->Uniform(500, 0, 50), y(500);
  auto x_array = this->Upload({500}, x);  // rounds x to T first
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = 1.5 * std::cos(2 * x[i]) - 0.5 * std::sin(2 * x[i]) + 0.25;
  }
  auto y_array = this->Upload({500}, y);
  const Linspace grid{0.02, 4, 200};  // f0 = 2 is point 99
  for (LombScargleMethod method : {LombScargleMethod::kDirect, kNufft}) {
    SCOPED_TRACE(LombScargleMethodName(method));
    for (bool floating_mean : {false, true}) {
      auto out = this->Poisoned({200, 2});
      const LombScargleOptions o{.floating_mean = floating_mean, .method = method, .amplitude = true};
      const absl::Status status =
          this->backend_->LombScargle(*x_array, *y_array, nullptr, nullptr, grid, o, *out, this->ctx_);
      ASSERT_TRUE(status.ok()) << status.message();
      const std::vector<double> got = this->Download(*out);
      // The floating mean's fit is exact; without it, near (c leaks in as C = sum w cos).
      const double fit_tolerance = floating_mean ? tolerance : 0.1;
      EXPECT_NEAR(got[2 * 99], 1.5, fit_tolerance);
      EXPECT_NEAR(got[2 * 99 + 1], -0.5, fit_tolerance);
    }
  }
}

TYPED_TEST(LombScargleMethods, RefusesNormalizeWithAmplitude) {
  std::vector<double> v = this->Uniform(10, 0, 1);
  auto a = this->Upload({10}, v);
  auto out = this->Poisoned({5, 2});
  const absl::Status status = this->backend_->LombScargle(
      *a, *a, nullptr, nullptr, {1, 2, 5}, {.normalize = true, .amplitude = true}, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("normalize and amplitude"));
  // An amplitude's out needs the trailing axis of 2.
  auto flat = this->Poisoned({5});
  const absl::Status shape = this->backend_->LombScargle(*a, *a, nullptr, nullptr, {1, 2, 5},
                                                         {.amplitude = true}, *flat, this->ctx_);
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument) << shape.message();
  EXPECT_THAT(std::string(shape.message()), HasSubstr("out"));
}

TYPED_TEST(LombScargleMethods, RefusesBadRowOffsets) {
  std::vector<double> v = this->Uniform(10, 0, 1);
  auto a = this->Upload({10}, v);
  auto out = this->Poisoned({2, 5});
  for (const std::vector<int64_t>& offsets :
       {std::vector<int64_t>{0, 4, 4, 10}, std::vector<int64_t>{1, 10}, std::vector<int64_t>{0, 4, 9}}) {
    LombScargleOptions o;
    o.row_offsets = offsets;
    const absl::Status status =
        this->backend_->LombScargle(*a, *a, nullptr, nullptr, {1, 2, 5}, o, *out, this->ctx_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr("row_offsets")) << status.message();
  }
}

TYPED_TEST(LombScargleMethods, AutoPicksTheNufftOnLargeEvenGrids) {
  std::vector<double> x = this->Uniform(1000, 0, 100), y = this->Uniform(1000, -1, 1);
  auto x_array = this->Upload({1000}, x);
  auto y_array = this->Upload({1000}, y);
  auto out = this->Poisoned({20000});
  const Linspace grid{0.01, 50, 20000};
  absl::Status status =
      this->backend_->LombScargle(*x_array, *y_array, nullptr, nullptr, grid, {}, *out, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(this->ctx_.method, TypeParam::Subject::kHasNufft ? "nufft" : "direct");

  // An array not evenly spaced: direct.
  std::vector<double> freqs = this->Uniform(20000, 0.01, 50);
  auto freq_array = this->Upload({20000}, freqs);
  status = this->backend_->LombScargle(*x_array, *y_array, nullptr, freq_array.get(), grid, {},
                                       *out, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(this->ctx_.method, "direct");
}

TYPED_TEST(LombScargleMethods, AutoPicksTheDirectSumsForSmallRequests) {
  // gpucompute-cli bench's request: 4 rows of 256 samples, 256 frequencies of a grid.
  // The NUFFT's fixed cost per call is more than these sums.
  std::vector<double> x = this->Uniform(256, 0, 100), y = this->Uniform(4 * 256, -1, 1);
  auto x_array = this->Upload({256}, x);
  auto y_array = this->Upload({4, 256}, y);
  auto out = this->Poisoned({4, 256});
  const Linspace grid{0.01, 10, 256};
  absl::Status status =
      this->backend_->LombScargle(*x_array, *y_array, nullptr, nullptr, grid, {}, *out, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(this->ctx_.method, "direct");
}

TYPED_TEST(LombScargleMethods, RefusesWhatTheNufftCannotDo) {
  std::vector<double> x = this->Uniform(40, 0, 10), y = this->Uniform(40, -1, 1);
  std::vector<double> freqs = {0.5, 1.0, 1.5, 2.25, 2.5};
  auto x_array = this->Upload({40}, x);
  auto y_array = this->Upload({40}, y);
  auto freq_array = this->Upload({5}, freqs);
  auto out = this->Poisoned({5});
  Backend& b = *this->backend_;
  absl::Status status = b.LombScargle(*x_array, *y_array, nullptr, freq_array.get(), {},
                                      {.method = kNufft}, *out, this->ctx_);
  if (TypeParam::Subject::kHasNufft) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr("freqs[3] is 2.25"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("evenly spaced"));
  }
  for (double accuracy : {0.0, 1e-15, 0.1, std::numeric_limits<double>::quiet_NaN()}) {
    status = b.LombScargle(*x_array, *y_array, nullptr, nullptr, {1, 2, 5},
                           {.accuracy = accuracy}, *out, this->ctx_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << accuracy;
    EXPECT_THAT(std::string(status.message()), HasSubstr("accuracy is"));
  }
}

TYPED_TEST(LombScargleMethods, PreCancelledNufftWritesNothing) {
  std::atomic<bool> cancelled{true};
  this->ctx_.cancelled = &cancelled;
  std::vector<double> values = this->Uniform(1000, 0.1, 1);
  auto a = this->Upload({1000}, values);
  auto out = this->Poisoned({5000});
  const absl::Status status = this->backend_->LombScargle(
      *a, *a, nullptr, nullptr, {1, 2, 5000}, {.method = kNufft}, *out, this->ctx_);
  if (!TypeParam::Subject::kHasNufft) return;
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status.message();
  for (double v : this->Download(*out)) ASSERT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace gpucompute
