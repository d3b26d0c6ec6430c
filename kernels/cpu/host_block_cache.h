// Host memory blocks of the CPU backend's arrays, kept after their arrays are freed so
// the next array of about the same size reuses pages already mapped. The server sends
// large blocks to mmap and back on free (server/main.cc, so that RSS stays within the
// memory budget), so an array in fresh memory takes a page fault every 4 KiB as it is
// first written (an 800 KB request spent ~5 of its ~5.3 ms in them on a 2-core VM,
// against 0.2-0.4 ms in reused memory; bench/NOTES.md). This is the bounded exception,
// charged to the budget as ChunkMemory's recycled result chunks are: blocks from
// kMinBytes up, at most `capacity` bytes of them. Shared by the backend and its arrays,
// which may outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute {

class HostBlockCache : public std::enable_shared_from_this<HostBlockCache> {
 public:
  static constexpr size_t kAlignment = 64;
  // Smaller blocks are left to malloc (arrays of 240 KB still faulted about half the
  // time before this cache; bench/results/cpu_array_reuse_run1.txt).
  static constexpr size_t kMinBytes = size_t{128} << 10;

  // A block of at least `bytes`, 64-byte aligned; returned to the cache when it goes.
  class Block {
   public:
    Block() = default;
    Block(Block&& other) noexcept { *this = std::move(other); }
    Block& operator=(Block&& other) noexcept;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block();
    std::byte* data() const { return data_; }

   private:
    friend class HostBlockCache;
    Block(std::shared_ptr<HostBlockCache> cache, std::byte* data, size_t capacity)
        : cache_(std::move(cache)), data_(data), capacity_(capacity) {}
    std::shared_ptr<HostBlockCache> cache_;
    std::byte* data_ = nullptr;
    size_t capacity_ = 0;
  };

  explicit HostBlockCache(size_t capacity) : capacity_(capacity) {}
  ~HostBlockCache();
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // A cached block of `bytes` to a quarter more where there is one, else a new one;
  // an empty block when the allocation fails.
  Block Take(size_t bytes);
  // Bytes held for reuse, not in any array.
  size_t cached_bytes() const;

 private:
  void Give(std::byte* data, size_t capacity);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, std::byte*> free_ ABSL_GUARDED_BY(mu_);  // by capacity
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpucompute
