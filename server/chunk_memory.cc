#include "server/chunk_memory.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace gpucompute {
namespace {

constexpr size_t kSmallestBlock = 4096;

}  // namespace

ChunkMemory& ChunkMemory::Shared() {
  static ChunkMemory* const pool = new ChunkMemory();
  return *pool;
}

size_t ChunkMemory::BlockBytes(size_t bytes) { return std::bit_ceil(std::max(bytes, kSmallestBlock)); }

std::unique_ptr<char[]> ChunkMemory::Take(size_t bytes) {
  const size_t block = BlockBytes(bytes);
  {
    absl::MutexLock lock(&mu_);
    auto found = free_.find(block);
    if (found != free_.end() && !found->second.empty()) {
      std::unique_ptr<char[]> taken = std::move(found->second.back());
      found->second.pop_back();
      cached_bytes_ -= block;
      return taken;
    }
  }
  return std::unique_ptr<char[]>(new char[block]);
}

void ChunkMemory::Give(std::unique_ptr<char[]> block, size_t bytes) {
  const size_t size = BlockBytes(bytes);
  absl::MutexLock lock(&mu_);
  if (cached_bytes_ + size > kMaxCachedBytes) return;  // freed
  free_[size].push_back(std::move(block));
  cached_bytes_ += size;
}

void ChunkMemory::Prefill(size_t chunk_bytes) {
  const size_t block = BlockBytes(chunk_bytes);
  size_t have = 0;
  {
    absl::MutexLock lock(&mu_);
    auto found = free_.find(block);
    if (found != free_.end()) have = found->second.size();
  }
  const size_t want = std::max<size_t>(1, kPrefillBytes / block);
  for (size_t i = have; i < want; ++i) {
    std::unique_ptr<char[]> fresh(new char[block]);
    std::memset(fresh.get(), 0, block);  // the page faults, now
    Give(std::move(fresh), block);
  }
}

size_t ChunkMemory::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

}  // namespace gpucompute
