// How the CUDA backend runs one operation: on a compute stream lent by the device,
// with stream-ordered scratch memory, the launch timed with CUDA events, and the
// stream drained before it is lent again. Each operation supplies its steps.
// A small request from host bytes (Backend::RunFromHost) is one submission on one
// stream: its arrays and scratch laid out in the stream's own device bytes, its
// inputs copied in through the stream's pinned bytes in one copy, the operation,
// its result copied back there, one wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/host_copy.h"
#include "kernels/cuda/launchers.h"
#include "kernels/memory/host_block_pool.h"

namespace gpucompute {

// One RunFromHost call on one lent stream (OpContext::submission while the
// operation runs): RunOp joins its stream and queues the result's copy to the
// host before its one wait.
struct StreamSubmission {
  cuda::DeviceState* device = nullptr;
  const cuda::StreamPool::Lease* lease = nullptr;
  const Array* out = nullptr;
  void* out_host = nullptr;  // in the stream's pinned io bytes
  // Whether the copy of `out` is queued after the last work that wrote it.
  bool output_queued = false;
  // The stream's device io bytes past the arrays: the operation's scratch.
  cuda::ScratchArena arena;

  // Queues the copy of `out` to out_host behind the stream's work so far.
  cudaError_t QueueOutput();
};

}  // namespace gpucompute

namespace gpucompute::cuda {

// Scratch device memory of one operation, freed on its stream before the stream is
// lent again; in a submission, from the stream's own device bytes where it fits.
class OpScratch {
 public:
  OpScratch(cudaStream_t s, cudaMemPool_t pool, ScratchArena* arena = nullptr)
      : env_{.stream = s, .pool = pool, .arena = arena} {}
  OpScratch(const OpScratch&) = delete;
  OpScratch& operator=(const OpScratch&) = delete;
  ~OpScratch();
  cudaError_t Allocate(size_t bytes, void** out);

 private:
  LaunchEnv env_;            // where scratch comes from
  std::vector<void*> ptrs_;  // from the pool
};

// What the steps of an operation get.
struct OpEnv {
  LaunchEnv launch;
  void* small = nullptr;  // pinned host bytes of this stream (StreamPool::kSmallPinnedBytes)
  OpScratch* scratch = nullptr;
  HostCopies* copies = nullptr;
  // Set when the operation is part of a RunFromHost submission: work that
  // rewrites the output after the launch clears its output_queued.
  StreamSubmission* submission = nullptr;
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

// Whether RunFromHost's inputs and result fit a compute stream's pinned io bytes.
bool FitsOneSubmission(std::span<const HostInput> inputs, DType out_dtype, const Shape& out_shape);

// Backend::RunFromHost as one submission on one compute stream of `d` (the inputs
// and result fit, FitsOneSubmission): the result comes back as a host array in a
// block of `results`.
absl::StatusOr<std::shared_ptr<Array>> RunFromHostOnStream(const std::shared_ptr<DeviceState>& d,
                                                           std::span<const HostInput> inputs,
                                                           DType out_dtype, const Shape& out_shape,
                                                           OpContext& ctx, ArraysRun run,
                                                           HostBlockPool& results);

// An operation with nothing to compute (an empty output): CANCELLED when ctx is
// cancelled, else zero compute time.
absl::Status NoWork(OpContext& ctx);

// `bytes` of host memory to new scratch memory of the operation, in stream order:
// through the stream's own pinned bytes when they fit, else through the staging pool.
cudaError_t StageToScratch(const void* host, size_t bytes, void** device, const OpEnv& env);

}  // namespace gpucompute::cuda
