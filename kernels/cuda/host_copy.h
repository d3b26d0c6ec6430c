// Host <-> device copies of the CUDA backend. Pageable host memory goes through one
// pinned staging pool shared by every device, double buffered so that the CPU fills
// (or drains) one slot while the DMA engine works on the other; host memory that is
// already pinned is copied directly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/array.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/device.h"

namespace gpucompute::cuda {

class HostCopies {
 public:
  // A staging pool of `staging_bytes` (at least 128 KiB). The calling thread's device
  // must be current.
  static absl::StatusOr<std::unique_ptr<HostCopies>> Create(uint64_t staging_bytes);

  // Synchronous copies between host memory and an array on `d` (checked with
  // CheckCopyBounds), on one of the device's copy streams.
  absl::Status ToArray(DeviceState& d, const void* src, size_t offset, size_t bytes, Array& dst);
  absl::Status FromArray(DeviceState& d, const Array& src, size_t offset, size_t bytes, void* dst);

  // Synchronous copies on stream `s` of the current device.
  cudaError_t HostToDevice(void* dst, const void* src, size_t bytes, cudaStream_t s);
  cudaError_t DeviceToHost(void* dst, const void* src, size_t bytes, cudaStream_t s);

  // One staging-chunk-sized round trip through a fresh array of the device, which
  // warms every copy path; the array (`pool_prewarm_bytes`, capped at a quarter of the
  // device's memory) leaves its memory cached in the pool when it is dropped.
  absl::Status WarmUp(const std::shared_ptr<DeviceState>& d, uint64_t pool_prewarm_bytes);

  uint64_t staging_bytes() const { return staging_->total_bytes(); }

 private:
  explicit HostCopies(std::unique_ptr<StagingPool> staging) : staging_(std::move(staging)) {}

  // Runs `copy(lease)` on one of the copy streams of `d`; `what` names it in errors.
  template <typename Copy>
  absl::Status OnCopyStream(DeviceState& d, size_t bytes, absl::string_view what, Copy copy);

  std::unique_ptr<StagingPool> staging_;
};

}  // namespace gpucompute::cuda
