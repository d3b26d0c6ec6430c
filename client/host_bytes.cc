#include "client/host_bytes.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace gpucompute::client {
namespace {

constexpr size_t kPageBytes = 4096;

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
  // Not fatal where transparent huge pages are off: 4 KiB pages then.
  (void)madvise(memory, mapped, MADV_HUGEPAGE);
  return block;
}

HostBytes HostBytes::CopyOf(absl::string_view bytes) {
  HostBytes block = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(block.data(), bytes.data(), bytes.size());
  return block;
}

}  // namespace gpucompute::client
