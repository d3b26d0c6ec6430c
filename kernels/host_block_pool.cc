#include "kernels/host_block_pool.h"

#include <iterator>
#include <new>
#include <utility>

namespace gpucompute {
namespace {

constexpr std::align_val_t kAlign{HostBlockPool::kAlignment};

void Release(std::byte* data, std::shared_ptr<void>& pin) {
  pin.reset();  // unregistered while its memory is still there
  ::operator delete[](data, kAlign);
}

}  // namespace

HostBlockPool::Block& HostBlockPool::Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) pool_->Give(data_, capacity_, std::move(pin_));
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    pin_ = std::move(other.pin_);
  }
  return *this;
}

HostBlockPool::Block::~Block() {
  if (data_ != nullptr) pool_->Give(data_, capacity_, std::move(pin_));
}

HostBlockPool::~HostBlockPool() {
  for (auto& [capacity, kept] : free_) Release(kept.data, kept.pin);
}

HostBlockPool::Block HostBlockPool::Take(size_t bytes, size_t largest) {
  if (bytes >= kMinBytes) {
    absl::MutexLock lock(&mu_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= largest) {
      const size_t capacity = it->first;
      Kept kept = std::move(it->second);
      free_.erase(it);
      cached_ -= capacity;
      return Block(shared_from_this(), kept.data, capacity, std::move(kept.pin));
    }
  }
  return Fresh(bytes);
}

HostBlockPool::Block HostBlockPool::Fresh(size_t bytes) {
  auto* data = static_cast<std::byte*>(::operator new[](bytes, kAlign, std::nothrow));
  if (data == nullptr) return Block();
  return Block(shared_from_this(), data, bytes, nullptr);
}

void HostBlockPool::Give(std::byte* data, size_t capacity, std::shared_ptr<void> pin) {
  if (capacity >= kMinBytes && capacity <= capacity_) {
    absl::MutexLock lock(&mu_);
    // Room by the largest blocks first: they are the fewest to give back.
    while (cached_ + capacity > capacity_ && !free_.empty()) {
      auto largest = std::prev(free_.end());
      cached_ -= largest->first;
      Release(largest->second.data, largest->second.pin);
      free_.erase(largest);
    }
    free_.emplace(capacity, Kept{data, std::move(pin)});
    cached_ += capacity;
    return;
  }
  Release(data, pin);
}

size_t HostBlockPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_;
}

size_t HostBlockPool::cached_blocks(size_t capacity) const {
  absl::MutexLock lock(&mu_);
  return free_.count(capacity);
}

}  // namespace gpucompute
