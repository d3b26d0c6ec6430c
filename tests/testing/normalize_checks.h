// The checks of a normalize launcher against the CPU backend in float64, shared by
// tests/gpu_kernels_test.cc (the shipped LaunchNormalize) and dev/cuda's
// gpu_kernel_variants_test (every candidate path): pointers off 16-byte alignment,
// poisoned outputs that must all be overwritten, and zero rows, which are reported and
// never divided by. Header-only, for targets built with CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cuda/launchers.h"
#include "tests/testing/arrays.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/tensors.h"

namespace gpucompute::test {

// A launcher under test (LaunchNormalize's signature) and its name in failure traces.
struct NormalizeLauncher {
  std::string name;
  std::function<cudaError_t(DType, const void*, void*, int64_t, int64_t, NormKind, cuda::NormalizeResult*,
                            const cuda::LaunchEnv&)>
      launch;
};

// Runs one launcher on x (rows x cols) and returns the device's result struct and output.
template <typename T>
void RunNormalize(const NormalizeLauncher& launcher, const std::vector<T>& x, int64_t rows, int64_t cols,
                  NormKind norm, int in_offset, int out_offset, cuda::NormalizeResult* host_result,
                  std::vector<T>* out) {
  const int64_t n = rows * cols;
  DeviceBuffer<T> in(n, in_offset), o(n, out_offset);
  DeviceBuffer<cuda::NormalizeResult> res(1, 0);
  ASSERT_NE(in.p, nullptr);
  ASSERT_NE(o.p, nullptr);
  in.Upload(x);
  ASSERT_CUDA(launcher.launch(kDType<T>, in.p, o.p, rows, cols, norm, res.p, Env()));
  ASSERT_CUDA(cudaDeviceSynchronize());
  *host_result = res.Download(1)[0];
  *out = o.Download(n);
}

// Every norm of a rows x cols array, aligned and with either pointer one element off.
template <typename T>
void CheckNormalize(std::span<const NormalizeLauncher> launchers, int64_t rows, int64_t cols) {
  const uint64_t seed = FreshSeed();
  const Shape shape = {rows, cols};
  for (NormKind norm : kAllNorms) {
    const std::vector<T> x = Uniform<T>(rows * cols, norm == NormKind::kSum ? 0.1 : -1.0, 1.0, seed);
    OpContext ctx;
    auto ref = Poisoned(*Cpu(), kDType<T>, shape);
    ASSERT_TRUE(Cpu()->Normalize(*Put(*Cpu(), shape, x), norm, *ref, ctx).ok());
    const std::vector<double> want = ToDoubles(Read<T>(*Cpu(), *ref));
    for (const NormalizeLauncher& launcher : launchers) {
      // Aligned, input off by one element, output off by one element.
      for (const auto [in_off, out_off] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
        SCOPED_TRACE(absl::StrCat(rows, " x ", cols, sizeof(T) == 4 ? " f32" : " f64", " norm ",
                                  static_cast<int>(norm), " ", launcher.name, " offsets ", in_off, "/", out_off,
                                  " seed ", seed));
        cuda::NormalizeResult result{};
        std::vector<T> got;
        RunNormalize(launcher, x, rows, cols, norm, in_off, out_off, &result, &got);
        ASSERT_EQ(result.bad_row, cuda::kNoIndex);
        for (T g : got) ASSERT_TRUE(std::isfinite(g)) << "an output element was left unwritten";
        ExpectRelativeL2(ToDoubles(got), want, sizeof(T) == 4 ? 1e-6 : 1e-14);
      }
    }
  }
}

// A zero row is never divided by: the lowest bad row is reported, the others are
// normalized (rows `first` and `first` + 2 are zero).
template <typename T>
void CheckBadRows(std::span<const NormalizeLauncher> launchers, int64_t cols, int64_t rows = 7, int64_t first = 3) {
  std::vector<T> x = Uniform<T>(rows * cols, 0.5, 1.5, FreshSeed());
  for (int64_t r : {first, first + 2}) std::fill(x.begin() + r * cols, x.begin() + (r + 1) * cols, T(0));
  for (NormKind norm : kAllNorms) {
    for (const NormalizeLauncher& launcher : launchers) {
      SCOPED_TRACE(absl::StrCat(cols, " cols", sizeof(T) == 4 ? " f32" : " f64", " norm ", static_cast<int>(norm),
                                " ", launcher.name));
      cuda::NormalizeResult result{};
      std::vector<T> got;
      RunNormalize(launcher, x, rows, cols, norm, 0, 0, &result, &got);
      EXPECT_EQ(result.bad_row, static_cast<unsigned long long>(first));
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_TRUE(std::isfinite(got[c])) << "row 0 was not normalized";
        ASSERT_TRUE(std::isfinite(got[(rows - 1) * cols + c])) << "the last row was not normalized";
        ASSERT_TRUE(std::isnan(got[first * cols + c])) << "the zero row was written";
      }
    }
  }
}

// Row lengths around every switch of the policy (normalize_plan.cuh): a lane a row in
// tiles (<= 12 / 10 columns; past 12 float32 rows go to the lane groups), 4-lane groups
// and tiles of 4 lanes a row (<= 32 columns), the register rows of the lane groups (32 /
// 64 / 128 / 256 columns for groups of 4 / 8 / 16 / 32), tiles of several rows (a row <=
// 4 KiB: 1024 / 512 columns) and of one row (> 32 KiB: 8192 / 4096), the shared-memory
// limit (~57848 / 28924 columns on sm_90, ~41k / 20.7k on sm_80, ~24.5k / 12.2k on
// sm_86/89), then `long_cols` (two rows each: the clusters, the TMA clusters, the chunks
// past them), several tiles of 2048 rows and a partial one, and many rows of chunks.
inline void CheckNormalizePolicySwitches(std::span<const NormalizeLauncher> launchers,
                                         std::initializer_list<int64_t> long_cols) {
  for (int64_t cols :
       {1, 2, 3, 4, 5, 10, 11, 12, 13, 31, 32, 33, 64, 65, 100, 128, 129, 256, 257, 1023, 1024, 1025}) {
    CheckNormalize<float>(launchers, 301, cols);
    CheckNormalize<double>(launchers, 301, cols);
  }
  for (int64_t cols : {511, 512, 513, 4095, 4096, 4097, 8191, 8192, 8193}) {
    CheckNormalize<float>(launchers, 13, cols);
    CheckNormalize<double>(launchers, 13, cols);
  }
  for (int64_t cols : {12287, 12289, 20700, 24577, 28924, 28925, 41471, 41473, 57848, 57849, 65537}) {
    CheckNormalize<float>(launchers, 3, cols);
    CheckNormalize<double>(launchers, 3, cols);
  }
  for (int64_t cols : long_cols) {
    CheckNormalize<float>(launchers, 2, cols);
    CheckNormalize<double>(launchers, 2, cols);
  }
  CheckNormalize<float>(launchers, 9000, 7);
  // Many rows of chunks (one launch each for the reduction and the scaling; for the
  // pipeline, reductions and scalings interleaved: more chunks than the lag).
  CheckNormalize<float>(launchers, 100, 65537);
  CheckNormalize<double>(launchers, 60, 65537);
}

}  // namespace gpucompute::test
