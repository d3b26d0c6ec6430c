// Large host memory blocks kept after use, so that the next block of about the same
// size reuses pages already mapped. The server sends large blocks to mmap and back on
// free (server/main.cc, so that RSS stays within the memory budget), so fresh memory
// takes a page fault every 4 KiB as it is first written, which can cost a small request
// most of its time and a result chunk more CPU than the copy into it. The bounded
// exception: blocks from kMinBytes up, at most
// `capacity` bytes of them, a cap the server charges to its budget once at start. Used
// by the CPU backend's arrays and by the server's result chunks (server/chunk_memory.h,
// whose blocks may carry a pin: a registration with a GPU driver, kept while cached).
// Shared by its users and their blocks, which may outlive them.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute {

class HostBlockPool : public std::enable_shared_from_this<HostBlockPool> {
 public:
  static constexpr size_t kAlignment = 64;
  // Smaller blocks are left to malloc: below the server's mmap threshold they come warm
  // from its arenas (arrays just below this size still faulted about half the time
  // before this pool).
  static constexpr size_t kMinBytes = size_t{128} << 10;
  // Fresh blocks up to this size are mapped at once, not a page fault at a time
  // (host_block_pool.cc: Prepare); larger ones take transparent huge pages as written.
  static constexpr size_t kPopulateMaxBytes = size_t{2} << 20;

  // A block of capacity() bytes, 64-byte aligned; back to its pool when it goes.
  class Block {
   public:
    Block() = default;
    Block(Block&& other) noexcept { *this = std::move(other); }
    Block& operator=(Block&& other) noexcept;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block();
    std::byte* data() const { return data_; }
    size_t capacity() const { return capacity_; }
    // The block's registration with a device driver (released before its memory).
    const std::shared_ptr<void>& pin() const { return pin_; }
    void set_pin(std::shared_ptr<void> pin) { pin_ = std::move(pin); }

   private:
    friend class HostBlockPool;
    Block(std::shared_ptr<HostBlockPool> pool, std::byte* data, size_t capacity, std::shared_ptr<void> pin)
        : pool_(std::move(pool)), data_(data), capacity_(capacity), pin_(std::move(pin)) {}
    std::shared_ptr<HostBlockPool> pool_;
    std::byte* data_ = nullptr;
    size_t capacity_ = 0;
    std::shared_ptr<void> pin_;
  };

  explicit HostBlockPool(size_t capacity) : capacity_(capacity) {}
  ~HostBlockPool();
  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  // A kept block of `bytes` to `largest` bytes where there is one (the smallest), else
  // a new block of `bytes`; an empty block when the allocation fails.
  Block Take(size_t bytes, size_t largest);
  // A block for an array of `bytes`, never a null pointer (at least kAlignment bytes):
  // a kept one at most a quarter larger, else a new one.
  Block TakeForArray(size_t bytes) {
    const size_t request = bytes > kAlignment ? bytes : kAlignment;
    return Take(request, request + request / 4);
  }
  // A new block of `bytes`, never a kept one (a prefill), its pages made ready to be
  // written; empty when the allocation fails.
  Block Fresh(size_t bytes);
  // Bytes held for reuse, in no block in use.
  size_t cached_bytes() const;
  // Kept blocks of exactly `capacity` bytes.
  size_t cached_blocks(size_t capacity) const;

 private:
  struct Kept {
    std::byte* data;
    std::shared_ptr<void> pin;
  };
  void Give(std::byte* data, size_t capacity, std::shared_ptr<void> pin);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, Kept> free_ ABSL_GUARDED_BY(mu_);  // by capacity
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpucompute
