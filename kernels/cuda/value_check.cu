// The value rules of kernels/preconditions.h (ValueRule) checked on the device,
// for stored buffers whose values the server cannot read on the host: the lowest
// index of an element outside [lowest, highest], NaN, or 0 where the rule says
// non-zero.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

struct ValueCheckPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};

template <typename T>
__global__ void __launch_bounds__(ValueCheckPolicy::kThreads, ValueCheckPolicy::kMinBlocksPerSm)
    FirstBreakingValueKernel(const T* data, int64_t n, ValueBounds bounds,
                             unsigned long long* first) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // In float64: every float32 value converts exactly. NaN fails the comparisons.
    const double v = static_cast<double>(data[i]);
    const bool holds = v >= bounds.lowest && v <= bounds.highest && !(bounds.nonzero && v == 0);
    if (!holds) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

}  // namespace

cudaError_t LaunchFirstBreakingValue(DType dtype, const void* data, int64_t n,
                                     const ValueBounds& bounds, unsigned long long* first,
                                     const LaunchEnv& env) {
  GC_REQUIRE(n >= 0 && first != nullptr);
  GC_TRY(cudaMemsetAsync(first, 0xff, sizeof(*first), env.stream));  // kNoIndex
  if (n == 0) return cudaSuccess;
  GC_REQUIRE(data != nullptr);
  const unsigned grid = GridFor(CeilDiv(n, ValueCheckPolicy::kThreads), env.sm_count,
                                ValueCheckPolicy::kMinBlocksPerSm);
  if (dtype == DType::kFloat32) {
    FirstBreakingValueKernel<float><<<grid, ValueCheckPolicy::kThreads, 0, env.stream>>>(
        static_cast<const float*>(data), n, bounds, first);
  } else {
    FirstBreakingValueKernel<double><<<grid, ValueCheckPolicy::kThreads, 0, env.stream>>>(
        static_cast<const double*>(data), n, bounds, first);
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

cudaError_t WarmupValueCheck(const LaunchEnv& env) {
  Scratch s;
  GC_TRY(s.Allocate(sizeof(double) + sizeof(unsigned long long), env));
  auto* first = reinterpret_cast<unsigned long long*>(s.as<char>() + sizeof(double));
  GC_TRY(cudaMemsetAsync(s.as<void>(), 0, sizeof(double), env.stream));
  const ValueBounds bounds{-1, 1, false};
  GC_TRY(LaunchFirstBreakingValue(DType::kFloat32, s.as<void>(), 1, bounds, first, env));
  GC_TRY(LaunchFirstBreakingValue(DType::kFloat64, s.as<void>(), 1, bounds, first, env));
  return cudaSuccess;
}

void ListValueCheckKernels(std::vector<KernelEntry>& out) {
  out.push_back({"value_check.first_breaking<f32>", (const void*)&FirstBreakingValueKernel<float>});
  out.push_back({"value_check.first_breaking<f64>", (const void*)&FirstBreakingValueKernel<double>});
}

}  // namespace gpucompute::cuda
