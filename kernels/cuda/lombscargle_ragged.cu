// Ragged Lomb-Scargle batches (row_offsets) on the GPU: the rows are gathered into
// a rectangular (B, N_max) batch whose padding has weight 0, so that the direct and
// NUFFT launches run unchanged; what depends on a row's own N is done here:
//
//   RaggedGatherKernel<T>: one block per row; x, y - mean(y) (precenter: the row's
//     plain mean, as SciPy), and the weights (1 where none are given), zeros past the row;
//   RowScaleKernel<T>: "power" output is scaled by N / 4: by N_b / N_max per row after.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

struct RaggedPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSm = 8;
};

template <typename T>
__global__ void __launch_bounds__(RaggedPolicy::kThreads)
    RaggedGatherKernel(const T* x, const T* y, const T* w, const int64_t* offsets, int64_t batch,
                       int64_t padded, bool precenter, T* x_out, T* y_out, T* w_out) {
  using BlockReduce = cub::BlockReduce<double, RaggedPolicy::kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce;
  __shared__ double mean;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const int64_t start = offsets[b], length = offsets[b + 1] - start;
    double sum = 0;
    for (int64_t j = threadIdx.x; precenter && j < length; j += blockDim.x) {
      sum += static_cast<double>(y[start + j]);
    }
    const double total = BlockReduce(reduce).Sum(sum);
    if (threadIdx.x == 0) mean = precenter ? total / static_cast<double>(length) : 0.0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < padded; j += blockDim.x) {
      const bool in = j < length;
      x_out[b * padded + j] = in ? x[start + j] : T(0);
      y_out[b * padded + j] = in ? static_cast<T>(static_cast<double>(y[start + j]) - mean) : T(0);
      w_out[b * padded + j] = in ? (w != nullptr ? w[start + j] : T(1)) : T(0);
    }
    __syncthreads();  // `mean` is read before the next row writes it
  }
}

template <typename T>
__global__ void __launch_bounds__(RaggedPolicy::kThreads)
    RowScaleKernel(T* out, int64_t batch, int64_t m, const int64_t* offsets, int64_t padded) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch * m;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / m;
    out[i] = static_cast<T>(static_cast<double>(out[i]) *
                            (static_cast<double>(offsets[b + 1] - offsets[b]) / static_cast<double>(padded)));
  }
}

template <typename T>
cudaError_t GatherT(const LombScargleRaggedArgs& r, const LaunchEnv& env) {
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(r.batch, 65535));
  RaggedGatherKernel<T><<<blocks, RaggedPolicy::kThreads, 0, env.stream>>>(
      static_cast<const T*>(r.x), static_cast<const T*>(r.y), static_cast<const T*>(r.weights),
      r.offsets, r.batch, r.padded, r.precenter, static_cast<T*>(r.x_out), static_cast<T*>(r.y_out),
      static_cast<T*>(r.weights_out));
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
cudaError_t ScaleT(const LombScargleRaggedArgs& r, void* out, int64_t m, const LaunchEnv& env) {
  const unsigned blocks = GridFor(CeilDiv(r.batch * m, RaggedPolicy::kThreads), env.sm_count,
                                  RaggedPolicy::kBlocksPerSm);
  RowScaleKernel<T><<<blocks, RaggedPolicy::kThreads, 0, env.stream>>>(static_cast<T*>(out), r.batch,
                                                                       m, r.offsets, r.padded);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchLombScargleRaggedGather(DType dtype, const LombScargleRaggedArgs& r,
                                          const LaunchEnv& env) {
  GC_REQUIRE(r.x != nullptr && r.y != nullptr && r.offsets != nullptr && r.batch >= 1 && r.padded >= 1);
  GC_REQUIRE(r.x_out != nullptr && r.y_out != nullptr && r.weights_out != nullptr);
  return dtype == DType::kFloat32 ? GatherT<float>(r, env) : GatherT<double>(r, env);
}

cudaError_t LaunchLombScargleRaggedScale(DType dtype, const LombScargleRaggedArgs& r, void* out,
                                         int64_t m, const LaunchEnv& env) {
  GC_REQUIRE(out != nullptr && r.offsets != nullptr && m >= 1);
  return dtype == DType::kFloat32 ? ScaleT<float>(r, out, m, env) : ScaleT<double>(r, out, m, env);
}

void ListLombScargleRaggedKernels(std::vector<KernelEntry>& out) {
  out.push_back({"lombscargle.ragged_gather<f32>", (const void*)&RaggedGatherKernel<float>});
  out.push_back({"lombscargle.ragged_gather<f64>", (const void*)&RaggedGatherKernel<double>});
  out.push_back({"lombscargle.row_scale<f32>", (const void*)&RowScaleKernel<float>});
  out.push_back({"lombscargle.row_scale<f64>", (const void*)&RowScaleKernel<double>});
}

}  // namespace gpucompute::cuda
