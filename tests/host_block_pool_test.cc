// HostBlockPool: blocks let go are kept for the next block of about their size, within
// the pool's capacity and from kMinBytes up; a kept block keeps its pin until the pool
// frees it; a fresh block of up to kPopulateMaxBytes comes mapped.
#include "kernels/memory/host_block_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpucompute {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostBlockPoolTest, ABlockLetGoServesTheNextOfAboutItsSize) {
  auto pool = std::make_shared<HostBlockPool>(16 * kMiB);
  std::byte* first = nullptr;
  {
    HostBlockPool::Block block = pool->Take(kMiB, kMiB);
    ASSERT_NE(block.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.data()) % HostBlockPool::kAlignment, 0u);
    std::memset(block.data(), 1, kMiB);
    first = block.data();
  }
  EXPECT_EQ(pool->cached_bytes(), kMiB);
  EXPECT_EQ(pool->cached_blocks(kMiB), 1u);
  HostBlockPool::Block again = pool->Take(kMiB - 4096, kMiB);  // within the largest asked for
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.capacity(), kMiB);
  EXPECT_EQ(pool->cached_bytes(), 0u);
  HostBlockPool::Block other = pool->Take(kMiB / 2, kMiB);  // the pool is empty: new memory
  EXPECT_NE(other.data(), first);
  EXPECT_EQ(other.capacity(), kMiB / 2);
}

TEST(HostBlockPoolTest, ABlockLargerThanTheLargestAskedForIsNotHandedOut) {
  auto pool = std::make_shared<HostBlockPool>(16 * kMiB);
  pool->Take(4 * kMiB, 4 * kMiB);  // let go at once: kept
  ASSERT_EQ(pool->cached_bytes(), 4 * kMiB);
  HostBlockPool::Block small = pool->Take(kMiB, kMiB + kMiB / 4);
  ASSERT_NE(small.data(), nullptr);
  EXPECT_EQ(pool->cached_bytes(), 4 * kMiB) << "a 4 MiB block served a 1 MiB request";
  HostBlockPool::Block spare = pool->Take(kMiB, 4 * kMiB);
  EXPECT_EQ(spare.capacity(), 4 * kMiB);
  EXPECT_EQ(pool->cached_bytes(), 0u);
}

TEST(HostBlockPoolTest, AFreshBlockIsNeverAKeptOne) {
  auto pool = std::make_shared<HostBlockPool>(16 * kMiB);
  std::byte* kept = pool->Take(kMiB, kMiB).data();  // let go at once: kept
  HostBlockPool::Block fresh = pool->Fresh(kMiB);
  ASSERT_NE(fresh.data(), nullptr);
  EXPECT_NE(fresh.data(), kept);
  EXPECT_EQ(pool->cached_blocks(kMiB), 1u);
  fresh = HostBlockPool::Block();
  EXPECT_EQ(pool->cached_blocks(kMiB), 2u) << "a fresh block is kept when let go";
}

// Whether this kernel maps pages on MADV_POPULATE_WRITE (Linux 5.14).
bool KernelPopulates() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, page, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(p, page);
  return ok;
}

TEST(HostBlockPoolTest, AFreshBlockOfUpToTwoMiBIsMappedBeforeItIsWritten) {
  if (!KernelPopulates()) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE";
  auto pool = std::make_shared<HostBlockPool>(16 * kMiB);
  for (size_t bytes : {size_t{800} << 10, HostBlockPool::kPopulateMaxBytes}) {
    HostBlockPool::Block block = pool->Fresh(bytes);
    ASSERT_NE(block.data(), nullptr);
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(block.data()) + page - 1) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(block.data()) + bytes) & ~(page - 1);
    std::vector<unsigned char> resident((end - begin) / page);
    ASSERT_EQ(mincore(reinterpret_cast<void*>(begin), end - begin, resident.data()), 0);
    size_t mapped = 0;
    for (unsigned char r : resident) mapped += r & 1;
    EXPECT_EQ(mapped, resident.size()) << bytes << " bytes: pages mapped before any write";
  }
}

TEST(HostBlockPoolTest, SmallBlocksAreLeftToMalloc) {
  auto pool = std::make_shared<HostBlockPool>(16 * kMiB);
  pool->Take(HostBlockPool::kMinBytes - 64, HostBlockPool::kMinBytes);
  EXPECT_EQ(pool->cached_bytes(), 0u);
}

TEST(HostBlockPoolTest, NeverHoldsMoreThanItsCapacity) {
  auto pool = std::make_shared<HostBlockPool>(4 * kMiB);
  {
    std::vector<HostBlockPool::Block> blocks;
    for (size_t mib : {1, 2, 3, 1, 5}) blocks.push_back(pool->Take(mib * kMiB, mib * kMiB));
  }  // 12 MiB let go, the 5 MiB block larger than the whole pool
  EXPECT_LE(pool->cached_bytes(), 4 * kMiB);
  EXPECT_GT(pool->cached_bytes(), 0u);
}

TEST(HostBlockPoolTest, AKeptBlockKeepsItsPinUntilThePoolFreesIt) {
  auto pool = std::make_shared<HostBlockPool>(kMiB);
  auto pin = std::make_shared<int>(0);
  std::weak_ptr<int> pinned = pin;
  {
    HostBlockPool::Block block = pool->Take(kMiB, kMiB);
    block.set_pin(std::move(pin));
  }
  HostBlockPool::Block again = pool->Take(kMiB, kMiB);
  EXPECT_EQ(again.pin().get(), pinned.lock().get()) << "the pin came back with its block";
  again = HostBlockPool::Block();
  EXPECT_FALSE(pinned.expired()) << "kept with its block";
  pool->Take(kMiB / 2, kMiB / 2);  // let go and kept: the 1 MiB block freed for room
  EXPECT_TRUE(pinned.expired());
}

TEST(HostBlockPoolTest, BlocksOutliveTheirOwnersHandle) {
  auto pool = std::make_shared<HostBlockPool>(4 * kMiB);
  HostBlockPool::Block block = pool->Take(kMiB, kMiB);
  std::weak_ptr<HostBlockPool> weak = pool;
  pool.reset();  // the backend goes first; its arrays still hold blocks
  EXPECT_FALSE(weak.expired());
  HostBlockPool::Block moved = std::move(block);
  EXPECT_EQ(block.data(), nullptr);
  moved = HostBlockPool::Block();
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace gpucompute
