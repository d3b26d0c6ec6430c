#include "kernels/memory/host_block_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <iterator>
#include <new>
#include <utility>

namespace gpucompute {
namespace {

constexpr std::align_val_t kAlign{HostBlockPool::kAlignment};
constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack it
#endif

// The whole pages of [data, data + bytes) aligned to `align`, advised `advice`. Advice
// only: where the kernel declines, the memory works as before.
void AdviseAligned(std::byte* data, size_t bytes, uintptr_t align, int advice) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + align - 1) & ~(align - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(align - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

// Fresh memory otherwise takes a page fault every 4 KiB as it is first written. Its
// 2 MiB-aligned part asks for transparent huge pages (512x fewer faults: they were
// half the server's CPU in a large upload). A block too small to hold one (up to
// kPopulateMaxBytes) is mapped at once by one MADV_POPULATE_WRITE, which costs well
// under the faults it replaces. Larger blocks fault as they are written: populating
// them at once made first requests slower, not faster.
void Prepare(std::byte* data, size_t bytes) {
  AdviseAligned(data, bytes, kHugePageBytes, MADV_HUGEPAGE);
  if (bytes >= HostBlockPool::kMinBytes && bytes <= HostBlockPool::kPopulateMaxBytes) {
    // The system's page (64 KiB on some arm64 kernels): a range not aligned to it is refused.
    static const uintptr_t page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    AdviseAligned(data, bytes, page_bytes, MADV_POPULATE_WRITE);
  }
}

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
  Prepare(data, bytes);
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
