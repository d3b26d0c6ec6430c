// The CUDA backend's Lomb-Scargle (lombscargle_op.h): operands checked as the CPU
// backend checks them, the method chosen (direct or NUFFT, its cuFFT plan leased),
// a ragged batch gathered into a rectangular one, then one RunOp.
#include "kernels/cuda/lombscargle_op.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/op_runner.h"
#include "kernels/lombscargle_nufft.h"
#include "kernels/preconditions.h"
#include "kernels/shape_rules.h"

namespace gpucompute::cuda {
namespace {

// The CPU backend's weights message for a row the device found bad (re-read to the
// host): the first negative weight, else the sum.
template <typename T>
absl::Status WeightsRowError(const T* w, int64_t row, int64_t samples) {
  GC_ASSIGN_OR_RETURN(const double sum, CheckWeightsRow(w, row, samples));
  return WeightsSumError(row, sum);
}

// EvenlySpaced of a frequency array on the device: a check kernel, then the ends
// (and the first uneven frequency) copied back for the spacing and the message.
absl::StatusOr<EvenFrequencies> EvenlySpacedOnDevice(DeviceState& d, HostCopies& copies,
                                                     const Array& freqs, double tolerance,
                                                     OpContext& ctx) {
  const int64_t m = freqs.size();
  unsigned long long* d_first = nullptr;
  OpSteps steps;
  steps.prepare = [&](const OpEnv& env) {
    return env.scratch->Allocate(sizeof(unsigned long long), reinterpret_cast<void**>(&d_first));
  };
  steps.launch = [&](const OpEnv& env) {
    return LaunchLombScargleEvenCheck(freqs.dtype(), freqs.data(), m, tolerance, d_first,
                                            env.launch);
  };
  steps.readback = [&](const OpEnv& env) {
    return cudaMemcpyAsync(env.small, d_first, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                           env.launch.stream);
  };
  unsigned long long first = kNoIndex;
  steps.finish = [&](const OpEnv& env) {
    first = *static_cast<const unsigned long long*>(env.small);
    return absl::OkStatus();
  };
  GC_RETURN_IF_ERROR(RunOp(d, copies, "LombScargle even check", ctx, steps));
  auto at = [&](int64_t k) -> absl::StatusOr<double> {
    const size_t es = ElementSize(freqs.dtype());
    double f64 = 0;
    float f32 = 0;
    void* host = freqs.dtype() == DType::kFloat32 ? static_cast<void*>(&f32) : &f64;
    GC_RETURN_IF_ERROR(copies.FromArray(d, freqs, static_cast<size_t>(k) * es, es, host));
    return freqs.dtype() == DType::kFloat32 ? static_cast<double>(f32) : f64;
  };
  EvenFrequencies even{0, 0, m};
  GC_ASSIGN_OR_RETURN(even.start, at(0));
  GC_ASSIGN_OR_RETURN(const double last, at(m - 1));
  if (m > 1) even.step = (last - even.start) / static_cast<double>(m - 1);
  if (first == kNoIndex) return even;
  GC_ASSIGN_OR_RETURN(const double bad, at(static_cast<int64_t>(first)));
  return UnevenError(even, static_cast<int64_t>(first), bad, EvenSpacingAllowed(even, tolerance));
}

// A ragged batch's offsets to the device and room for the rectangular batch it
// becomes; points args at that batch.
cudaError_t PrepareRagged(const LombScargleShape& shape, const LombScargleOptions& options,
                                 const Array& x, const Array& y, const Array* weights,
                                 const OpEnv& env, LombScargleRaggedArgs& ragged,
                                 LombScargleArgs& args) {
  void* offsets = nullptr;
  cudaError_t e = StageToScratch(options.row_offsets.data(),
                                       options.row_offsets.size() * sizeof(int64_t), &offsets, env);
  const size_t bytes = static_cast<size_t>(shape.batch * shape.samples) * ElementSize(y.dtype());
  void* padded[3] = {};
  for (void*& p : padded) {
    if (e == cudaSuccess) e = env.scratch->Allocate(bytes, &p);
  }
  if (e != cudaSuccess) return e;
  ragged = {x.data(), y.data(), weights != nullptr ? weights->data() : nullptr,
            static_cast<const int64_t*>(offsets), shape.batch, shape.samples, options.precenter,
            padded[0], padded[1], padded[2]};
  args.x = padded[0];
  args.y = padded[1];
  args.weights = padded[2];
  args.weights_batched = true;
  return cudaSuccess;
}

// Scratch one NUFFT pass may take (its grids, modes and bounds): rows beyond it
// run in further passes.
constexpr size_t kNufftScratchBytes = size_t{1} << 30;

// The launch's view of the NUFFT (kernels/lombscargle_nufft.h).
LombScargleNufftArgs NufftArgs(const LombScargleShape& shape,
                                            const EvenFrequencies& even,
                                            const LombScargleOptions& options) {
  const NufftPlan plan = PlanNufft(shape.frequencies, options.accuracy);
  const NufftQuadrature quadrature = NufftKernelQuadrature(plan);
  LombScargleNufftArgs args;
  args.width = plan.width;
  args.beta = plan.beta;
  args.half = plan.half;
  args.grid = plan.grid;
  args.largest_mode = NufftLargestMode(plan);
  args.f_start = even.start;
  args.f_step = even.step;
  args.sum_error = NufftSumError(plan);
  args.redo_threshold = kNufftRedoFraction * options.accuracy;
  args.nodes = static_cast<int>(quadrature.weight.size());
  for (int q = 0; q < args.nodes; ++q) {
    args.node_weight[q] = quadrature.weight[q];
    args.node_angle[q] = quadrature.angle[q];
  }
  return args;
}

}  // namespace

absl::Status RunLombScargle(DeviceState& d, HostCopies& copies, CufftPlans& fft_plans,
                            const Array& x, const Array& y, const Array* weights,
                            const Array* freqs, const Linspace& grid,
                            const LombScargleOptions& options, Array& out, OpContext& ctx) {
  GC_ASSIGN_OR_RETURN(const LombScargleShape shape,
                      CheckLombScargleArrays(x, y, weights, freqs, grid, out, options));
  GC_RETURN_IF_ERROR(CheckNufftAccuracy(options.accuracy, "accuracy"));
  const DType dtype = y.dtype();
  absl::StatusOr<EvenFrequencies> even = EvenGrid(grid);
  absl::Duration check_time = absl::ZeroDuration();
  if (freqs != nullptr && options.method != LombScargleMethod::kDirect) {
    even = EvenlySpacedOnDevice(d, copies, *freqs, EvenSpacingTolerance(dtype, options.method), ctx);
    if (even.status().code() != absl::StatusCode::kInvalidArgument) GC_RETURN_IF_ERROR(even.status());
    check_time = ctx.compute_time;
  }
  GC_ASSIGN_OR_RETURN(const LombScargleMethod method,
                      ChooseLombScargleMethod(options, shape, even.status()));
  ctx.method = LombScargleMethodName(method);
  LombScargleArgs args;
  args.batch = shape.batch;
  args.samples = shape.samples;
  args.frequencies = shape.frequencies;
  args.x = x.data();
  args.x_batched = shape.x_batched;
  args.y = y.data();
  args.weights = weights != nullptr ? weights->data() : nullptr;
  args.weights_batched = shape.weights_batched;
  args.freqs = freqs != nullptr ? freqs->data() : nullptr;
  args.grid_start = grid.start;
  args.grid_stop = grid.stop;
  // A ragged batch runs as the rectangular one RaggedGather makes (centred already).
  args.precenter = options.precenter && !shape.ragged;
  args.normalize = options.normalize;
  args.amplitude = options.amplitude;
  args.floating_mean = options.floating_mean;
  args.out = out.data();
  LombScargleResult* d_result = nullptr;
  std::optional<CufftPlans::Lease> fft;
  LombScargleNufftArgs nufft;
  void* nufft_scratch = nullptr;
  if (method == LombScargleMethod::kNufft) {
    nufft = NufftArgs(shape, *even, options);
    // As many rows per pass as fit kNufftScratchBytes (at least one).
    const size_t per_row = LombScargleNufftScratchBytes(args, nufft) +
                           3 * sizeof(double) * 2 * static_cast<size_t>(nufft.grid);
    nufft.chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(kNufftScratchBytes / per_row), 1,
                                           shape.batch);
    ScopedDevice on_device(d.ordinal);
    GC_DEV_TRY(d, on_device.error(), "cudaSetDevice");
    absl::StatusOr<CufftPlans::Lease> lease =
        fft_plans.Acquire({d.ordinal, nufft.grid, 3 * nufft.chunk_rows});
    GC_RETURN_IF_ERROR(lease.status());
    fft.emplace(std::move(*lease));
  }
  OpSteps steps;
  LombScargleRaggedArgs ragged;
  steps.prepare = [&](const OpEnv& env) -> cudaError_t {
    cudaError_t e = env.scratch->Allocate(sizeof(LombScargleResult), reinterpret_cast<void**>(&d_result));
    if (e == cudaSuccess && shape.ragged) e = PrepareRagged(shape, options, x, y, weights, env, ragged, args);
    if (e != cudaSuccess || !fft.has_value()) return e;
    void* work = nullptr;
    e = env.scratch->Allocate(std::max<size_t>(fft->work_bytes(), 1), &work);
    if (e == cudaSuccess) {
      e = env.scratch->Allocate(LombScargleNufftScratchBytes(args, nufft), &nufft_scratch);
    }
    if (e != cudaSuccess) return e;
    if (cufftSetWorkArea(fft->handle(), work) != CUFFT_SUCCESS ||
        cufftSetStream(fft->handle(), env.launch.stream) != CUFFT_SUCCESS) {
      return cudaErrorInvalidValue;
    }
    return cudaSuccess;
  };
  steps.launch = [&](const OpEnv& env) -> cudaError_t {
    if (shape.ragged) {
      const cudaError_t e = LaunchLombScargleRaggedGather(dtype, ragged, env.launch);
      if (e != cudaSuccess) return e;
    }
    const cudaError_t e =
        fft.has_value() ? LaunchLombScargleNufft(dtype, args, nufft, fft->handle(), nufft_scratch,
                                                       d_result, env.launch)
                        : LaunchLombScargle(dtype, args, d_result, env.launch);
    // Only the "power" scale depends on a row's N.
    if (e != cudaSuccess || !shape.ragged || options.normalize || options.amplitude) return e;
    return LaunchLombScargleRaggedScale(dtype, ragged, out.data(), shape.frequencies, env.launch);
  };
  steps.readback = [&](const OpEnv& env) {
    return cudaMemcpyAsync(env.small, d_result, sizeof(LombScargleResult),
                           cudaMemcpyDeviceToHost, env.launch.stream);
  };
  steps.finish = [&](const OpEnv& env) -> absl::Status {
    const auto* r = static_cast<const LombScargleResult*>(env.small);
    if (r->bad_batch == kNoIndex) return absl::OkStatus();
    // Error path: read the offending weights row back for the CPU backend's message.
    const int64_t row = shape.weights_batched ? static_cast<int64_t>(r->bad_batch) : 0;
    const int64_t start = shape.ragged ? options.row_offsets[row] : row * shape.samples;
    const int64_t length = shape.ragged ? options.row_offsets[row + 1] - start : shape.samples;
    const size_t es = ElementSize(dtype);
    std::vector<char> host(static_cast<size_t>(length) * es);
    GC_DEV_TRY(d, env.copies->DeviceToHost(host.data(), static_cast<const char*>(weights->data()) + start * es,
                                            host.size(), env.launch.stream), "LombScargle weights");
    if (dtype == DType::kFloat32) {
      return WeightsRowError(reinterpret_cast<const float*>(host.data()), row, length);
    }
    return WeightsRowError(reinterpret_cast<const double*>(host.data()), row, length);
  };
  GC_RETURN_IF_ERROR(RunOp(d, copies, "LombScargle", ctx, steps));
  ctx.compute_time += check_time;
  return absl::OkStatus();
}

}  // namespace gpucompute::cuda
