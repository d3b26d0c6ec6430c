// The kernel registry and warm-up of all operations, the device's DRAM rate the
// launch policies key on, and a deterministic random fill used by the benchmark.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

struct FillPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void __launch_bounds__(FillPolicy::kThreads, FillPolicy::kMinBlocksPerSm)
    FillUniformKernel(T* data, int64_t n, double lo, double span, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double u = static_cast<double>(SplitMix64(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull)) >> 11) *
                     0x1.0p-53;
    data[i] = static_cast<T>(lo + span * u);
  }
}

}  // namespace

cudaError_t LaunchFillUniform(DType dtype, void* data, int64_t n, double lo, double hi,
                              uint64_t seed, const LaunchEnv& env) {
  GC_REQUIRE(n >= 0);
  if (n == 0) return cudaSuccess;
  GC_REQUIRE(data != nullptr);
  const unsigned grid = GridFor(CeilDiv(n, FillPolicy::kThreads), env.sm_count, FillPolicy::kMinBlocksPerSm * 2);
  if (dtype == DType::kFloat32) {
    FillUniformKernel<float><<<grid, FillPolicy::kThreads, 0, env.stream>>>(static_cast<float*>(data), n, lo, hi - lo, seed);
  } else {
    FillUniformKernel<double><<<grid, FillPolicy::kThreads, 0, env.stream>>>(static_cast<double*>(data), n, lo, hi - lo, seed);
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

cudaError_t DramBytesPerSmCycle(double* bytes) {
  static std::vector<std::atomic<double>> known = [] {  // 0: not queried yet
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    return std::vector<std::atomic<double>>(static_cast<size_t>(devices));
  }();
  int device = 0;
  GC_TRY(cudaGetDevice(&device));
  const bool remembered = device >= 0 && static_cast<size_t>(device) < known.size();
  if (remembered) {
    *bytes = known[device].load(std::memory_order_relaxed);
    if (*bytes > 0) return cudaSuccess;
  }
  int memory_khz = 0, bus_bits = 0, sm_khz = 0, sms = 0;
  GC_TRY(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device));
  GC_TRY(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  GC_TRY(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
  GC_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  *bytes = 2.0 * memory_khz * (bus_bits / 8.0) / (static_cast<double>(sm_khz) * sms);
  if (remembered) known[device].store(*bytes, std::memory_order_relaxed);
  return cudaSuccess;
}

cudaError_t WideDram(bool* wide) {
  double bytes = 0;
  GC_TRY(DramBytesPerSmCycle(&bytes));
  *wide = bytes >= kWideDramBytesPerSmCycle;
  return cudaSuccess;
}

void ListKernels(std::vector<KernelEntry>& out) {
  ListDiscountProductKernels(out);
  ListHaversineKernels(out);
  ListNormalizeKernels(out);
  ListLombScargleKernels(out);
  ListLombScargleNufftKernels(out);
  ListLombScargleRaggedKernels(out);
  ListValueCheckKernels(out);
  out.push_back({"support.fill_uniform<f32>", (const void*)&FillUniformKernel<float>});
  out.push_back({"support.fill_uniform<f64>", (const void*)&FillUniformKernel<double>});
}

cudaError_t WarmupKernels(const LaunchEnv& env) {
  GC_TRY(WarmupDiscountProduct(env));
  GC_TRY(WarmupHaversine(env));
  GC_TRY(WarmupNormalize(env));
  GC_TRY(WarmupLombScargle(env));
  GC_TRY(WarmupValueCheck(env));
  Scratch s;
  GC_TRY(s.Allocate(64 * sizeof(double), env));
  GC_TRY(LaunchFillUniform(DType::kFloat32, s.as<void>(), 64, 0.0, 1.0, 1, env));
  GC_TRY(LaunchFillUniform(DType::kFloat64, s.as<void>(), 32, 0.0, 1.0, 1, env));
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
