// Result chunks copied off a GPU land in pinned ChunkMemory blocks (the DMA engine
// writes the slice gRPC sends from): the bytes are the array's, the block comes back
// to the pool pinned, and a pinned block is reused without pinning it again. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "server/chunk_memory.h"
#include "tests/testing/arrays.h"
#include "tests/testing/gpu_present.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

class GpuChunkMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    absl::StatusOr<std::unique_ptr<Backend>> made = CreateCudaBackend(BackendOptions{});
    ASSERT_TRUE(made.ok()) << made.status().message();
    backend_ = *std::move(made);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_F(GpuChunkMemoryTest, DeviceChunksLandInPinnedBlocksByteExact) {
  const int64_t n = int64_t{3} << 20;  // 12 MiB of float32: several 4 MiB chunks
  const std::vector<float> values = test::Uniform<float>(n, -1, 1, test::FreshSeed());
  const std::shared_ptr<Array> array = test::Put(*backend_, {n}, values);
  const uint64_t chunk = uint64_t{4} << 20;
  const char* host = reinterpret_cast<const char*>(values.data());
  for (uint64_t offset = 0; offset < array->bytes(); offset += chunk) {
    absl::Duration took = absl::ZeroDuration();
    const uint64_t bytes = std::min(chunk, array->bytes() - offset);
    absl::StatusOr<grpc::Slice> slice =
        ArrayPayloadSlice(*backend_, nullptr, array, offset, bytes, took);
    ASSERT_TRUE(slice.ok()) << slice.status().message();
    ASSERT_EQ(slice->size(), bytes);
    EXPECT_EQ(std::memcmp(slice->begin(), host + offset, bytes), 0) << "chunk at " << offset;
  }
  // The slices are gone: their blocks are back, pinned, and stay pinned when reused.
  ChunkMemory::Block block = ChunkMemory::Shared().Take(chunk);
  ASSERT_NE(block.pin(), nullptr);
  const void* const pin = block.pin().get();
  ChunkMemory::PinForCopies(*backend_, block);
  EXPECT_EQ(block.pin().get(), pin);
}

}  // namespace
}  // namespace gpucompute
