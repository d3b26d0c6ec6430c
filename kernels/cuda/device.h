// The lifecycle of the CUDA backend's devices: per-device state (memory pool,
// allocation stream, compute and copy stream pools, health), opening and warming a
// device, device arrays, and the set of devices one backend serves.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/array.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cufft_plans.h"
#include "kernels/cuda/launchers.h"
#include "kernels/dtype.h"

namespace gpucompute::cuda {

struct DeviceState {
  DeviceState() = default;
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;
  ~DeviceState();

  // Marks the device unhealthy (once) and logs why.
  void MarkUnhealthy(cudaError_t e, absl::string_view what);
  // UNAVAILABLE, naming the sticky error that made the device unhealthy.
  absl::Status Unavailable() const;
  // A failed CUDA call: marks the device unhealthy when the error is sticky.
  absl::Status Fail(cudaError_t e, absl::string_view what);

  int ordinal = 0;
  std::string name;  // "cuda:N"
  std::string description;
  uint64_t memory_bytes = 0;
  int sm_count = 1;
  cudaMemPool_t pool = nullptr;
  // Allocations and frees, each on a lent stream: one shared stream would make
  // every allocation wait for all the others.
  std::unique_ptr<StreamPool> alloc;
  std::unique_ptr<StreamPool> compute;
  std::unique_ptr<StreamPool> copy;
  std::atomic<bool> healthy{true};
  std::atomic<uint64_t> in_flight{0};

 private:
  mutable std::mutex mu_;
  std::string sticky_error_;  // why the device is unhealthy
};

// Returns dev.Fail(...) from the enclosing function when `expr` (a cudaError_t) failed.
#define GC_DEV_TRY(dev, expr, what)                                \
  do {                                                             \
    const cudaError_t gc_dev_err_ = (expr);                        \
    if (gc_dev_err_ != cudaSuccess) return (dev).Fail(gc_dev_err_, what); \
  } while (0)

// Counts one call as queued on a device (Stats().queued_ops, PickDevice) while in scope.
class InFlight {
 public:
  explicit InFlight(DeviceState& d) : d_(d) { d_.in_flight.fetch_add(1, std::memory_order_relaxed); }
  ~InFlight() { d_.in_flight.fetch_sub(1, std::memory_order_relaxed); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  DeviceState& d_;
};

// The ordinals to open: `requested`, or every visible device when it is empty.
// UNAVAILABLE when CUDA sees no device; INVALID_ARGUMENT for an unknown or repeated one.
absl::StatusOr<std::vector<int>> ChooseDevices(const std::vector<int>& requested);

// Creates the memory pool (freed memory stays cached up to
// `pool_release_threshold_bytes`, 0: all of it) and the streams of one device.
// FAILED_PRECONDITION below compute capability 8.0.
absl::StatusOr<std::shared_ptr<DeviceState>> OpenDevice(int ordinal,
                                                        uint64_t pool_release_threshold_bytes);

// Loads every kernel on the device and runs each once on tiny inputs.
absl::Status WarmKernels(DeviceState& d, const std::vector<KernelEntry>& kernels);

// Makes and runs once, into `plans`, the cuFFT plans of one-row Lomb-Scargle NUFFTs of
// kWarmFftFrequencies at the default accuracy, so that such a first request pays
// neither the plan nor cuFFT's set-up.
inline constexpr int64_t kWarmFftFrequencies[] = {1 << 16, 1 << 18, 1 << 20};
absl::Status WarmFftPlans(DeviceState& d, CufftPlans& plans);

// Pinned bytes of each compute stream for a whole small request (RunFromHost).
inline constexpr size_t kHostIoBytes = size_t{1} << 20;
// Host memory RunFromHost's results leave behind for the next ones (HostBlockPool): a
// fresh block past the server's mmap threshold faults as it is first written.
// H200, a 256 KiB normalize from host bytes: p50 70-81 us vs 169-220 with fresh blocks.
inline constexpr size_t kCachedResultBytes = size_t{16} << 20;

// An array in the device's pool; RESOURCE_EXHAUSTED when it does not fit.
absl::StatusOr<std::shared_ptr<Array>> AllocateArray(const std::shared_ptr<DeviceState>& dev,
                                                     DType dtype, Shape shape);
// The same in stream order on `stream` (no wait): usable on `stream` at once, on
// other streams once `stream` has passed the allocation.
absl::StatusOr<std::shared_ptr<Array>> AllocateArrayOn(const std::shared_ptr<DeviceState>& dev,
                                                       DType dtype, Shape shape,
                                                       cudaStream_t stream);

// Device to device, synchronous: peer to peer where the GPUs allow it, else through
// the host. The arrays have the same size.
absl::Status CopyBetweenDevices(const DeviceState& from, DeviceState& to, const Array& src,
                                Array& dst);

// An operand of an operation, named for the messages.
using Operand = std::pair<const Array*, absl::string_view>;

// The devices one backend serves, fixed at construction; thread-safe.
class DeviceSet {
 public:
  explicit DeviceSet(std::vector<std::shared_ptr<DeviceState>> devices)
      : devices_(std::move(devices)) {}

  std::vector<DeviceDescription> Descriptions() const;
  bool AnyHealthy() const;
  // The healthy device with the fewest calls in flight, ties taken round robin; the
  // first device when none is healthy (its requests then fail UNAVAILABLE).
  int Pick();
  // Pool figures and queued calls per device.
  std::vector<DeviceMemoryStats> MemoryStats() const;

  // The device of `ordinal`, null when this set does not serve it.
  std::shared_ptr<DeviceState> Find(int ordinal) const;
  // "this CUDA backend uses cuda:0, cuda:1", for messages.
  std::string Describe() const;
  // Makes each device's context current on the calling thread once (the CUDA runtime
  // sets up a thread's state on its first call there).
  void PrepareThread() const;
  // The one healthy device all `operands` live on; FAILED_PRECONDITION naming them
  // otherwise, UNAVAILABLE when it is unhealthy.
  absl::StatusOr<DeviceState*> OperandDevice(const std::vector<Operand>& operands) const;

 private:
  const std::vector<std::shared_ptr<DeviceState>> devices_;
  std::atomic<uint64_t> round_robin_{0};
};

}  // namespace gpucompute::cuda
