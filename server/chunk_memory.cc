#include "server/chunk_memory.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gpucompute {
namespace {

constexpr size_t kSmallestBlock = 4096;

}  // namespace

ChunkMemory& ChunkMemory::Shared() {
  static ChunkMemory* const pool = new ChunkMemory();
  return *pool;
}

size_t ChunkMemory::BlockBytes(size_t bytes) { return std::bit_ceil(std::max(bytes, kSmallestBlock)); }

ChunkMemory::Block ChunkMemory::Take(size_t bytes) {
  const size_t wanted = BlockBytes(bytes);
  return pool_->Take(wanted, wanted >= kSpareFromBytes ? wanted * kLargestSpareFactor : wanted);
}

void ChunkMemory::PinForCopies(Backend& backend, Block& block) {
  if (block.pin() != nullptr || block.capacity() < kPinFromBytes) return;
  absl::StatusOr<std::shared_ptr<void>> pin = backend.PinHostMemory(block.data(), block.capacity());
  if (pin.ok()) block.set_pin(*std::move(pin));
}

void ChunkMemory::Prefill(size_t chunk_bytes, Backend& backend) {
  const size_t block = BlockBytes(chunk_bytes);
  if (block < HostBlockPool::kMinBytes) return;  // malloc's, not kept
  const size_t want = std::max<size_t>(1, kPrefillBytes / block);
  std::vector<Block> fresh;
  for (size_t i = pool_->cached_blocks(block); i < want; ++i) {
    fresh.push_back(pool_->Fresh(block));
    if (fresh.back().data() == nullptr) break;
    std::memset(fresh.back().data(), 0, block);  // the page faults, now
    PinForCopies(backend, fresh.back());
  }
}  // the fresh blocks go to the pool

absl::StatusOr<grpc::Slice> ArrayPayloadSlice(Backend& backend,
                                              const std::shared_ptr<MemoryBudget>& host_budget,
                                              const std::shared_ptr<Array>& array,
                                              uint64_t offset, uint64_t n,
                                              absl::Duration& copy_time) {
  if (array->device() == kHostDevice) {
    auto* owner = new std::shared_ptr<Array>(array);
    return grpc::Slice(static_cast<char*>((*owner)->data()) + offset, n,
                       [](void* p) { delete static_cast<std::shared_ptr<Array>*>(p); }, owner);
  }
  // The copy's memory (recycled) and its charge go back when gRPC drops the slice.
  struct HostCopy {
    ChunkMemory::Block block;
    MemoryBudget::Charge charge;
  };
  auto copy = std::make_unique<HostCopy>();
  copy->block = ChunkMemory::Shared().Take(n);
  if (copy->block.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", n, " bytes of host memory for a result chunk"));
  }
  if (n >= ChunkMemory::kPinFromBytes) ChunkMemory::PinForCopies(backend, copy->block);
  if (host_budget != nullptr) {  // the block it got, whose size class may exceed n
    GC_ASSIGN_OR_RETURN(copy->charge, host_budget->Reserve(copy->block.capacity()));
  }
  const absl::Time start = absl::Now();
  GC_RETURN_IF_ERROR(backend.CopyFromArray(*array, offset, n, copy->block.data()));
  copy_time += absl::Now() - start;
  char* bytes = reinterpret_cast<char*>(copy->block.data());
  return grpc::Slice(bytes, n, [](void* p) { delete static_cast<HostCopy*>(p); },
                     copy.release());
}

}  // namespace gpucompute
