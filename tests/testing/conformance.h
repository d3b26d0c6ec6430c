// The backends the conformance suite runs on, the tolerance each owes the float64
// references, and the fixture: one typed test instance per (backend, dtype).
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/lombscargle_nufft.h"
#include "tests/testing/arrays.h"
#include "tests/testing/tensors.h"

namespace gpucompute::test {

enum class Check { kHaversineMesh, kHaversinePoints, kNormalize, kLombScargle };

// How close a result must come to its float64 reference: elementwise within
// atol + rtol * |ref|, or (rel_l2 >= 0) as ||got - ref|| <= rel_l2 * ||ref||, or
// (conditioned = K >= 0) elementwise within K u c / (1 - K u / lambda_min),
// u = roundoff, with the reference's own conditioning c and lambda_min
// (Lomb-Scargle: LombScarglePowers; atol then adds atol times the row's largest
// power); unbounded where K u >= lambda_min, where G is singular at that
// precision. Discount products are exact on every backend.
struct Tolerance {
  double rtol = 0;
  double atol = 0;
  double rel_l2 = -1;
  double conditioned = -1;
  double roundoff = 0x1.0p-24;
};

constexpr double kFloat64Roundoff = 0x1.0p-53;

inline void ExpectWithin(const std::vector<double>& got, const std::vector<double>& ref, Tolerance t) {
  if (t.rel_l2 >= 0) {
    ExpectRelativeL2(got, ref, t.rel_l2);
  } else {
    ExpectNear(got, ref, t.rtol, t.atol);
  }
}

// The CPU computes in float64 and rounds once to T: float32 within its rounding
// (6e-8) with margin; float64 keeps a few roundings of slack for libm and sum order.
// Lomb-Scargle: that slack on the row's largest power, plus float64 rounding times
// the power's conditioning, since where few samples and a floating mean leave G
// nearly singular the float64 reference itself errs beyond any fixed fraction.
struct CpuSubject {
  static constexpr const char* kName = "cpu";
  static constexpr bool kHasNufft = true;
  static absl::StatusOr<std::unique_ptr<Backend>> Create() { return CreateCpuBackend(2); }
  template <typename T>
  static Tolerance For(Check check) {
    const bool f32 = sizeof(T) == 4;
    const double rtol = f32 ? 1e-6 : 1e-12;
    switch (check) {
      case Check::kHaversineMesh: return {rtol, 1e-6};  // near the antipode h is ill-conditioned
      case Check::kHaversinePoints: return {rtol, 1e-9};
      case Check::kNormalize: return {rtol, 0};
      case Check::kLombScargle:
        return {.atol = f32 ? 1e-6 : 1e-10, .conditioned = 64, .roundoff = kFloat64Roundoff};
    }
    return {};
  }
};

// The GPU computes float32 in float32: norm-relative bounds. Lomb-Scargle
// accumulates its sums in float32 too, so a power errs by a few float32
// roundings of those sums times its conditioning, which few samples or a
// floating mean make arbitrarily large (a fixed 1e-4 failed on 1 seed in 10 at
// N = 3). K = 64: over 3000 seeds of a numpy emulation of the kernel
// (N = 3 and 5, __sincosf's worst error on every call) the worst reached 30.
struct CudaSubject {
  static constexpr const char* kName = "cuda";
  static constexpr bool kHasNufft = true;
  static absl::StatusOr<std::unique_ptr<Backend>> Create() {
    BackendOptions options;
    options.kind = BackendKind::kCuda;
    GC_ASSIGN_OR_RETURN(BackendSelection selection, CreateBackend(options));
    return std::move(selection.backend);
  }
  template <typename T>
  static Tolerance For(Check check) {
    const bool f32 = sizeof(T) == 4;
    switch (check) {
      case Check::kHaversineMesh: return {.rel_l2 = f32 ? 2e-6 : 1e-12};
      case Check::kHaversinePoints: return {.rel_l2 = f32 ? 1e-5 : 1e-12};
      case Check::kNormalize: return {.rel_l2 = f32 ? 1e-6 : 1e-14};
      case Check::kLombScargle: return f32 ? Tolerance{.conditioned = 64} : Tolerance{.rel_l2 = 1e-9};
    }
    return {};
  }
};

// One backend per process and kind: the CUDA one loads its kernels once.
template <typename Subject>
absl::StatusOr<Backend*> Shared() {
  static const absl::StatusOr<std::unique_ptr<Backend>> made = Subject::Create();
  if (!made.ok()) return made.status();
  return made->get();
}

// Set by bench/run_gpu_kernels.sh under compute-sanitizer: trims the largest cases.
inline bool Sanitized() { return std::getenv("GPUCOMPUTE_SANITIZER") != nullptr; }

// GPUCOMPUTE_SEED_SWEEP=N: the tests that run under ForEachSeed repeat on N
// fresh seeds, keeping only their cases of at most kSweepMaxWork elements of
// work, and print the case that came nearest its tolerance. 0 or unset: one seed.
inline int SeedSweep() {
  const char* seeds = std::getenv("GPUCOMPUTE_SEED_SWEEP");
  return seeds == nullptr ? 0 : std::max(0, std::atoi(seeds));
}
constexpr int64_t kSweepMaxWork = 10000;

template <typename S, typename T>
struct On {
  using Subject = S;
  using Element = T;
};
using Subjects = ::testing::Types<On<CpuSubject, float>, On<CpuSubject, double>,
                                  On<CudaSubject, float>, On<CudaSubject, double>>;
struct SubjectNames {
  template <typename P>
  static std::string GetName(int) {
    return absl::StrCat(P::Subject::kName, sizeof(typename P::Element) == 4 ? "_f32" : "_f64");
  }
};

template <typename P>
class BackendConformance : public ::testing::Test {
 protected:
  using T = typename P::Element;
  static constexpr DType kDType = test::DTypeOf<T>();
  static constexpr DType kOtherDType = test::DTypeOf<std::conditional_t<sizeof(T) == 4, double, float>>();

