// The memory a downloaded result lands in: allocated uninitialised and, when large,
// mapped on its own with huge pages.
//
// A result written into fresh memory pays the kernel's page faults, each of them
// zeroing a page: with 4 KiB pages that took more CPU than the copy into it, and a
// std::string result was zero-filled once more, on one thread, before the first byte
// could land. Here a large block is mapped with
// MADV_HUGEPAGE (a fault per 2 MiB) and handed out untouched: the threads copying the
// data in fault its pages as they go, beside the network. Populating it first, on 8
// threads, held every stripe back until it was done, and cost striped downloads about
// half their rate.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/strings/string_view.h"

namespace gpucompute::client {

// Frees a HostBytes block: unmaps a mapped one, deletes a heap one.
struct HostBytesRelease {
  size_t mapped_bytes = 0;  // 0: heap memory
  void operator()(char* p) const;
};

class HostBytes {
 public:
  // Blocks from this size are mapped on their own (huge pages); smaller ones come
  // from the heap.
  static constexpr size_t kMappedFromBytes = size_t{8} << 20;

  HostBytes() = default;
  // `bytes` bytes, contents unspecified.
  static HostBytes Allocate(size_t bytes);
  static HostBytes CopyOf(absl::string_view bytes);

  char* data() { return memory_.get(); }
  const char* data() const { return memory_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  absl::string_view view() const { return {memory_.get(), size_}; }
  operator absl::string_view() const { return view(); }  // NOLINT: reads as bytes

  friend bool operator==(const HostBytes& a, absl::string_view b) { return a.view() == b; }

 private:
  std::unique_ptr<char, HostBytesRelease> memory_;
  size_t size_ = 0;
};

}  // namespace gpucompute::client
