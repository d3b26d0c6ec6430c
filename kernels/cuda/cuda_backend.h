// The CUDA backend: device-resident arrays in a stream-ordered memory pool per
// device, host copies through a pinned staging pool, the four operations as
// ahead-of-time compiled kernels, warmed at construction. See kernels/backend.h.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace gpucompute {

// Picks the devices (options.cuda_devices, or every visible one with compute
// capability >= 8.0), creates streams, memory pools and the pinned staging pool,
// loads every kernel and runs each once per device and dtype. Returns UNAVAILABLE
// when no device is usable (the factory then falls back to the CPU backend) and
// INVALID_ARGUMENT when options.cuda_devices names a device that does not exist.
//
// Device numbers: Array::device(), Allocate()'s `device` and PickDevice() are CUDA
// ordinals (the N of "cuda:N"), not indexes into Devices().
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options);

}  // namespace gpucompute
