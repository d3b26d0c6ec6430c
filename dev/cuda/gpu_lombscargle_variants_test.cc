// Every launch policy of the direct Lomb-Scargle kernels (lombscargle_variants.h: the
// default policies and the small-problem path) against the float64 reference of
// tests/testing with the CUDA subject's tolerances (conformance.h: float64 within a
// relative L2 of 1e-9, float32 within 64 float32 roundings times each value's
// conditioning). The backend suites reach only the policy LaunchLombScargle picks; here
// every policy runs at the small shapes that now go to the small path, and the small
// path at its edges: fewer samples than warps, samples over several tiles, frequencies
// not a multiple of 32, every option, weights, explicit frequencies and bad weights.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cuda/launchers.h"
#include "dev/cuda/lombscargle_variants.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/gpu_present.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using test::Batching;
using test::Env;
using test::Freqs;
using test::Weights;

Backend& Cuda() {
  static Backend* backend = [] {
    absl::StatusOr<Backend*> made = test::Shared<test::CudaSubject>();
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *made : nullptr;
  }();
  return *backend;
}

struct DeviceResult {
  cuda::LombScargleResult* p = nullptr;
  DeviceResult() { (void)cudaMalloc(reinterpret_cast<void**>(&p), sizeof(*p)); }
  ~DeviceResult() { cudaFree(p); }
  unsigned long long BadBatch() const {
    cuda::LombScargleResult r{};
    (void)cudaMemcpy(&r, p, sizeof(r), cudaMemcpyDeviceToHost);
    return r.bad_batch;
  }
};

struct Case {
  int64_t batch, samples, frequencies;
  Batching batching;
  Weights weights;
  Freqs freqs;
};

std::string Describe(const Case& c, const LombScargleOptions& o) {
  return absl::StrCat(c.batch, " x ", c.samples, " x ", c.frequencies, " batching=", static_cast<int>(c.batching),
                      " weights=", static_cast<int>(c.weights), " freqs=", static_cast<int>(c.freqs),
                      " precenter=", o.precenter, " normalize=", o.normalize, " floating_mean=", o.floating_mean,
                      " amplitude=", o.amplitude);
}

// One case on every variant of both dtypes. Inputs are float32 values (so both dtypes
// and the reference see the same numbers).
void CheckEveryVariant(const Case& c, const LombScargleOptions& o, test::RandomInputs& random) {
  const bool x_batched = c.batching == Batching::kBatchedX;
  const int64_t b = c.batch, n = c.samples, m = c.frequencies;
  const auto as_float = [](std::vector<double> v) {
    for (double& e : v) e = static_cast<float>(e);
    return v;
  };
  const std::vector<double> x = as_float(random.Uniform((x_batched ? b : 1) * n, 0, 100));
  const std::vector<double> y = as_float(random.Uniform(b * n, -1, 3));
  const bool w_batched = c.weights == Weights::kPerRow;
  const std::vector<double> w = as_float(random.Uniform((w_batched ? b : 1) * n, 0.1, 2));
  std::vector<double> freqs(m);
  const Linspace grid{0.01, 10, m};
  for (int64_t k = 0; k < m; ++k) freqs[k] = grid.At(k);
  if (c.freqs == Freqs::kRandomArray) freqs = as_float(random.Uniform(m, 0.01, 10));
  if (c.freqs == Freqs::kLinspaceArray) freqs = as_float(freqs);
  std::vector<test::LombScargleConditioning> conditioning;
  const std::vector<double> want = test::Reference(x, x_batched, y, c.weights == Weights::kNone ? nullptr : &w,
                                                   w_batched, freqs, b, n, o, conditioning);
  const int64_t values = b * m * (o.amplitude ? 2 : 1);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const bool f32 = dtype == DType::kFloat32;
    const auto put = [&](const Shape& shape, const std::vector<double>& v) {
      return f32 ? test::Put(Cuda(), shape, std::vector<float>(v.begin(), v.end())) : test::Put(Cuda(), shape, v);
    };
    const auto xs = put({static_cast<int64_t>(x.size())}, x), ys = put({b * n}, y);
    const auto ws = put({static_cast<int64_t>(w.size())}, w), fs = put({m}, freqs);
    const auto out = test::Poisoned(Cuda(), dtype, {values});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the backend's copies and poison are done
    cuda::LombScargleArgs a;
    a.batch = b;
    a.samples = n;
    a.frequencies = m;
    a.x = xs->data();
    a.x_batched = x_batched;
    a.y = ys->data();
    a.weights = c.weights == Weights::kNone ? nullptr : ws->data();
    a.weights_batched = w_batched;
    a.freqs = c.freqs == Freqs::kGrid ? nullptr : fs->data();
    a.grid_start = grid.start;
    a.grid_stop = grid.stop;
    a.precenter = o.precenter;
    a.normalize = o.normalize;
    a.floating_mean = o.floating_mean;
    a.amplitude = o.amplitude;
    a.out = out->data();
    // The conditioned bounds of the float32 sums (CudaSubject: K = 64).
    std::vector<double> bounds(conditioning.size());
    const double k_u = 64 * 0x1.0p-24;
    for (size_t k = 0; k < bounds.size(); ++k) {
      const double lambda_min = conditioning[k].lambda_min;
      bounds[k] = lambda_min > k_u ? k_u * conditioning[k].first_order / (1 - k_u / lambda_min)
                                   : std::numeric_limits<double>::infinity();
    }
    for (int variant = 0; variant < cuda::lab::LombScargleVariantCount(dtype); ++variant) {
      SCOPED_TRACE(absl::StrCat(Describe(c, o), f32 ? " f32" : " f64", " variant ", variant, " seed ", random.seed()));
      DeviceResult result;
      // NaN again: an element this variant leaves unwritten fails.
      ASSERT_EQ(cudaMemset(a.out, 0xff, values * (f32 ? sizeof(float) : sizeof(double))), cudaSuccess);
      ASSERT_EQ(cuda::lab::LaunchLombScargleVariant(dtype, a, result.p, Env(), variant), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(result.BadBatch(), cuda::kNoIndex);
      const std::vector<double> got =
          f32 ? test::ToDoubles(test::Read<float>(Cuda(), *out)) : test::Read<double>(Cuda(), *out);
      if (f32) {
        test::ExpectWithinBounds(got, want, bounds);
      } else {
        test::ExpectRelativeL2(got, want, 1e-9);
      }
    }
  }
}

