#include "kernels/cpu/host_block_cache.h"

#include <new>
#include <utility>

namespace gpucompute {
namespace {

constexpr std::align_val_t kAlign{HostBlockCache::kAlignment};

void Release(std::byte* data) { ::operator delete[](data, kAlign); }

}  // namespace

HostBlockCache::Block& HostBlockCache::Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cache_->Give(data_, capacity_);
    cache_ = std::move(other.cache_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

HostBlockCache::Block::~Block() {
  if (data_ != nullptr) cache_->Give(data_, capacity_);
}

HostBlockCache::~HostBlockCache() {
  for (const auto& [capacity, data] : free_) Release(data);
}

HostBlockCache::Block HostBlockCache::Take(size_t bytes) {
  if (bytes >= kMinBytes) {
    absl::MutexLock lock(&mu_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= bytes + bytes / 4) {
      const auto [capacity, data] = *it;
      free_.erase(it);
      cached_ -= capacity;
      return Block(shared_from_this(), data, capacity);
    }
  }
  auto* data = static_cast<std::byte*>(::operator new[](bytes, kAlign, std::nothrow));
  if (data == nullptr) return Block();
  return Block(shared_from_this(), data, bytes);
}

void HostBlockCache::Give(std::byte* data, size_t capacity) {
  if (capacity >= kMinBytes && capacity <= capacity_) {
    absl::MutexLock lock(&mu_);
    // Room by the largest blocks first: they are the fewest to give back.
    while (cached_ + capacity > capacity_ && !free_.empty()) {
      auto largest = std::prev(free_.end());
      cached_ -= largest->first;
      Release(largest->second);
      free_.erase(largest);
    }
    free_.emplace(capacity, data);
    cached_ += capacity;
    return;
  }
  Release(data);
}

size_t HostBlockCache::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_;
}

}  // namespace gpucompute
