// Device-side helpers shared by the operation files: vector types, grid sizing,
// launch checks and stream-ordered scratch memory. Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {

// Launchers assert their preconditions: in debug builds assert() fires; in release
// builds they return cudaErrorInvalidValue (the backend has already validated).
#define GC_REQUIRE(cond)                   \
  do {                                     \
    if (!(cond)) {                         \
      assert(false && #cond);              \
      return cudaErrorInvalidValue;        \
    }                                      \
  } while (0)

// Every launch is followed by this.
#define GC_CHECK_LAUNCH()                                       \
  do {                                                          \
    const cudaError_t _gc_launch_err = cudaGetLastError();      \
    if (_gc_launch_err != cudaSuccess) return _gc_launch_err;   \
  } while (0)

#define GC_TRY(expr)                                \
  do {                                              \
    const cudaError_t _gc_try_err = (expr);         \
    if (_gc_try_err != cudaSuccess) return _gc_try_err; \
  } while (0)

// 16-byte vector of T: float4 or double2.
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  using type = float4;
  static constexpr int kCount = 4;
};
template <>
struct Vec16<double> {
  using type = double2;
  static constexpr int kCount = 2;
};

template <typename V, typename F>
__device__ __forceinline__ V VecMap2(const V& a, const V& b, F f) {
  V r;
  if constexpr (std::is_same_v<V, float4>) {
    r.x = f(a.x, b.x); r.y = f(a.y, b.y); r.z = f(a.z, b.z); r.w = f(a.w, b.w);
  } else {
    r.x = f(a.x, b.x); r.y = f(a.y, b.y);
  }
  return r;
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid for a grid-stride kernel: enough blocks to cover `work_blocks`, at most
// `blocks_per_sm` resident waves on every multiprocessor.
inline unsigned GridFor(int64_t work_blocks, int sm_count, int blocks_per_sm) {
  const int64_t cap = static_cast<int64_t>(std::max(sm_count, 1)) * blocks_per_sm;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(work_blocks, cap)));
}

// Blocks of `threads` threads of `kernel` resident at once on one multiprocessor, for
// grids of exactly full waves. Callers keep it in a function-local static: asked once
// per kernel (the devices of a server are taken to be of one architecture; only grid
// sizes depend on it).
template <typename Kernel>
int ResidentBlocksPerSm(Kernel kernel, int threads) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: fall back to one block
    return 1;
  }
  return std::max(blocks, 1);
}

// Peak DRAM bytes per multiprocessor cycle of the current device (two transfers a
// memory clock): how tight a memory bound is against the issue rate. Queried once a
// device (support.cu): with CUDA 13 the clock-rate queries take ~0.85 ms together.
cudaError_t DramBytesPerSmCycle(double* bytes);
// Devices from this many bytes a cycle (the H200's 18.4, not the H100's 12.8) leave a
// memory-bound kernel fewer issue slots per byte; where the measured winners of the
// two differ, a launch policy keys on it (WideDram).
constexpr double kWideDramBytesPerSmCycle = 16.0;
cudaError_t WideDram(bool* wide);

// Scratch memory of one launch: from the launch's arena where it fits, else
// stream-ordered from the device pool and freed on the same stream.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (pooled_ && ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }
  cudaError_t Allocate(size_t bytes, const LaunchEnv& env) {
    stream_ = env.stream;
    if (bytes == 0) bytes = 16;
    return AllocateScratch(bytes, env, &ptr_, &pooled_);
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool pooled_ = false;
};

// A kernel that may take more than 48 KiB of dynamic shared memory is allowed `limit`
// before each launch (a host-side attribute of the function on the current device, so
// right on every device of the process). Each kernel is always given the same value:
// concurrent launches from several host threads never lower it under one another.
template <typename Kernel>
cudaError_t AllowSharedLimit(Kernel kernel, int64_t limit) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit));
}

}  // namespace gpucompute::cuda
