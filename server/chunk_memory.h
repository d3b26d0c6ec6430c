// Host memory for result chunks copied off a device, recycled through a HostBlockPool
// (kernels/memory/host_block_pool.h: a fresh megabyte-sized block per chunk is mapped and
// page-faulted in by the kernel, zeroed 4 KiB at a time: more CPU than the copy into
// it), up to kMaxCachedBytes in all. Sizes round up to a power
// of two, so that the last, shorter chunk of a result of any size finds a block too;
// the server fills the pool at start (Prefill), so that the first results pay no page
// faults the later ones do not. Classes below HostBlockPool::kMinBytes are left to
// malloc, whose arenas hand them out warm. On a GPU backend blocks from kPinFromBytes are pinned
// (registered with the driver) the first time they take a copy and stay pinned while
// kept: the DMA engine writes the chunk straight into the memory gRPC sends from, where
// an unpinned block took a second copy, out of the backend's staging.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/support/slice.h"
#include "kernels/backend.h"
#include "kernels/memory/host_block_pool.h"
#include "kernels/memory/memory_budget.h"

namespace gpucompute {

class ChunkMemory {
 public:
  // Not charged block by block (it is what the budget's chunk charges recently
  // released): the server binary charges this cap once at start, with gRPC's
  // resource quota (ServerConfig::charge_process_memory).
  static constexpr size_t kMaxCachedBytes = size_t{64} << 20;
  // Prefill's share of the cap: the blocks a few result streams hold at once (each
  // its read-ahead and what gRPC has not sent yet).
  static constexpr size_t kPrefillBytes = size_t{16} << 20;
  // Take's fallback to larger blocks: at most this factor larger, for chunks of at
  // least kSpareFromBytes.
  static constexpr size_t kLargestSpareFactor = 4;
  static constexpr size_t kSpareFromBytes = size_t{256} << 10;
  // Smaller copies go through the backend's per-stream pinned bytes anyway.
  static constexpr size_t kPinFromBytes = size_t{256} << 10;

  using Block = HostBlockPool::Block;

  // The process's pool (chunks may be released by gRPC after any server object
  // is gone, so it lives as long as the process).
  static ChunkMemory& Shared();

  // The size of the block made for a chunk of `bytes`: its size class.
  static size_t BlockBytes(size_t bytes);

  ChunkMemory() : pool_(std::make_shared<HostBlockPool>(kMaxCachedBytes)) {}

  // A kept block of the size class of `bytes` or, failing that, the smallest kept one
  // up to kLargestSpareFactor times larger (a result shorter than a chunk uses a
  // prefilled chunk block) from kSpareFromBytes; else a new block of the size class.
  // The block goes back to the pool when it is destroyed.
  Block Take(size_t bytes);

  // Pins `block` with `backend` (PinHostMemory) if it is large enough and not pinned
  // yet. A block that cannot be pinned still works, through the backend's staging.
  static void PinForCopies(Backend& backend, Block& block);

  // Kept blocks for chunks of `chunk_bytes`, touched (so resident) and pinned for
  // `backend`, topped up to kPrefillBytes in all (at least one).
  void Prefill(size_t chunk_bytes, Backend& backend);

  // The kept blocks' bytes.
  size_t cached_bytes() const { return pool_->cached_bytes(); }

 private:
  const std::shared_ptr<HostBlockPool> pool_;
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