constexpr LombScargleOptions OptionsOf(int flags) {  // flags / 4: power, normalize, amplitude
  return {.precenter = (flags & 1) != 0, .normalize = flags / 4 == 1, .floating_mean = (flags & 2) != 0,
          .method = LombScargleMethod::kDirect, .amplitude = flags / 4 == 2};
}

// The bench's small request (client/bench.cc: 4 rows of 256 samples, 256 frequencies)
// and shapes around the small kernel's edges, every option.
TEST(GpuLombScargleVariants, SmallShapesEveryOption) {
  REQUIRE_GPU();
  test::RandomInputs random;
  const Case cases[] = {
      {4, 256, 256, Batching::kSharedX, Weights::kNone, Freqs::kGrid},
      {1, 3, 33, Batching::kNone, Weights::kNone, Freqs::kGrid},  // fewer samples than warps
      {3, 700, 70, Batching::kBatchedX, Weights::kPerRow, Freqs::kRandomArray},  // two tiles
      {2, 1025, 100, Batching::kSharedX, Weights::kShared, Freqs::kLinspaceArray},  // three tiles
      {5, 61, 1, Batching::kSharedX, Weights::kPerRow, Freqs::kGrid},
  };
  for (const Case& c : cases) {
    for (int flags = 0; flags < 12; ++flags) CheckEveryVariant(c, OptionsOf(flags), random);
  }
}

// The bench's neighbours, once each (their references cost ~1e7 pairs).
TEST(GpuLombScargleVariants, BenchNeighbours) {
  REQUIRE_GPU();
  test::RandomInputs random;
  for (const Case& c : {Case{1, 256, 64, Batching::kNone, Weights::kNone, Freqs::kGrid},
                        Case{16, 1024, 1024, Batching::kSharedX, Weights::kNone, Freqs::kGrid},
                        Case{64, 256, 256, Batching::kSharedX, Weights::kShared, Freqs::kGrid}}) {
    CheckEveryVariant(c, OptionsOf(1), random);  // precenter, power: the bench's options
  }
}

// Rows 1 and 3 (of 4) have a negative weight and a zero sum: every variant flags the
// first, row 0 is still computed. Small enough for racecheck,
// with samples over two of the small path's tiles.
TEST(GpuLombScargleVariants, BadWeightsOnEveryVariant) {
  REQUIRE_GPU();
  const int64_t b = 4, n = 600, m = 50;
  std::vector<double> x(n), y(b * n), w(b * n, 1.0);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.37 * static_cast<double>(i);
  for (int64_t i = 0; i < b * n; ++i) y[i] = std::sin(0.9 * static_cast<double>(i));
  w[1 * n + 17] = -0.5;
  for (int64_t i = 0; i < n; ++i) w[3 * n + i] = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const bool f32 = dtype == DType::kFloat32;
    const auto put = [&](const std::vector<double>& v) {
      const Shape shape{static_cast<int64_t>(v.size())};
      return f32 ? test::Put(Cuda(), shape, std::vector<float>(v.begin(), v.end())) : test::Put(Cuda(), shape, v);
    };
    const auto xs = put(x), ys = put(y), ws = put(w);
    const auto out = test::Poisoned(Cuda(), dtype, {b * m});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cuda::LombScargleArgs a;
    a.batch = b;
    a.samples = n;
    a.frequencies = m;
    a.x = xs->data();
    a.y = ys->data();
    a.weights = ws->data();
    a.weights_batched = true;
    a.grid_start = 0.1;
    a.grid_stop = 3;
    a.out = out->data();
    for (int variant = 0; variant < cuda::lab::LombScargleVariantCount(dtype); ++variant) {
      SCOPED_TRACE(absl::StrCat(f32 ? "f32" : "f64", " variant ", variant));
      DeviceResult result;
      ASSERT_EQ(cuda::lab::LaunchLombScargleVariant(dtype, a, result.p, Env(), variant), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(result.BadBatch(), 1u);
      const std::vector<double> got =
          f32 ? test::ToDoubles(test::Read<float>(Cuda(), *out)) : test::Read<double>(Cuda(), *out);
      for (int64_t k = 0; k < m; ++k) ASSERT_TRUE(std::isfinite(got[k])) << "row 0 was not computed";
    }
  }
}

}  // namespace
}  // namespace gpucompute