  void SetUp() override {
    absl::StatusOr<Backend*> backend = Shared<typename P::Subject>();
    if (!backend.ok()) GTEST_SKIP() << P::Subject::kName << " backend: " << backend.status();
    backend_ = *backend;
  }

  static Tolerance ToleranceFor(Check check) { return P::Subject::template For<T>(check); }

  // Runs `body` on this test's seed, or under GPUCOMPUTE_SEED_SWEEP on that many
  // fresh ones, stopping at the first that fails; then reports the worst case.
  template <typename Body>
  void ForEachSeed(Body body) {
    const int seeds = std::max(1, SeedSweep());
    int done = 0;
    for (; done < seeds && !this->HasFailure(); ++done) {
      if (done > 0) random_ = test::RandomInputs();
      SCOPED_TRACE(absl::StrCat("random seed ", random_.seed()));
      body();
    }
    if (SeedSweep() == 0) return;
    std::printf("[ SWEEP    ] %d seeds; nearest its bound: seed %llu, %s: error %.3g, bound %.3g (%.3g of it)\n",
                done, static_cast<unsigned long long>(worst_.seed), worst_.what.c_str(),
                worst_.error, worst_.bound, worst_.error / worst_.bound);
  }
  // Notes how near one case came to its bound, for the sweep's report.
  void Record(double error, double bound, const std::string& what) {
    if (!(error / bound <= worst_.error / worst_.bound)) {
      worst_ = {error, bound, random_.seed(), what};
    }
  }
  // The CPU backend, whose error messages every backend repeats word for word.
  static Backend& Cpu() { return **Shared<CpuSubject>(); }

  // An array holding `values` rounded to T; `values` is rounded in place too,
  // so references see exactly what the backend sees.
  std::shared_ptr<Array> Upload(const Shape& shape, std::vector<double>& values) {
    const std::vector<T> rounded(values.begin(), values.end());
    values.assign(rounded.begin(), rounded.end());
    return test::Put(*backend_, shape, rounded);
  }
  std::shared_ptr<Array> UploadOther(const Shape& shape, const std::vector<double>& values) {
    return test::Make(*backend_, kOtherDType, shape,
                      sizeof(T) == 4 ? static_cast<const void*>(values.data())
                                     : std::vector<float>(values.begin(), values.end()).data());
  }
  std::shared_ptr<Array> Poisoned(const Shape& shape) {
    return test::Poisoned(*backend_, kDType, shape);
  }
  std::vector<double> Download(const Array& array) {
    return test::ToDoubles(test::Read<T>(*backend_, array));
  }
  std::vector<double> Uniform(int64_t n, double lo, double hi) { return random_.Uniform(n, lo, hi); }
  std::vector<GeoPoint> RandomRefs(int count) {
    const std::vector<double> lat = Uniform(count, -90, 90), lon = Uniform(count, -180, 180);
    std::vector<GeoPoint> refs(count);
    for (int i = 0; i < count; ++i) refs[i] = {lat[i], lon[i]};
    return refs;
  }

  test::RandomInputs random_;
  Backend* backend_ = nullptr;
  OpContext ctx_;

