// cudaError_t -> absl::Status, and the sticky-error test that marks a device unhealthy.
// Host-only header (no kernels); safe to include from .cc and .cu files.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpucompute::cuda {

// True for errors that leave the CUDA context unusable: every later call in this
// process on that device fails too. A device that hits one is marked unhealthy.
inline bool IsStickyError(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

// cudaErrorMemoryAllocation -> RESOURCE_EXHAUSTED; everything else INTERNAL with
// cudaGetErrorString. `what` names the call or the operation ("cuda:0 DiscountProduct").
// Clears the thread's last-error slot, so a handled (non-sticky) failure does not
// surface again at the next cudaGetLastError after a launch.
inline absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(std::move(msg));
  return absl::InternalError(std::move(msg));
}

}  // namespace gpucompute::cuda

#define GC_CUDA_RETURN_IF_ERROR(expr, what)                                    \
  do {                                                                         \
    const cudaError_t _gc_err = (expr);                                        \
    if (_gc_err != cudaSuccess) return ::gpucompute::cuda::CudaStatus(_gc_err, what); \
  } while (0)
