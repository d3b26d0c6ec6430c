// The direct Lomb-Scargle periodogram's launch policies (lombscargle.cu's PolicyFor picks
// one per dtype and size; dev/cuda's lombscargle_candidates.cu forces any by index),
// each with the shape where it won, and the costs PolicyFor compares them by.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"

namespace gpucompute::cuda {
namespace {

// float32 on a grid with blocks for every SM twice: 8 frequencies a thread, 2 sincos + 7 rotations per 8 pairs.
// H200, 2^10 x 2^20 f32 grid: 0.669 ms vs 4 a thread's 0.784.
struct PeriodogramF32Wide {
  using Table = lombscargle::NoTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;  // ~90 registers, no spills
  static constexpr int kFreqsPerThread = 8;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;  // samples staged per shared-memory tile
};
// float32 on fewer frequencies: 4 a thread, twice the blocks of PeriodogramF32Wide.
// Taken where 8 a thread would leave an SM fewer than two blocks (every device).
struct PeriodogramF32 : PeriodogramF32Wide {
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kFreqsPerThread = 4;
};
// float64, 4 frequencies a thread with the 512-angle table: explicit frequencies where 4 fill the last wave best.
// H200, 2^10 x 2^20 f64: 2.37 ms vs 2 a thread's 3.86.
struct PeriodogramF64 {
  using Table = lombscargle::ConflictFreeTable;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;  // <= 128 registers
  static constexpr int kFreqsPerThread = 4;
  static constexpr int kInnerUnroll = 1;
  static constexpr int kTile = 256;
};
// float64 on a grid with blocks for every SM twice: 8 frequencies a thread on 128-thread blocks.
// H100, 2^10 x 2^20 f64 grid: 1.29 ms vs 4 a thread's 1.59.
struct PeriodogramF64Wide : PeriodogramF64 {
  static constexpr int kThreads = 128;
  static constexpr int kFreqsPerThread = 8;
  static constexpr int kTile = 128;
};
// float64, 3 a thread: explicit frequencies where 3 fill the last wave best (M = 1e6 makes 977 blocks of 4 for 264 resident).
struct PeriodogramF64Narrow : PeriodogramF64 {
  static constexpr int kFreqsPerThread = 3;
};
// float64, 5 a thread with the 2048-angle table in 2 copies: explicit frequencies where 5 fill the last wave best, and on a tie.
struct PeriodogramF64Deep : PeriodogramF64 {
  using Table = lombscargle::FinerTable;
  static constexpr int kFreqsPerThread = 5;
};

// How many units of one tile of pairs Policy takes: (waves rounded up) x (frequencies
// per thread), so the policy whose last wave of blocks is fullest costs least.
template <typename Policy>
int64_t WaveCost(const LombScargleArgs& a, const LaunchEnv& env) {
  const int64_t blocks = CeilDiv(a.frequencies, int64_t{Policy::kThreads} * Policy::kFreqsPerThread) * a.batch;
  return CeilDiv(blocks, int64_t{env.sm_count} * Policy::kMinBlocksPerSm) * Policy::kFreqsPerThread;
}

template <typename Policy>
bool FillsEverySmTwice(const LombScargleArgs& a, const LaunchEnv& env) {
  return CeilDiv(a.frequencies, int64_t{Policy::kThreads} * Policy::kFreqsPerThread) * a.batch >=
         2 * int64_t{env.sm_count};
}

}  // namespace
}  // namespace gpucompute::cuda
