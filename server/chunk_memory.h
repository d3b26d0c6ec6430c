// Host memory for result chunks copied off a device, recycled. A fresh
// megabyte-sized block per chunk is mapped and page-faulted in by the kernel
// (zeroed 4 KiB at a time: more CPU than the copy into it; bench/BULK_TRANSFER.md);
// blocks given back are kept for the next chunk of the same size, up to
// kMaxCachedBytes in all.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/slice.h"
#include "kernels/backend.h"
#include "kernels/memory_budget.h"

namespace gpucompute {

class ChunkMemory {
 public:
  // Not charged block by block (it is what the budget's chunk charges recently
  // released): the server binary charges this cap once at start, with gRPC's
  // resource quota (ServerConfig::charge_process_memory).
  static constexpr size_t kMaxCachedBytes = size_t{64} << 20;

  // The process's pool (chunks may be released by gRPC after any server object
  // is gone, so it lives as long as the process).
  static ChunkMemory& Shared();

  std::unique_ptr<char[]> Take(size_t bytes);
  void Give(std::unique_ptr<char[]> block, size_t bytes);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<size_t, std::vector<std::unique_ptr<char[]>>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bytes [offset, offset + n) of `array` as a payload slice gRPC writes from: a host
// array's own memory (no copy; the slice keeps the array alive), else a copy off
// the device into ChunkMemory, charged to `host_budget` (null: not charged; the
// charge may wait --memory_budget_wait) until gRPC drops the slice. `copy_time`
// grows by the time the copy took.
absl::StatusOr<grpc::Slice> ArrayPayloadSlice(Backend& backend,
                                              const std::shared_ptr<MemoryBudget>& host_budget,
                                              const std::shared_ptr<Array>& array,
                                              uint64_t offset, uint64_t n,
                                              absl::Duration& copy_time);

}  // namespace gpucompute
