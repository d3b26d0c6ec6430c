// ChunkMemory: blocks given back are reused for chunks of their size class, within a
// cap; Prefill tops the pool up once.
#include "server/chunk_memory.h"

#include <vector>

#include "gtest/gtest.h"

namespace gpucompute {
namespace {

TEST(ChunkMemoryTest, ReusesBlocksOfTheSameSize) {
  ChunkMemory pool;
  std::unique_ptr<char[]> block = pool.Take(1 << 20);
  char* const address = block.get();
  pool.Give(std::move(block), 1 << 20);
  EXPECT_NE(pool.Take(1 << 19).get(), address);  // another size: a fresh block
  EXPECT_EQ(pool.Take(1 << 20).get(), address);
}

TEST(ChunkMemoryTest, ShorterChunksShareTheBlockOfTheirSizeClass) {
  ChunkMemory pool;
  EXPECT_EQ(ChunkMemory::BlockBytes(1), 4096u);
  EXPECT_EQ(ChunkMemory::BlockBytes(654464), size_t{1} << 20);  // a result's last chunk
  EXPECT_EQ(ChunkMemory::BlockBytes(size_t{1} << 20), size_t{1} << 20);
  std::unique_ptr<char[]> block = pool.Take(1 << 20);
  char* const address = block.get();
  pool.Give(std::move(block), 1 << 20);
  EXPECT_EQ(pool.Take(654464).get(), address);
}

TEST(ChunkMemoryTest, PrefillTopsUpToItsShareOnce) {
  ChunkMemory pool;
  pool.Prefill(1 << 20);
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
  std::unique_ptr<char[]> block = pool.Take(1 << 20);
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes - (1 << 20));
  pool.Prefill(1 << 20);  // one block short: one more
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
  pool.Prefill(1 << 20);  // full: none
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
}

TEST(ChunkMemoryTest, KeepsAtMostTheCap) {
  ChunkMemory pool;
  constexpr size_t kBlock = size_t{4} << 20;
  constexpr size_t kBlocks = ChunkMemory::kMaxCachedBytes / kBlock + 2;
  std::vector<std::unique_ptr<char[]>> taken;
  std::vector<char*> addresses;
  for (size_t i = 0; i < kBlocks; ++i) {
    taken.push_back(pool.Take(kBlock));
    addresses.push_back(taken.back().get());
  }
  for (size_t i = 0; i < kBlocks; ++i) pool.Give(std::move(taken[i]), kBlock);
  // Only the first kMaxCachedBytes worth were kept; the pool hands them out again.
  size_t reused = 0;
  for (size_t i = 0; i < kBlocks; ++i) {
    std::unique_ptr<char[]> block = pool.Take(kBlock);
    for (char* address : addresses) reused += block.get() == address;
    taken[i] = std::move(block);
  }
  EXPECT_EQ(reused, ChunkMemory::kMaxCachedBytes / kBlock);
}

}  // namespace
}  // namespace gpucompute
