// Times every direct Lomb-Scargle policy (lombscargle_variants.h: the shipped ones and
// the candidates) against the shipped launcher (LaunchLombScargle), kernels only, with
// each one's error against the float64 direct sums of the same inputs, as the largest
// |P - P_64| over the row's largest |P_64|.
//
//   lombscargle_lab [--reps N]
//
// Cases: the seed's 1024 samples x 2^20 and 2^16 grid frequencies (floating mean);
// 10,000 samples x 1e6 explicit frequencies, with weights and without; and the small
// requests around the small-problem rule, where the shipped launcher takes the
// small-problem kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dev/cuda/lab.h"
#include "dev/cuda/lombscargle_variants.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute::lab {
namespace {

namespace cl = cuda::lab;

struct Case {
  int64_t batch, samples, frequencies;
  bool explicit_freqs, weighted, floating_mean;
};

// Device values of dtype from host doubles (rounded to dtype first).
void Upload(const std::vector<double>& v, DType t, void* dst) {
  if (t == DType::kFloat64) {
    LAB_CHECK(cudaMemcpy(dst, v.data(), v.size() * sizeof(double), cudaMemcpyHostToDevice));
  } else {
    std::vector<float> f(v.begin(), v.end());
    LAB_CHECK(cudaMemcpy(dst, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
}

double RowScaledError(const std::vector<double>& got, const std::vector<double>& want, int64_t m) {
  double worst = 0;
  for (size_t row = 0; row * m < want.size(); ++row) {
    double largest = 0, err = 0;
    for (int64_t k = 0; k < m; ++k) largest = std::max(largest, std::fabs(want[row * m + k]));
    for (int64_t k = 0; k < m; ++k) err = std::max(err, std::fabs(got[row * m + k] - want[row * m + k]));
    worst = std::max(worst, largest > 0 ? err / largest : err);
  }
  return worst;
}

void Run(const Device& dev, const Case& c, DType t) {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> x(c.samples), y(c.batch * c.samples), w(c.samples), f(c.frequencies);
  for (double& v : x) v = 1000 * u(rng);
  for (double& v : y) v = 2 * u(rng) - 1;
  for (double& v : w) v = 0.1 + 1.9 * u(rng);
  for (double& v : f) v = 0.01 + 10 * u(rng);
  if (t == DType::kFloat32) {  // the reference sees the float32 inputs
    for (auto* vec : {&x, &y, &w, &f}) {
      for (double& v : *vec) v = static_cast<float>(v);
    }
  }
  Buffer dx(dev, t, c.samples, 0, 0, 0), dy(dev, t, c.batch * c.samples, 0, 0, 0), dw(dev, t, c.samples, 0, 0, 0),
      df(dev, t, c.frequencies, 0, 0, 0), out(dev, t, c.batch * c.frequencies, 0, 0, 0);
  Buffer rx(dev, DType::kFloat64, c.samples, 0, 0, 0), ry(dev, DType::kFloat64, c.batch * c.samples, 0, 0, 0),
      rw(dev, DType::kFloat64, c.samples, 0, 0, 0), rf(dev, DType::kFloat64, c.frequencies, 0, 0, 0),
      rout(dev, DType::kFloat64, c.batch * c.frequencies, 0, 0, 0);
  Upload(x, t, dx.p), Upload(y, t, dy.p), Upload(w, t, dw.p), Upload(f, t, df.p);
  Upload(x, DType::kFloat64, rx.p), Upload(y, DType::kFloat64, ry.p), Upload(w, DType::kFloat64, rw.p),
      Upload(f, DType::kFloat64, rf.p);
  cuda::LombScargleResult* res = nullptr;
  LAB_CHECK(cudaMalloc(reinterpret_cast<void**>(&res), sizeof(*res)));
  cuda::LombScargleArgs a;
  a.batch = c.batch;
  a.samples = c.samples;
  a.frequencies = c.frequencies;
  a.grid_start = 0.01;
  a.grid_stop = 10.0;
  a.precenter = true;
  a.floating_mean = c.floating_mean;
  cuda::LombScargleArgs ref = a;
  ref.x = rx.p, ref.y = ry.p, ref.out = rout.p;
  ref.weights = c.weighted ? rw.p : nullptr;
  ref.freqs = c.explicit_freqs ? rf.p : nullptr;
  LAB_CHECK(cl::LaunchLombScargleVariant(DType::kFloat64, ref, res, dev.Env(), 0));
  LAB_CHECK(cudaStreamSynchronize(dev.stream));
  const std::vector<double> want = rout.Read();
  a.x = dx.p, a.y = dy.p, a.out = out.p;
  a.weights = c.weighted ? dw.p : nullptr;
  a.freqs = c.explicit_freqs ? df.p : nullptr;
  auto error = [&] {
    LAB_CHECK(cudaStreamSynchronize(dev.stream));
    cuda::LombScargleResult flags{};
    LAB_CHECK(cudaMemcpy(&flags, res, sizeof(flags), cudaMemcpyDeviceToHost));
    if (flags.bad_batch != ~0ull) return static_cast<double>(INFINITY);
    return RowScaledError(out.Read(), want, c.frequencies);
  };
  char shape[96];
  std::snprintf(shape, sizeof(shape), "%s %lld x %lld x %lld%s%s", Short(t), static_cast<long long>(c.batch),
                static_cast<long long>(c.samples), static_cast<long long>(c.frequencies),
                c.explicit_freqs ? " explicit" : " grid", c.weighted ? " w" : "");
  const double shipped_ms = dev.Time([&] { return cuda::LaunchLombScargle(t, a, res, dev.Env()); });
  const int picked = cl::LombScargleDefaultVariant(t, a, dev.Env(), true);
  PrintRow(shape, "shipped (v" + std::to_string(picked) + ")", shipped_ms, shipped_ms, error());
  for (int v = 0; v < cl::LombScargleVariantCount(t); ++v) {
    const double ms = dev.Time([&] { return cl::LaunchLombScargleVariant(t, a, res, dev.Env(), v); });
    PrintRow(shape, "v" + std::to_string(v), ms, shipped_ms, error());
  }
  cudaFree(res);
}

int Main(int argc, char** argv) {
  Device dev;
  if (!dev.OpenWithArgs(argc, argv)) return 0;
  std::printf("variants: %s\n", "f32 v0 8 a thread, v1 4, v2-4 small (8 warps, 4 warps, 2 a lane); "
                                "f64 v0 4 a thread, v1 8 (128 threads), v2 3, v3 5 (2048 angles), v4 5 (512 angles), "
                                "v5-7 small");
  const std::vector<Case> cases = {
      {1, 1024, 1 << 20, false, false, true}, {1, 1024, 1 << 16, false, false, true},
      {1, 10000, 1000000, true, false, false}, {1, 10000, 1000000, true, true, false},
      // Around the small-problem rule: the request it was made for, its neighbours, and
      // past it (more results than sm_count x 1024, more than 2^24 pairs).
      {4, 256, 256, false, false, false}, {1, 256, 64, false, false, false}, {16, 1024, 1024, false, false, false},
      {64, 256, 256, false, false, false}, {256, 256, 1024, false, false, false},
      {1, 4096, 16384, false, false, false}, {100, 3000, 1000, false, false, false}};
  for (const Case& c : cases) {
    for (DType t : {DType::kFloat32, DType::kFloat64}) Run(dev, c, t);
  }
  return 0;
}

}  // namespace
}  // namespace gpucompute::lab

int main(int argc, char** argv) { return gpucompute::lab::Main(argc, argv); }
