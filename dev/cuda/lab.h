// What the lab programs share: a device, event timing (the median of repeated launches
// after warm-up, kernels only), device arrays filled on the device, and the error of a
// result against a float64 reference.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/launchers.h"
#include "kernels/dtype.h"

#define LAB_CHECK(expr)                                                                      \
  do {                                                                                       \
    const cudaError_t _e = (expr);                                                           \
    if (_e != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace gpucompute::lab {

struct Device {
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;  // kept mapped, as the backend keeps its pool
  int sm_count = 1;
  int reps = 20;

  // False where there is no device.
  bool Open() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
    LAB_CHECK(cudaSetDevice(0));
    LAB_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    LAB_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t keep = UINT64_MAX;
    LAB_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    cudaDeviceProp prop{};
    LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
    sm_count = prop.multiProcessorCount;
    std::printf("device: %s, cc %d.%d, %d SMs\n", prop.name, prop.major, prop.minor, sm_count);
    return true;
  }
  // Open, reps from the command line's --reps N (at least 5). False, said on stdout,
  // where there is no device: the program has nothing to time.
  bool OpenWithArgs(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(5, std::atoi(argv[++i]));
    }
    if (Open()) return true;
    std::printf("no CUDA device: nothing to time\n");
    return false;
  }
  cuda::LaunchEnv Env() const { return cuda::LaunchEnv{stream, pool, sm_count}; }

  // Median milliseconds of `launch` between two events, after 3 warm-ups.
  double Time(const std::function<cudaError_t()>& launch) const {
    cudaEvent_t e0, e1;
    LAB_CHECK(cudaEventCreate(&e0));
    LAB_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) LAB_CHECK(launch());
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      LAB_CHECK(cudaEventRecord(e0, stream));
      LAB_CHECK(launch());
      LAB_CHECK(cudaEventRecord(e1, stream));
      LAB_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      LAB_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    LAB_CHECK(cudaEventDestroy(e0));
    LAB_CHECK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

// Device memory of n elements of dtype, uniform in [lo, hi) (or left as allocated).
struct Buffer {
  void* p = nullptr;
  int64_t n = 0;
  DType dtype = DType::kFloat32;
  Buffer(const Device& d, DType t, int64_t count, double lo, double hi, uint64_t seed) : n(count), dtype(t) {
    LAB_CHECK(cudaMalloc(&p, static_cast<size_t>(n) * ElementSize(t) + 16));
    if (hi > lo) LAB_CHECK(cuda::LaunchFillUniform(t, p, n, lo, hi, seed, d.Env()));
    LAB_CHECK(cudaStreamSynchronize(d.stream));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { cudaFree(p); }
  template <typename T = void>
  T* as() const { return static_cast<T*>(p); }
  // The values as float64.
  std::vector<double> Read(int64_t count = -1) const {
    const int64_t m = count < 0 ? n : count;
    std::vector<double> out(m);
    if (dtype == DType::kFloat32) {
      std::vector<float> f(m);
      LAB_CHECK(cudaMemcpy(f.data(), p, m * sizeof(float), cudaMemcpyDeviceToHost));
      std::copy(f.begin(), f.end(), out.begin());
    } else {
      LAB_CHECK(cudaMemcpy(out.data(), p, m * sizeof(double), cudaMemcpyDeviceToHost));
    }
    return out;
  }
};

// The largest |got - want| / max(|want|, floor) over the elements.
inline double MaxRelativeError(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  double worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double e = std::fabs(got[i] - want[i]) / std::max(std::fabs(want[i]), floor);
    worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
  }
  return worst;
}

inline const char* Short(DType t) { return t == DType::kFloat32 ? "f32" : "f64"; }

// One table row: the candidate's median ms, its ratio to the shipped kernel's and its
// error against the float64 reference.
inline void PrintRow(const std::string& shape, const std::string& name, double ms, double shipped_ms, double error) {
  std::printf("  %-30s %-34s %9.4f ms  x%5.2f of shipped  err %.2e%s\n", shape.c_str(), name.c_str(), ms,
              ms / shipped_ms, error, ms < 0.97 * shipped_ms ? "  FASTER THAN SHIPPED" : "");
  std::fflush(stdout);
}

}  // namespace gpucompute::lab
