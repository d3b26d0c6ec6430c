// Lomb-Scargle on the CUDA backend at issue 14's goal sizes, both methods: the
// median compute time (ctx.compute_time: CUDA events around the kernels, inputs
// already on the device) of >= 10 runs after 2 warm-ups, and each result's error
// against the direct float64 sums of the same inputs, as the largest
// |P - P_direct64| over the row's largest |P_direct64| (the NUFFT's accuracy measure).
//
//   gpu_lombscargle_bench [--quick] [--case=SUBSTRING]   (only the cases whose name has it)
//   gpu_lombscargle_bench --small                        (issue 13: small requests, below)
//
// Cases: 3,000 samples x 1e6 frequencies on a grid; 100 series of 3,000 samples x 1,000
// frequencies in one request; 10,000 x 1e6 explicit (uneven) frequencies; the seed's
// ~100 samples x 2^20 grid; 8 series x 1e6, which the NUFFT runs in two passes.
// bench/run_gpu_ls.sh times cupyx on the same cases.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/check_or_exit.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_variants.h"
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

double MedianLaunchUs(cudaStream_t stream, const std::function<cudaError_t()>& launch) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int i = 0; i < kLaunchReps + 3; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(launch());
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 3) us.push_back(1e3 * ms);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void RunSmall(int64_t batch, int64_t samples, int64_t frequencies, DType dtype, cudaStream_t stream,
              int sm_count) {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<double> x(samples), y(batch * samples);
  for (double& v : x) v = 100 * uniform(rng);
  for (double& v : y) v = 2 * uniform(rng) - 1;
  if (dtype == DType::kFloat32) {  // the reference sees the float32 inputs
    for (double& v : x) v = static_cast<float>(v);
    for (double& v : y) v = static_cast<float>(v);
  }
  const Shape out_shape = batch == 1 ? Shape{frequencies} : Shape{batch, frequencies};
  const Shape y_shape = batch == 1 ? Shape{samples} : Shape{batch, samples};
  const std::shared_ptr<Array> xs = Put(dtype, {samples}, x), ys = Put(dtype, y_shape, y);
  const std::shared_ptr<Array> x64 = Put(DType::kFloat64, {samples}, x), y64 = Put(DType::kFloat64, y_shape, y);
  absl::StatusOr<std::shared_ptr<Array>> out = g_backend->Allocate(dtype, out_shape, g_device);
  absl::StatusOr<std::shared_ptr<Array>> out64 = g_backend->Allocate(DType::kFloat64, out_shape, g_device);
  CHECK_OK(out.status());
  CHECK_OK(out64.status());
  cuda::LombScargleResult* result = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&result), sizeof(*result)));
  const cuda::LaunchEnv env{stream, nullptr, sm_count};
  cuda::LombScargleArgs a;
  a.batch = batch;
  a.samples = samples;
  a.frequencies = frequencies;
  a.grid_start = 0.01;
  a.grid_stop = 10.0;
  a.precenter = true;
  // The float64 reference: policy 0.
  a.x = x64->data();
  a.y = y64->data();
  a.out = (*out64)->data();
  CHECK_CUDA(cuda::LaunchLombScargleVariant(DType::kFloat64, a, result, env, 0));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::vector<double> reference = Get(**out64);
  a.x = xs->data();
  a.y = ys->data();
  a.out = (*out)->data();
  // The old policy, then the small path's policies (the first LaunchLombScargle's).
  static_assert(cuda::kLombScargleSmallVariants == 3, "the table has three columns for them");
  const int old_variant = cuda::LombScargleDefaultVariant(dtype, a, env, false);
  const int small_variant = cuda::LombScargleVariantCount(dtype) - cuda::kLombScargleSmallVariants;
  const int picked = cuda::LombScargleDefaultVariant(dtype, a, env, true);
  double us[1 + cuda::kLombScargleSmallVariants], error[1 + cuda::kLombScargleSmallVariants];
  for (int i = 0; i <= cuda::kLombScargleSmallVariants; ++i) {
    const int variant = i == 0 ? old_variant : small_variant + i - 1;
    us[i] = MedianLaunchUs(stream, [&] { return cuda::LaunchLombScargleVariant(dtype, a, result, env, variant); });
    cuda::LombScargleResult flags{};
    CHECK_CUDA(cudaMemcpy(&flags, result, sizeof(flags), cudaMemcpyDeviceToHost));
    if (flags.bad_batch != ~0ull) {
      std::fprintf(stderr, "variant %d flagged batch %llu\n", variant, flags.bad_batch);
      std::exit(1);
    }
    error[i] = RowScaledError(Get(**out), reference, frequencies);
  }
  std::vector<double> service_us;
  for (int i = 0; i < 50; ++i) {
    OpContext ctx;
    CHECK_OK(g_backend->LombScargle(*xs, *ys, nullptr, nullptr, Linspace{0.01, 10.0, frequencies},
                                    LombScargleOptions{.precenter = true, .method = LombScargleMethod::kDirect},
                                    **out, ctx));
    service_us.push_back(1e3 * absl::ToDoubleMilliseconds(ctx.compute_time));
  }
  std::sort(service_us.begin(), service_us.end());
  std::printf("%5lld x %5lld x %5lld  %-4s  v%-2d %7.1f  %7.1f %7.1f %7.1f  %6.2fx  %-5s %7.1f   %.1e  %.1e\n",
              static_cast<long long>(batch), static_cast<long long>(samples), static_cast<long long>(frequencies),
              dtype == DType::kFloat32 ? "f32" : "f64", old_variant, us[0], us[1], us[2], us[3], us[0] / us[1],
              picked == small_variant ? "small" : "old", service_us[service_us.size() / 2], error[0],
              *std::max_element(error + 1, error + 1 + cuda::kLombScargleSmallVariants));
  std::fflush(stdout);
  CHECK_CUDA(cudaFree(result));
}

void RunSmallCases() {
  CHECK_CUDA(cudaSetDevice(g_device));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int sm_count = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, g_device));
  std::printf("B x N x M (samples N, frequencies M on a grid), %d SMs; us: median launch (memset + kernels)\n",
              sm_count);
  std::printf("small us: policies 0 (LaunchLombScargle's: 8 warps x 32 frequencies), 1 (4 warps), 2 (8 warps x 64);\n"
              "speedup: old / small 0; backend: ctx.compute_time us of what LaunchLombScargle picks\n");
  std::printf("%-23s  %-4s  %-3s %7s  %7s %7s %7s  %7s  %-5s %7s   %-7s  %-7s\n", "B x N x M", "type", "old",
              "old us", "small 0", "1", "2", "speedup", "picks", "backend", "err old", "err small");
  struct Shape3 {
    int64_t batch, samples, frequencies;
  };
  // The bench's request, its neighbours, and three past the rule (old path kept): more
  // results than sm_count x 1024, and more than 2^24 pairs (twice), to place the rule.
  for (const Shape3& c : std::vector<Shape3>{{4, 256, 256}, {1, 256, 64}, {16, 1024, 1024}, {64, 256, 256},
                                             {256, 256, 1024}, {1, 4096, 16384}, {100, 3000, 1000}}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      RunSmall(c.batch, c.samples, c.frequencies, dtype, stream, sm_count);
    }
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
}

int Main(int argc, char** argv) {
  bool quick = false, small = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    quick |= std::strcmp(argv[i], "--quick") == 0;
    small |= std::strcmp(argv[i], "--small") == 0;
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
  if (small) {
    RunSmallCases();
    return 0;
  }
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
