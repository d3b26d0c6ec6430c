// cuFFT plans kept between operations: making one costs far more than running a
// small transform. A plan serves one operation at a time (a lease); idle plans are
// kept per (device, size, batch), the least recently used destroyed past kMaxIdle.
// Plans leave their work area to the caller (cufftSetWorkArea from the operation's
// scratch) so that no memory is held between operations but the plan's own.
#pragma once

#include <cuda_runtime_api.h>
#include <cufft.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute::cuda {

class CufftPlans {
 public:
  struct Key {
    int device = 0;
    int64_t points = 0;  // per transform
    int64_t batch = 0;
    bool operator==(const Key&) const = default;
  };

  class Lease {
   public:
    Lease(CufftPlans* owner, Key key, cufftHandle handle, size_t work_bytes)
        : owner_(owner), key_(key), handle_(handle), work_bytes_(work_bytes) {}
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    cufftHandle handle() const { return handle_; }
    size_t work_bytes() const { return work_bytes_; }

   private:
    CufftPlans* owner_;
    Key key_;
    cufftHandle handle_;
    size_t work_bytes_;
  };

  CufftPlans() = default;
  CufftPlans(const CufftPlans&) = delete;
  CufftPlans& operator=(const CufftPlans&) = delete;
  ~CufftPlans();

  // A plan of `batch` in-place double-complex transforms of `points` each, made on
  // the current device (which must be key.device) when no idle one fits.
  absl::StatusOr<Lease> Acquire(const Key& key);

  // Makes the plan of `key` and runs it once on zeros (memory from `pool`, on
  // `stream` of the current device), leaving it idle: the first request of that size
  // neither plans nor loads cuFFT's kernels (a first plan of the process also sets
  // up the library).
  absl::Status WarmUp(const Key& key, cudaStream_t stream, cudaMemPool_t pool);

 private:
  static constexpr size_t kMaxIdle = 8;
  struct Idle {
    Key key;
    cufftHandle handle;
    size_t work_bytes;
  };
  void Return(const Key& key, cufftHandle handle, size_t work_bytes);

  absl::Mutex mu_;
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);  // most recently returned last
};

}  // namespace gpucompute::cuda
