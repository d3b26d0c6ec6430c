#include "server/chunk_memory.h"

#include <utility>

#include "common/status_macros.h"

namespace gpucompute {

ChunkMemory& ChunkMemory::Shared() {
  static ChunkMemory* const pool = new ChunkMemory();
  return *pool;
}

std::unique_ptr<char[]> ChunkMemory::Take(size_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    auto found = free_.find(bytes);
    if (found != free_.end() && !found->second.empty()) {
      std::unique_ptr<char[]> block = std::move(found->second.back());
      found->second.pop_back();
      cached_bytes_ -= bytes;
      return block;
    }
  }
  return std::unique_ptr<char[]>(new char[bytes]);
}

void ChunkMemory::Give(std::unique_ptr<char[]> block, size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (cached_bytes_ + bytes > kMaxCachedBytes) return;  // freed
  free_[bytes].push_back(std::move(block));
  cached_bytes_ += bytes;
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
    std::unique_ptr<char[]> bytes;
    size_t size;
    MemoryBudget::Charge charge;
    ~HostCopy() { ChunkMemory::Shared().Give(std::move(bytes), size); }
  };
  auto copy = std::make_unique<HostCopy>();
  if (host_budget != nullptr) {
    GC_ASSIGN_OR_RETURN(copy->charge, host_budget->Reserve(n));
  }
  copy->bytes = ChunkMemory::Shared().Take(n);
  copy->size = n;
  const absl::Time start = absl::Now();
  GC_RETURN_IF_ERROR(backend.CopyFromArray(*array, offset, n, copy->bytes.get()));
  copy_time += absl::Now() - start;
  char* bytes = copy->bytes.get();
  return grpc::Slice(bytes, n, [](void* p) { delete static_cast<HostCopy*>(p); },
                     copy.release());
}

}  // namespace gpucompute
