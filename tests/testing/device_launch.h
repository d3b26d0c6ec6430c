// What the GPU tests that call launchers directly share (tests/gpu_kernels_test.cc and
// dev/cuda's gpu_*_variants_test.cc): the launch environment of the current device,
// poisoned device memory at an offset, ASSERT_CUDA, and the CPU backend as the
// float64 reference. Header-only, for targets built with CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/launchers.h"
#include "kernels/dtype.h"
#include "tests/testing/arrays.h"

#define ASSERT_CUDA(expr)                                                \
  do {                                                                   \
    const cudaError_t _e = (expr);                                       \
    ASSERT_EQ(_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(_e); \
  } while (0)

namespace gpucompute::test {

// The CPU backend, the reference the launchers' results are compared with.
inline Backend* Cpu() {
  static std::unique_ptr<Backend> backend = CreateCpuBackend(0);
  return backend.get();
}

// A launch on the default stream of the current device, with its SM count.
inline cuda::LaunchEnv Env() {
  int device = 0, sms = 1;
  (void)cudaGetDevice(&device);
  (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return cuda::LaunchEnv{nullptr, nullptr, sms};
}

// Device memory for n elements of T at `offset` elements past a 256-byte boundary,
// every byte 0xff (NaN) until written.
template <typename T>
struct DeviceBuffer {
  void* base = nullptr;
  T* p = nullptr;
  DeviceBuffer(int64_t n, int offset) {
    if (cudaMalloc(&base, (n + offset + 1) * sizeof(T)) != cudaSuccess) return;
    p = static_cast<T*>(base) + offset;
    (void)cudaMemset(base, 0xff, (n + offset + 1) * sizeof(T));
  }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void Upload(const std::vector<T>& v) { (void)cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> Download(int64_t n) const {
    std::vector<T> v(n);
    (void)cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

template <typename T>
constexpr DType kDType = DTypeOf<T>();

constexpr NormKind kAllNorms[] = {NormKind::kSum, NormKind::kL1, NormKind::kL2, NormKind::kMaxAbs};

}  // namespace gpucompute::test
