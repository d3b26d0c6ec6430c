#include "client/host_bytes.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

namespace gpucompute::client {
namespace {

constexpr size_t kPageBytes = 4096;

// Faults [begin, begin + bytes) in (resident, zeroed by the kernel). MADV_POPULATE_WRITE
// (Linux 5.14) does it in one call; older kernels get one write per page.
void Populate(char* begin, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (size_t at = 0; at < bytes; at += kPageBytes) begin[at] = 0;
}

}  // namespace

void HostBytesRelease::operator()(char* p) const {
  if (mapped_bytes == 0) {
    delete[] p;
  } else {
    munmap(p, mapped_bytes);
  }
}

HostBytes HostBytes::Allocate(size_t bytes) {
  HostBytes block;
  block.size_ = bytes;
  if (bytes < kMappedFromBytes) {
    block.memory_ = std::unique_ptr<char, HostBytesRelease>(new char[std::max<size_t>(bytes, 1)]);
    return block;
  }
  const size_t mapped = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  char* memory = static_cast<char*>(p);
  block.memory_ = std::unique_ptr<char, HostBytesRelease>(memory, HostBytesRelease{mapped});
  // Not fatal where transparent huge pages are off: 4 KiB pages, populated all the same.
  (void)madvise(memory, mapped, MADV_HUGEPAGE);
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::clamp<size_t>(mapped / kPopulateSliceBytes, 1,
                                            std::min<size_t>(kMaxPopulateThreads, hardware));
  // Slices on huge-page boundaries, so that no 2 MiB page is split between threads.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t slice = (mapped / threads + kHugePage - 1) / kHugePage * kHugePage;
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads && t * slice < mapped; ++t) {
    workers.emplace_back(
        [=] { Populate(memory + t * slice, std::min(slice, mapped - t * slice)); });
  }
  Populate(memory, std::min(slice, mapped));
  for (std::thread& worker : workers) worker.join();
  return block;
}

HostBytes HostBytes::CopyOf(absl::string_view bytes) {
  HostBytes block = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(block.data(), bytes.data(), bytes.size());
  return block;
}

}  // namespace gpucompute::client
