// ChunkMemory: blocks let go are reused for chunks of their size class (or, from
// kSpareFromBytes, a few times smaller), within a cap; Prefill tops the pool up once.
#include "server/chunk_memory.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace gpucompute {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(ChunkMemoryTest, ReusesBlocksOfTheSameSize) {
  ChunkMemory pool;
  ChunkMemory::Block block = pool.Take(kMiB);
  std::byte* const address = block.data();
  EXPECT_EQ(block.capacity(), kMiB);
  block = {};  // back to the pool
  EXPECT_NE(pool.Take(2 * kMiB).data(), address);  // larger: a fresh block
  EXPECT_EQ(pool.Take(kMiB).data(), address);
}

TEST(ChunkMemoryTest, ShorterChunksUseTheBlockOfTheirSizeClassOrAFewTimesLarger) {
  ChunkMemory pool;
  EXPECT_EQ(ChunkMemory::BlockBytes(1), 4096u);
  EXPECT_EQ(ChunkMemory::BlockBytes(654464), kMiB);  // a result's last chunk
  EXPECT_EQ(ChunkMemory::BlockBytes(kMiB), kMiB);
  ChunkMemory::Block block = pool.Take(kMiB);
  std::byte* const address = block.data();
  block = {};
  EXPECT_NE(pool.Take(64 << 10).data(), address);    // small: from malloc, not a MiB
  ChunkMemory::Block shorter = pool.Take(300 << 10);  // a 512 KiB class: the MiB block
  EXPECT_EQ(shorter.data(), address);
  EXPECT_EQ(shorter.capacity(), kMiB);
  shorter = {};
  EXPECT_EQ(pool.Take(200 << 10).data(), address);  // the 256 KiB class: 4 times smaller
}

TEST(ChunkMemoryTest, PrefillTopsUpToItsShareOnce) {
  ChunkMemory pool;
  const std::unique_ptr<Backend> cpu = CreateCpuBackend(1);
  pool.Prefill(kMiB, *cpu);
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
  ChunkMemory::Block block = pool.Take(kMiB);
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes - kMiB);
  EXPECT_EQ(block.pin(), nullptr);  // the CPU backend pins nothing
  pool.Prefill(kMiB, *cpu);  // one block short: one more
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
  pool.Prefill(kMiB, *cpu);  // full: none
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
  pool.Prefill(64 << 10, *cpu);  // a class left to malloc: nothing kept
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kPrefillBytes);
}

TEST(ChunkMemoryTest, KeepsAtMostTheCap) {
  ChunkMemory pool;
  constexpr size_t kBlock = 4 * kMiB;
  constexpr size_t kBlocks = ChunkMemory::kMaxCachedBytes / kBlock + 2;
  std::vector<ChunkMemory::Block> taken;
  std::vector<std::byte*> addresses;
  for (size_t i = 0; i < kBlocks; ++i) {
    taken.push_back(pool.Take(kBlock));
    addresses.push_back(taken.back().data());
  }
  taken.clear();
  EXPECT_EQ(pool.cached_bytes(), ChunkMemory::kMaxCachedBytes);
  // kMaxCachedBytes worth were kept; the pool hands them out again.
  size_t reused = 0;
  for (size_t i = 0; i < kBlocks; ++i) {
    taken.push_back(pool.Take(kBlock));
    for (std::byte* address : addresses) reused += taken.back().data() == address;
  }
  EXPECT_EQ(reused, ChunkMemory::kMaxCachedBytes / kBlock);
}

}  // namespace
}  // namespace gpucompute
