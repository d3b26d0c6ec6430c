// How the CUDA backend runs one operation: on a compute stream lent by the device,
// with stream-ordered scratch memory, the launch timed with CUDA events, and the
// stream drained before it is lent again. Each operation supplies its steps.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/host_copy.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {

// Scratch device memory of one operation, freed on its stream before the stream is
// lent again.
class OpScratch {
 public:
  OpScratch(cudaStream_t s, cudaMemPool_t pool) : stream_(s), pool_(pool) {}
  OpScratch(const OpScratch&) = delete;
  OpScratch& operator=(const OpScratch&) = delete;
  ~OpScratch();
  cudaError_t Allocate(size_t bytes, void** out);

 private:
  cudaStream_t stream_;
  cudaMemPool_t pool_;
  std::vector<void*> ptrs_;
};

// What the steps of an operation get.
struct OpEnv {
  LaunchEnv launch;
  void* small = nullptr;  // pinned host bytes of this stream (StreamPool::kSmallPinnedBytes)
  OpScratch* scratch = nullptr;
  HostCopies* copies = nullptr;
};

// The steps of one operation on one lent stream.
struct OpSteps {
  std::function<cudaError_t(const OpEnv&)> prepare;   // untimed: scratch, request constants
  std::function<cudaError_t(const OpEnv&)> launch;    // timed with CUDA events
  std::function<cudaError_t(const OpEnv&)> readback;  // small device->pinned copies
  std::function<absl::Status(const OpEnv&)> finish;   // after the stream completed
};

// Runs `steps` of operation `op` on `d` and sets ctx.compute_time to the launch's
// event time. CANCELLED when ctx is cancelled before the launch; a failed CUDA call
// fails the device (DeviceState::Fail).
absl::Status RunOp(DeviceState& d, HostCopies& copies, absl::string_view op, OpContext& ctx,
                   const OpSteps& steps);

// An operation with nothing to compute (an empty output): CANCELLED when ctx is
// cancelled, else zero compute time.
absl::Status NoWork(OpContext& ctx);

// `bytes` of host memory to new scratch memory of the operation, in stream order:
// through the stream's own pinned bytes when they fit, else through the staging pool.
cudaError_t StageToScratch(const void* host, size_t bytes, void** device, const OpEnv& env);

}  // namespace gpucompute::cuda
