// The direct Lomb-Scargle periodogram of small problems: the policy and when it runs
// (lombscargle_small.cuh has the kernel and why it splits samples over warps).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_direct.cuh"
#include "kernels/cuda/lombscargle_small.cuh"

namespace gpucompute::cuda::lombscargle {
namespace {

// When LaunchLombScargle takes this path: the default policies give a thread >= 4
// frequencies of one row, so fewer than sm_count * 1024 results (B x M) leave fewer
// threads with work than one block per SM; and at most 2^24 pairs (B x M x N), where
// the default kernels' rotations (fewer sin/cos per pair than here) are not yet worth
// more than the parallelism.
struct SmallProblemRule {
  static constexpr int64_t kResultsPerSm = 1024;
  static constexpr double kMaxPairs = 1 << 24;
};

// 8 warps splitting the samples of 32 frequencies, one a lane: the most blocks per row.
// H100, 4 rows x 256 samples x 256 freqs: 4 x 8 blocks where the default kernel ran 4 (77 us).
template <typename T>
struct SmallPolicy {
  using Table = std::conditional_t<std::is_same_v<T, double>, ConflictFreeTable, NoTable>;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 2;  // float64: 2 x (64 KiB table + 28 KiB) per SM
  static constexpr int kFreqsPerThread = 1;
  static constexpr int kInnerUnroll = 4;
  static constexpr int kTile = 512;
};

template <typename T, bool kWeighted>
void ListSmall(std::vector<KernelEntry>& out, const std::string& t) {
  using P = SmallPolicy<T>;
  const std::string v = kWeighted ? ",weighted" : "";
  out.push_back({"lombscargle.small<" + t + ",floating_mean,grid" + v + ">", (const void*)&SmallPeriodogramKernel<T, P, true, true, kWeighted>});
  out.push_back({"lombscargle.small<" + t + ",floating_mean" + v + ">", (const void*)&SmallPeriodogramKernel<T, P, true, false, kWeighted>});
  out.push_back({"lombscargle.small<" + t + ",grid" + v + ">", (const void*)&SmallPeriodogramKernel<T, P, false, true, kWeighted>});
  out.push_back({"lombscargle.small<" + t + v + ">", (const void*)&SmallPeriodogramKernel<T, P, false, false, kWeighted>});
}

}  // namespace

bool SmallProblem(const LombScargleArgs& a, const LaunchEnv& env) {
  const double results = static_cast<double>(a.batch) * static_cast<double>(a.frequencies);
  return results < static_cast<double>(env.sm_count) * SmallProblemRule::kResultsPerSm &&
         results * static_cast<double>(a.samples) <= SmallProblemRule::kMaxPairs;
}

template <typename T>
cudaError_t LaunchSmall(const LombScargleArgs& a, LombScargleResult* result, const LaunchEnv& env) {
  return LaunchSmallPolicy<T, SmallPolicy<T>>(a, result, env);
}

template <typename T>
void ListSmallKernels(std::vector<KernelEntry>& out, const std::string& t) {
  ListSmall<T, true>(out, t);
  ListSmall<T, false>(out, t);
}

template cudaError_t LaunchSmall<float>(const LombScargleArgs&, LombScargleResult*, const LaunchEnv&);
template cudaError_t LaunchSmall<double>(const LombScargleArgs&, LombScargleResult*, const LaunchEnv&);
template void ListSmallKernels<float>(std::vector<KernelEntry>&, const std::string&);
template void ListSmallKernels<double>(std::vector<KernelEntry>&, const std::string&);

}  // namespace gpucompute::cuda::lombscargle