 private:
  struct Worst {
    double error = 0, bound = 1;
    uint64_t seed = 0;
    std::string what = "none";
  };
  Worst worst_;
};

#define TRACE_SEED() SCOPED_TRACE(absl::StrCat("random seed ", this->random_.seed()))

// Lomb-Scargle: one case of the periodogram against the float64 reference.
enum class Weights { kNone, kShared, kPerRow };
enum class Batching { kNone, kSharedX, kBatchedX };
// Grid generated by the backend; random array; array of the grid's values
// (evenly spaced like numpy.linspace output).
enum class Freqs { kGrid, kRandomArray, kLinspaceArray };
constexpr Freqs kAllFreqs[] = {Freqs::kGrid, Freqs::kRandomArray, Freqs::kLinspaceArray};

struct LombScargleCase {
  int64_t samples;
  int64_t frequencies;
  Batching batching;
  Weights weights;
  Freqs freqs;
  LombScargleOptions options;
  int64_t batch = 3;       // rows when batched
  bool sinusoid = false;   // x over [0, 1000), y a noisy sine per row; else uniform noise
  double x_span = 0;       // x over [0, x_span) where non-zero
};

// The NUFFT keeps its promise: powers within options.accuracy of the float64
// direct sums on the row's largest power (float32: and the output's rounding).
inline double NufftBound(const LombScargleOptions& options, bool float32) {
  return std::max(options.accuracy, float32 ? 1e-6 : 0.0);
}

// The NUFFT's whole bound: NufftBound, plus float64 rounding times the power's
// conditioning, which its direct redo (and the reference) cannot beat where few
// samples or a floating mean make G nearly singular. K = 64 as for the float32
// direct kernel; the NufftOnIllConditionedSmallRows sweep (CPU, 3000 seeds each
// dtype) came within 0.17 of the whole bound (float32: 0.06).
inline Tolerance NufftTolerance(const LombScargleOptions& options, bool float32) {
  return {.atol = NufftBound(options, float32), .conditioned = 64, .roundoff = kFloat64Roundoff};
}

// The float64 reference of a case: powers, or (options.amplitude) the amplitudes as
// (real, imaginary) pairs with each frequency's conditioning given to both.
inline std::vector<double> Reference(const std::vector<double>& x, bool x_batched,
                                     const std::vector<double>& y, const std::vector<double>* w,
                                     bool w_batched, const std::vector<double>& freqs,
                                     int64_t batch, int64_t n, const LombScargleOptions& options,
                                     std::vector<LombScargleConditioning>& conditioning) {
  if (!options.amplitude) {
    return LombScarglePowers(x, x_batched, y, w, w_batched, freqs, batch, n, options, &conditioning);
  }
  std::vector<LombScargleConditioning> per_frequency;
  const std::vector<std::complex<double>> amplitudes =
      LombScargleAmplitudes(x, x_batched, y, w, w_batched, freqs, batch, n, options, &per_frequency);
  std::vector<double> pairs;
  conditioning.clear();
  for (size_t i = 0; i < amplitudes.size(); ++i) {
    pairs.insert(pairs.end(), {amplitudes[i].real(), amplitudes[i].imag()});
    conditioning.insert(conditioning.end(), {per_frequency[i], per_frequency[i]});
  }
  return pairs;
}

template <typename P>
class LombScargleConformance : public BackendConformance<P> {
 protected:
  void Check(const LombScargleCase& c) {
    const std::string what = absl::StrCat(
        "method=", LombScargleMethodName(c.options.method), " N=", c.samples, " M=", c.frequencies, " batching=", static_cast<int>(c.batching),
        " weights=", static_cast<int>(c.weights), " freqs=", static_cast<int>(c.freqs),
        " precenter=", c.options.precenter, " normalize=", c.options.normalize,
        " amplitude=", c.options.amplitude, " floating_mean=", c.options.floating_mean,
        " sinusoid=", c.sinusoid);
    SCOPED_TRACE(what);
    if (c.options.method == LombScargleMethod::kNufft && !P::Subject::kHasNufft) return;
    const int64_t batch = c.batching == Batching::kNone ? 1 : c.batch;
    const int64_t n = c.samples, m = c.frequencies;
    if (Sanitized() && batch * n * m > 5000000) return;
    if (SeedSweep() > 0 && batch * n * m > kSweepMaxWork) return;
    const bool x_batched = c.batching == Batching::kBatchedX;
    const Shape x_shape = x_batched ? Shape{batch, n} : Shape{n};
    const Shape y_shape = c.batching == Batching::kNone ? Shape{n} : Shape{batch, n};
    const double x_span = c.x_span > 0 ? c.x_span : c.sinusoid ? 1000 : 100;
    std::vector<double> x = this->Uniform(ElementCount(x_shape), 0, x_span);
    std::vector<double> y = this->Uniform(ElementCount(y_shape), c.sinusoid ? -0.5 : -1, c.sinusoid ? 0.5 : 3);
    if (c.sinusoid) {
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < n; ++i) {
          y[b * n + i] += 2.0 * std::sin((1.0 + 0.5 * b) * x[(x_batched ? b * n : 0) + i]) + 0.7;
        }
      }
    }
    auto x_array = this->Upload(x_shape, x);
    auto y_array = this->Upload(y_shape, y);
    std::vector<double> w;
    std::shared_ptr<Array> w_array;
    if (c.weights != Weights::kNone) {
      const Shape w_shape = c.weights == Weights::kPerRow ? y_shape : Shape{n};
      w = this->Uniform(ElementCount(w_shape), 0.1, 2);
      w_array = this->Upload(w_shape, w);
    }
    const Linspace grid = {0.01, 10, m};
    std::vector<double> freqs(m);
    for (int64_t k = 0; k < m; ++k) freqs[k] = grid.At(k);
    if (c.freqs == Freqs::kRandomArray) freqs = this->Uniform(m, 0.01, 10);
    std::shared_ptr<Array> freq_array;
    if (c.freqs != Freqs::kGrid) freq_array = this->Upload({m}, freqs);
    // An explicit NUFFT takes a float32 linspace as the even grid through its ends.
    if (c.options.method == LombScargleMethod::kNufft && c.freqs == Freqs::kLinspaceArray) {
      for (int64_t k = 1; k + 1 < m; ++k) {
        freqs[k] = freqs[0] + static_cast<double>(k) * ((freqs[m - 1] - freqs[0]) / (m - 1));
      }
    }
    Shape out_shape = c.batching == Batching::kNone ? Shape{m} : Shape{batch, m};
    if (c.options.amplitude) out_shape.push_back(2);  // (real, imaginary)
    auto out = this->Poisoned(out_shape);
    absl::Status status = this->backend_->LombScargle(*x_array, *y_array, w_array.get(),
                                                      freq_array.get(), grid, c.options, *out, this->ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    const bool nufft = this->ctx_.method == "nufft";
    if (c.options.method != LombScargleMethod::kAuto) {
      EXPECT_EQ(this->ctx_.method, LombScargleMethodName(c.options.method));
    }
    std::vector<LombScargleConditioning> conditioning;
    const std::vector<double> expected =
        Reference(x, x_batched, y, w_array ? &w : nullptr, c.weights == Weights::kPerRow, freqs,
                  batch, n, c.options, conditioning);
    const std::vector<double> actual = this->Download(*out);
    // A row's values: M powers, or M (real, imaginary) pairs, on the scale of its largest.
    const int64_t values = c.options.amplitude ? 2 : 1, row = m * values;
    const auto largest_in_row = [&](int64_t b) {
      double largest = 0;
      for (int64_t k = 0; k < m; ++k) {
        const double* v = expected.data() + (b * m + k) * values;
        largest = std::max(largest, values == 2 ? std::hypot(v[0], v[1]) : std::abs(v[0]));
      }
      return largest;
    };
    const Tolerance tolerance = nufft ? NufftTolerance(c.options, sizeof(typename P::Element) == 4)
                                      : this->ToleranceFor(Check::kLombScargle);
    if (tolerance.rel_l2 >= 0) {
      this->Record(Compare(actual, expected).rel, tolerance.rel_l2, what);
      ExpectRelativeL2(actual, expected, tolerance.rel_l2);
      return;
    }
    // Each value within atol times its row's largest (a frequency where D is tiny
    // amplifies rounding in both), plus K u times its conditioning where K >= 0.
    std::vector<double> bounds(conditioning.size());
    for (size_t k = 0; k < bounds.size() && tolerance.conditioned >= 0; ++k) {
      const double k_u = tolerance.conditioned * tolerance.roundoff;
      const double lambda_min = conditioning[k].lambda_min;
      bounds[k] = lambda_min > k_u ? k_u * conditioning[k].first_order / (1 - k_u / lambda_min)
                                   : std::numeric_limits<double>::infinity();
    }
    for (int64_t b = 0; b < batch; ++b) {
      const double largest = largest_in_row(b);
      for (int64_t k = 0; k < row; ++k) bounds[b * row + k] += tolerance.atol * largest;
    }
    for (size_t k = 0; k < bounds.size(); ++k) {
      this->Record(std::abs(actual[k] - expected[k]), bounds[k], what);
    }
    ExpectWithinBounds(actual, expected, bounds);
  }
};

}  // namespace gpucompute::test
