// The memory a downloaded result lands in: allocated uninitialised and, when large,
// backed by huge pages faulted in by several threads at once.
//
// A result written into fresh memory pays the kernel's page faults, each of them
// zeroing a page: with 4 KiB pages that took more CPU than the copy into it
// (bench/BULK_TRANSFER.md: page faults were half the C++ client's download CPU, and a
// std::string result was zero-filled once more, on one thread, before the first
// byte could land). Here a large block is mapped with MADV_HUGEPAGE and populated by
// up to kMaxPopulateThreads threads before it is handed out, so the receiving thread
// writes into resident memory. Populating in the background instead, while the data
// arrives, measured no faster on the H100 machine (2 GiB downloads over 8 stripes:
// 4.6-4.9 GB/s against 4.8-5.7 populated first, same session).
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
  // Blocks from this size are mapped on their own (huge pages, parallel populate);
  // smaller ones come from the heap.
  static constexpr size_t kMappedFromBytes = size_t{8} << 20;
  // Each populating thread takes at least this much.
  static constexpr size_t kPopulateSliceBytes = size_t{128} << 20;
  static constexpr int kMaxPopulateThreads = 8;

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
