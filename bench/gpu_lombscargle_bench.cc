// Lomb-Scargle on the CUDA backend at the large request sizes, both methods: the
// median compute time (ctx.compute_time: CUDA events around the kernels, inputs
// already on the device) of >= 10 runs after 2 warm-ups, and each result's error
// against the direct float64 sums of the same inputs, as the largest
// |P - P_direct64| over the row's largest |P_direct64| (the NUFFT's accuracy measure).
//
//   gpu_lombscargle_bench [--quick] [--case=SUBSTRING]   (only the cases whose name has it)
//
// Cases: 3,000 samples x 1e6 frequencies on a grid; 100 series of 3,000 samples x 1,000
// frequencies in one request; 10,000 x 1e6 explicit (uneven) frequencies; the seed's
// ~100 samples x 2^20 grid; 8 series x 1e6, which the NUFFT runs in two passes.
// bench/run_gpu_kernels.sh ls times cupyx on the same cases.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/check_or_exit.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/lombscargle_nufft.h"

namespace gpucompute {
namespace {

struct Case {
  std::string name;
  int64_t batch, samples, frequencies;
  bool grid;       // a FrequencyGrid, else an explicit array of uneven frequencies
  bool batched_x;  // per-row x
};

struct Inputs {
  std::shared_ptr<Array> x, y, freqs;
  Linspace grid;
};

Backend* g_backend = nullptr;
int g_device = 0;

std::shared_ptr<Array> Put(DType dtype, const Shape& shape, const std::vector<double>& values) {
  absl::StatusOr<std::shared_ptr<Array>> a = g_backend->Allocate(dtype, shape, g_device);
  CHECK_OK(a.status());
  if (dtype == DType::kFloat32) {
    const std::vector<float> f(values.begin(), values.end());
    CHECK_OK(g_backend->CopyToArray(f.data(), 0, f.size() * sizeof(float), **a));
  } else {
    CHECK_OK(g_backend->CopyToArray(values.data(), 0, values.size() * sizeof(double), **a));
  }
  return *a;
}

std::vector<double> Get(const Array& a) {
  std::vector<double> values(a.size());
  if (a.dtype() == DType::kFloat32) {
    std::vector<float> f(a.size());
    CHECK_OK(g_backend->CopyFromArray(a, 0, f.size() * sizeof(float), f.data()));
    values.assign(f.begin(), f.end());
  } else {
    CHECK_OK(g_backend->CopyFromArray(a, 0, values.size() * sizeof(double), values.data()));
  }
  return values;
}

// Sorted times over [0, 1000), a sine per row plus noise; uneven frequencies in [0.01, 10).
Inputs MakeInputs(const Case& c, DType dtype) {
  std::mt19937_64 rng(14);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::normal_distribution<double> noise(0, 0.5);
  const int64_t x_rows = c.batched_x ? c.batch : 1;
  std::vector<double> x(x_rows * c.samples), y(c.batch * c.samples);
  for (int64_t r = 0; r < x_rows; ++r) {
    for (int64_t j = 0; j < c.samples; ++j) x[r * c.samples + j] = 1000 * uniform(rng);
    std::sort(x.begin() + r * c.samples, x.begin() + (r + 1) * c.samples);
  }
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < c.samples; ++j) {
      const double t = x[(c.batched_x ? b : 0) * c.samples + j];
      y[b * c.samples + j] = 2 * std::sin((1 + 0.01 * b) * t) + noise(rng);
    }
  }
  Inputs in;
  in.x = Put(dtype, c.batched_x ? Shape{c.batch, c.samples} : Shape{c.samples}, x);
  in.y = Put(dtype, c.batch == 1 ? Shape{c.samples} : Shape{c.batch, c.samples}, y);
  in.grid = {0.01, 10.0, c.frequencies};
  if (!c.grid) {
    std::vector<double> f(c.frequencies);
    for (double& v : f) v = 0.01 + 9.99 * uniform(rng);
    in.freqs = Put(dtype, {c.frequencies}, f);
  }
  return in;
}

