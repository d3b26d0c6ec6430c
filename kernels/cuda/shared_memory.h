// Same-host zero copy on the CUDA backend: host memory of other processes
// (shared memory the server mapped) pinned with cudaHostRegister, and device
// memory of other processes opened from CUDA IPC handles.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/cuda/device.h"

namespace gpucompute::cuda {

// Pins `bytes` at `data` for every device (portable) with `device` current;
// unpinned when the handle is dropped.
absl::StatusOr<std::shared_ptr<void>> PinHostRange(int device, void* data, size_t bytes);

// Opens a cudaIpcMemHandle_t (its 64 bytes) on the device of `devices` whose PCI
// bus id is `pci_bus_id`, and measures the allocation it names.
absl::StatusOr<IpcMemory> OpenIpcHandle(const DeviceSet& devices, absl::string_view handle,
                                        absl::string_view pci_bus_id);

}  // namespace gpucompute::cuda
