#include "kernels/cuda/cufft_plans.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute::cuda {

CufftPlans::Lease::Lease(Lease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      key_(other.key_),
      handle_(other.handle_),
      work_bytes_(other.work_bytes_) {}

CufftPlans::Lease::~Lease() {
  if (owner_ != nullptr) owner_->Return(key_, handle_, work_bytes_);
}

CufftPlans::~CufftPlans() {
  absl::MutexLock lock(&mu_);
  for (const Idle& idle : idle_) (void)cufftDestroy(idle.handle);
}

absl::StatusOr<CufftPlans::Lease> CufftPlans::Acquire(const Key& key) {
  {
    absl::MutexLock lock(&mu_);
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if (it->key == key) {
        Lease lease(this, key, it->handle, it->work_bytes);
        idle_.erase(std::next(it).base());
        return lease;
      }
    }
  }
  cufftHandle handle;
  if (cufftCreate(&handle) != CUFFT_SUCCESS) {
    return absl::ResourceExhaustedError("cufftCreate failed");
  }
  long long points = key.points;
  size_t work_bytes = 0;
  cufftResult made = cufftSetAutoAllocation(handle, 0);
  if (made == CUFFT_SUCCESS) {
    made = cufftMakePlanMany64(handle, 1, &points, nullptr, 1, points, nullptr, 1, points,
                               CUFFT_Z2Z, key.batch, &work_bytes);
  }
  if (made != CUFFT_SUCCESS) {
    (void)cufftDestroy(handle);
    return absl::ResourceExhaustedError(absl::StrCat("cuFFT could not plan ", key.batch,
                                                     " transforms of ", key.points,
                                                     " points (cufftResult ", made, ")"));
  }
  return Lease(this, key, handle, work_bytes);
}

absl::Status CufftPlans::WarmUp(const Key& key, cudaStream_t stream, cudaMemPool_t pool) {
  absl::StatusOr<Lease> lease = Acquire(key);
  if (!lease.ok()) return lease.status();
  // The transforms, then the work area from a 256-byte boundary.
  const size_t data = (sizeof(cufftDoubleComplex) * static_cast<size_t>(key.points * key.batch) + 255) / 256 * 256;
  void* memory = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&memory, data + lease->work_bytes(), pool, stream);
  if (e != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("cuFFT warm-up memory: ", cudaGetErrorString(e)));
  }
  e = cudaMemsetAsync(memory, 0, data, stream);
  auto* z = static_cast<cufftDoubleComplex*>(memory);
  cufftResult r = cufftSetStream(lease->handle(), stream);
  if (r == CUFFT_SUCCESS) r = cufftSetWorkArea(lease->handle(), static_cast<char*>(memory) + data);
  if (r == CUFFT_SUCCESS && e == cudaSuccess) r = cufftExecZ2Z(lease->handle(), z, z, CUFFT_INVERSE);
  const cudaError_t freed = cudaFreeAsync(memory, stream);
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = freed != cudaSuccess ? freed : synced;
  if (r != CUFFT_SUCCESS || e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cuFFT warm-up of ", key.batch, " transforms of ", key.points,
                                            " points: cufftResult ", r, ", ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

void CufftPlans::Return(const Key& key, cufftHandle handle, size_t work_bytes) {
  absl::MutexLock lock(&mu_);
  idle_.push_back({key, handle, work_bytes});
  if (idle_.size() > kMaxIdle) {
    (void)cufftDestroy(idle_.front().handle);
    idle_.erase(idle_.begin());
  }
}

}  // namespace gpucompute::cuda