// Median compute ms of `reps` runs after two warm-ups; the method that ran.
double TimeIt(const Case& c, const Inputs& in, LombScargleMethod method, Array& out, int reps,
              std::string* ran) {
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {
    OpContext ctx;
    CHECK_OK(g_backend->LombScargle(*in.x, *in.y, nullptr, in.freqs.get(), in.grid,
                                    LombScargleOptions{.method = method}, out, ctx));
    *ran = std::string(ctx.method);
    if (i >= 2) ms.push_back(absl::ToDoubleMilliseconds(ctx.compute_time));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double RowScaledError(const std::vector<double>& got, const std::vector<double>& want, int64_t m) {
  double worst = 0;
  for (size_t b = 0; b < want.size() / m; ++b) {
    double scale = 0;
    for (int64_t k = 0; k < m; ++k) scale = std::max(scale, std::abs(want[b * m + k]));
    for (int64_t k = 0; k < m; ++k) {
      worst = std::max(worst, std::abs(got[b * m + k] - want[b * m + k]) / scale);
    }
  }
  return worst;
}

void Run(const Case& c, bool quick) {
  const Shape out_shape = c.batch == 1 ? Shape{c.frequencies} : Shape{c.batch, c.frequencies};
  const int reps = quick ? 5 : 15;
  const Inputs ref_in = MakeInputs(c, DType::kFloat64);
  absl::StatusOr<std::shared_ptr<Array>> ref_out = g_backend->Allocate(DType::kFloat64, out_shape, g_device);
  CHECK_OK(ref_out.status());
  std::string ran;
  const double direct64_ms = TimeIt(c, ref_in, LombScargleMethod::kDirect, **ref_out, reps, &ran);
  const std::vector<double> reference = Get(**ref_out);
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const Inputs in = dtype == DType::kFloat64 ? ref_in : MakeInputs(c, dtype);
    absl::StatusOr<std::shared_ptr<Array>> out = g_backend->Allocate(dtype, out_shape, g_device);
    CHECK_OK(out.status());
    for (LombScargleMethod method :
         {LombScargleMethod::kDirect, LombScargleMethod::kNufft, LombScargleMethod::kAuto}) {
      if (method == LombScargleMethod::kNufft && !c.grid) continue;
      // The forced float64 direct run is the reference itself (timed above into ref_out).
      const bool is_reference = dtype == DType::kFloat64 && method == LombScargleMethod::kDirect;
      const double ms = is_reference ? direct64_ms : TimeIt(c, in, method, **out, reps, &ran);
      const std::string error =
          is_reference ? "(the reference)"
                       : absl::StrFormat("%.2e", RowScaledError(Get(**out), reference, c.frequencies));
      std::printf("%-34s %-4s %-6s -> %-6s %10.4f ms   err/rowmax %s\n", c.name.c_str(),
                  dtype == DType::kFloat32 ? "f32" : "f64", std::string(LombScargleMethodName(method)).c_str(),
                  is_reference ? "direct" : ran.c_str(), ms, error.c_str());
      std::fflush(stdout);
    }
  }
}

// ---- --small: issue 13 --------------------------------------------------------------------
// Small requests as client/bench.cc sends them (x uniform in [0, 100), y in [-1, 1),
// the grid linspace(0.01, 10, M), precenter, "power"), each launch policy straight
// through the launcher (result memset + kernels; CUDA events around each launch, one
// at a time, median of kLaunchReps): the variant LaunchLombScargle picked before the
// small-problem path ("old"), the small path, and which one it picks now; the backend's
// compute time (ctx.compute_time, as the server reports it) of its pick; and each
// result's error against the float64 result of policy 0 on the same (rounded) inputs.
constexpr int kLaunchReps = 200;

int Main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    quick |= std::strcmp(argv[i], "--quick") == 0;
    if (std::strncmp(argv[i], "--case=", 7) == 0) only = argv[i] + 7;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(BackendOptions{});
  CHECK_OK(backend.status());
  g_backend = backend->get();
  g_device = g_backend->PickDevice();
  std::printf("%-34s %-4s %-16s %13s   %s\n", "case", "type", "method -> ran", "compute",
              "error vs direct f64");
  const int64_t big = quick ? 100000 : 1000000;
  for (const Case& c : std::vector<Case>{
           {"3000 x 1e6 grid", 1, 3000, big, true, false},
           {"100 series x 3000, 1000 freqs", 100, 3000, 1000, true, true},
           {"10000 x 1e6 explicit", 1, 10000, big, false, false},
           {"seed 004: 100 x 2^20 grid", 1, 100, quick ? (1 << 17) : (1 << 20), true, false},
           // Over the NUFFT's 1 GiB of scratch per pass: two passes, the second overlapping.
           {"8 series x 300 x 1e6 grid (chunks)", 8, 300, big, true, true},
       }) {
    if (c.name.find(only) != std::string::npos) Run(c, quick);
  }
  return 0;
}

}  // namespace
}  // namespace gpucompute

int main(int argc, char** argv) { return gpucompute::Main(argc, argv); }
