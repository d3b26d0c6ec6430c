#include "kernels/cpu/host_block_cache.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpucompute {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostBlockCacheTest, AFreedBlockServesTheNextOfAboutItsSize) {
  auto cache = std::make_shared<HostBlockCache>(16 * kMiB);
  std::byte* first = nullptr;
  {
    HostBlockCache::Block block = cache->Take(kMiB);
    ASSERT_NE(block.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.data()) % HostBlockCache::kAlignment, 0u);
    std::memset(block.data(), 1, kMiB);
    first = block.data();
  }
  EXPECT_EQ(cache->cached_bytes(), kMiB);
  HostBlockCache::Block again = cache->Take(kMiB - 4096);  // within a quarter of it
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(cache->cached_bytes(), 0u);
  HostBlockCache::Block other = cache->Take(kMiB / 2);  // the cache is empty: new memory
  EXPECT_NE(other.data(), first);
}

TEST(HostBlockCacheTest, ABlockMuchLargerThanTheRequestIsNotHandedOut) {
  auto cache = std::make_shared<HostBlockCache>(16 * kMiB);
  cache->Take(4 * kMiB);  // freed at once: cached
  ASSERT_EQ(cache->cached_bytes(), 4 * kMiB);
  HostBlockCache::Block small = cache->Take(kMiB);
  ASSERT_NE(small.data(), nullptr);
  EXPECT_EQ(cache->cached_bytes(), 4 * kMiB) << "a 4 MiB block served a 1 MiB request";
}

TEST(HostBlockCacheTest, SmallBlocksAreLeftToMalloc) {
  auto cache = std::make_shared<HostBlockCache>(16 * kMiB);
  cache->Take(HostBlockCache::kMinBytes - 64);
  EXPECT_EQ(cache->cached_bytes(), 0u);
}

TEST(HostBlockCacheTest, NeverHoldsMoreThanItsCapacity) {
  auto cache = std::make_shared<HostBlockCache>(4 * kMiB);
  {
    std::vector<HostBlockCache::Block> blocks;
    for (size_t mib : {1, 2, 3, 1, 5}) blocks.push_back(cache->Take(mib * kMiB));
  }  // 12 MiB freed, the 5 MiB block larger than the whole cache
  EXPECT_LE(cache->cached_bytes(), 4 * kMiB);
  EXPECT_GT(cache->cached_bytes(), 0u);
}

TEST(HostBlockCacheTest, BlocksOutliveTheirOwnersHandle) {
  auto cache = std::make_shared<HostBlockCache>(4 * kMiB);
  HostBlockCache::Block block = cache->Take(kMiB);
  std::weak_ptr<HostBlockCache> weak = cache;
  cache.reset();  // the backend goes first; its arrays still hold blocks
  EXPECT_FALSE(weak.expired());
  HostBlockCache::Block moved = std::move(block);
  EXPECT_EQ(block.data(), nullptr);
  moved = HostBlockCache::Block();
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace gpucompute
