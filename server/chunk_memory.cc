#include "server/chunk_memory.h"

#include <utility>

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

}  // namespace gpucompute
