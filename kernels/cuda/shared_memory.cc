#include "kernels/cuda/shared_memory.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"

namespace gpucompute::cuda {
namespace {

std::string ErrorText(cudaError_t e) {
  (void)cudaGetLastError();
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// The bytes of the allocation from `base` on, through the driver's
// cuMemGetAddressRange, found at run time: linking libcuda would keep the server
// from starting (and falling back to the CPU) where no driver is installed.
absl::StatusOr<size_t> AllocationBytesFrom(void* base) {
  static PFN_cuMemGetAddressRange_v3020 get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
  }();
  CUdeviceptr range_base = 0;
  size_t range_bytes = 0;
  const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(base);
  if (get_range == nullptr || get_range(&range_base, &range_bytes, at) != CUDA_SUCCESS) {
    return absl::InternalError("cuMemGetAddressRange of an opened IPC handle failed");
  }
  return range_bytes - (at - range_base);
}

}  // namespace

absl::StatusOr<std::shared_ptr<void>> PinHostRange(int device, void* data, size_t bytes) {
  ScopedDevice on_device(device);
  GC_CUDA_RETURN_IF_ERROR(on_device.error(), "cudaSetDevice");
  const cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot pin ", bytes, " bytes of shared memory for the GPU (cudaHostRegister): ",
        ErrorText(e)));
  }
  return std::shared_ptr<void>(data, [device](void* p) {
    ScopedDevice on(device);
    (void)cudaHostUnregister(p);
    (void)cudaGetLastError();
  });
}

absl::StatusOr<IpcMemory> OpenIpcHandle(const DeviceSet& devices, absl::string_view handle,
                                        absl::string_view pci_bus_id) {
  cudaIpcMemHandle_t ipc{};
  if (handle.size() != sizeof(ipc)) {
    return absl::InvalidArgumentError(absl::StrCat("ipc_handle has ", handle.size(),
                                                   " bytes; a cudaIpcMemHandle_t has ",
                                                   sizeof(ipc)));
  }
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  int ordinal = -1;
  const std::string bus(pci_bus_id.substr(0, 64));
  cudaError_t e = cudaDeviceGetByPCIBusId(&ordinal, bus.c_str());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "pci_bus_id '", bus, "' names no GPU this server sees: the client's GPU is on another "
        "host, or hidden from the server (CUDA_VISIBLE_DEVICES); ", devices.Describe()));
  }
  std::shared_ptr<DeviceState> d = devices.Find(ordinal);
  if (d == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("pci_bus_id '", bus, "' is cuda:", ordinal,
                     ", which this server does not serve (--devices); ", devices.Describe()));
  }
  if (!d->healthy.load()) return d->Unavailable();
  ScopedDevice on_device(ordinal);
  GC_CUDA_RETURN_IF_ERROR(on_device.error(), "cudaSetDevice");
  void* base = nullptr;
  e = cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    return absl::NotFoundError(absl::StrCat(
        "ipc_handle cannot be opened on ", d->name, ": ", ErrorText(e),
        "; the memory was freed or its process ended, the handle is malformed, or it comes "
        "from the server's own process"));
  }
  std::shared_ptr<void> mapping(base, [ordinal](void* p) {
    ScopedDevice on(ordinal);
    (void)cudaIpcCloseMemHandle(p);
    (void)cudaGetLastError();
  });
  IpcMemory memory;
  GC_ASSIGN_OR_RETURN(memory.bytes, AllocationBytesFrom(base));
  memory.device = ordinal;
  memory.mapping = std::move(mapping);
  return memory;
}

}  // namespace gpucompute::cuda
