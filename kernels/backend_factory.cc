#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/memory/memory_budget.h"
#ifdef GPUCOMPUTE_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace gpucompute {

namespace {

absl::StatusOr<BackendSelection> CreateRealBackend(const BackendOptions& options) {
  if (options.kind == BackendKind::kCpu) {
    return BackendSelection{CreateCpuBackend(options.cpu_threads), "cpu: requested by --backend"};
  }
#ifdef GPUCOMPUTE_HAVE_CUDA
  absl::StatusOr<std::unique_ptr<Backend>> cuda = CreateCudaBackend(options);
  if (cuda.ok()) {
    return BackendSelection{*std::move(cuda), "cuda: GPU found"};
  }
  if (options.kind == BackendKind::kCuda) return cuda.status();
  return BackendSelection{CreateCpuBackend(options.cpu_threads),
                          absl::StrCat("cpu: no GPU found, the CPU backend serves (CUDA: ",
                                       cuda.status().message(), ")")};
#else
  if (options.kind == BackendKind::kCuda) {
    return absl::FailedPreconditionError(
        "--backend=cuda but this build has no CUDA backend (nvcc was not found at build time)");
  }
  return BackendSelection{CreateCpuBackend(options.cpu_threads),
                          "cpu: auto, this build has no CUDA backend"};
#endif
}

}  // namespace

absl::StatusOr<BackendSelection> CreateBackend(const BackendOptions& options) {
  absl::StatusOr<BackendSelection> selection = CreateRealBackend(options);
  if (!selection.ok()) return selection;
  selection->backend = WithMemoryBudgets(std::move(selection->backend), options);
  return selection;
}

}  // namespace gpucompute
