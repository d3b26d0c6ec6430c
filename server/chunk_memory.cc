#include "server/chunk_memory.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "common/status_macros.h"

namespace gpucompute {
namespace {

constexpr size_t kSmallestBlock = 4096;

}  // namespace

ChunkMemory& ChunkMemory::Shared() {
  static ChunkMemory* const pool = new ChunkMemory();
  return *pool;
}

size_t ChunkMemory::BlockBytes(size_t bytes) { return std::bit_ceil(std::max(bytes, kSmallestBlock)); }

ChunkMemory::Block ChunkMemory::Take(size_t bytes) {
  const size_t wanted = BlockBytes(bytes);
  {
    absl::MutexLock lock(&mu_);
    const size_t largest = wanted >= kSpareFromBytes ? wanted * kLargestSpareFactor : wanted;
    for (size_t size = wanted; size <= largest; size *= 2) {
      auto found = free_.find(size);
      if (found == free_.end() || found->second.empty()) continue;
      Block block = std::move(found->second.back());
      found->second.pop_back();
      cached_bytes_ -= size;
      return block;
    }
  }
  return Block{std::unique_ptr<char[]>(new char[wanted]), wanted};
}

void ChunkMemory::Give(Block block) {
  absl::MutexLock lock(&mu_);
  if (cached_bytes_ + block.bytes > kMaxCachedBytes) return;  // freed
  const size_t bytes = block.bytes;
  free_[bytes].push_back(std::move(block));
  cached_bytes_ += bytes;
}

void ChunkMemory::PinForCopies(Backend& backend, Block& block) {
  if (block.pin != nullptr || block.bytes < kPinFromBytes) return;
  absl::StatusOr<std::shared_ptr<void>> pin = backend.PinHostMemory(block.data.get(), block.bytes);
  if (pin.ok()) block.pin = *std::move(pin);
}

void ChunkMemory::Prefill(size_t chunk_bytes, Backend& backend) {
  const size_t block = BlockBytes(chunk_bytes);
  size_t have = 0;
  {
    absl::MutexLock lock(&mu_);
    auto found = free_.find(block);
    if (found != free_.end()) have = found->second.size();
  }
  const size_t want = std::max<size_t>(1, kPrefillBytes / block);
  for (size_t i = have; i < want; ++i) {
    Block fresh{std::unique_ptr<char[]>(new char[block]), block};
    std::memset(fresh.data.get(), 0, block);  // the page faults, now
    PinForCopies(backend, fresh);
    Give(std::move(fresh));
  }
}

size_t ChunkMemory::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

absl::StatusOr<grpc::Slice> ArrayPayloadSlice(Backend& backend,
                                              const std::shared_ptr<MemoryBudget>& host_budget,
                                              const std::shared_ptr<Array>& array,
                                              uint64_t offset, uint64_t n,
                                              absl::Duration& copy_time) {
  if (array->device() == kHostDevice) {
    auto* owner = new std::shared_ptr<Array>(array);
    return grpc::Slice(static_cast<char*>((*owner)->data()) + offset, n,
                       [](void* p) { delete static_cast<std::shared_ptr<Array>*>(p); }, owner);
  }
  // The copy's memory (recycled) and its charge go back when gRPC drops the slice.
  struct HostCopy {
    ChunkMemory::Block block;
    MemoryBudget::Charge charge;
    ~HostCopy() { ChunkMemory::Shared().Give(std::move(block)); }
  };
  auto copy = std::make_unique<HostCopy>();
  copy->block = ChunkMemory::Shared().Take(n);
  if (n >= ChunkMemory::kPinFromBytes) ChunkMemory::PinForCopies(backend, copy->block);
  if (host_budget != nullptr) {  // the block it got, whose size class may exceed n
    GC_ASSIGN_OR_RETURN(copy->charge, host_budget->Reserve(copy->block.bytes));
  }
  const absl::Time start = absl::Now();
  GC_RETURN_IF_ERROR(backend.CopyFromArray(*array, offset, n, copy->block.data.get()));
  copy_time += absl::Now() - start;
  char* bytes = copy->block.data.get();
  return grpc::Slice(bytes, n, [](void* p) { delete static_cast<HostCopy*>(p); },
                     copy.release());
}

}  // namespace gpucompute
