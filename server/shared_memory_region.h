// One shared-memory region a same-host client registered: host memory mapped
// from a POSIX shared-memory object (and pinned for the GPU where the backend
// can), or device memory opened from a CUDA IPC handle. Operands and results are
// views of it (kernels/array_view.h) that keep it mapped; once the last view and
// the registry let go it is unpinned and unmapped, and then the callbacks that
// wait for that (Unregister) run.
//
// A client may shrink its shared-memory object under the server's mapping; the
// server would then take SIGBUS on the next access. Every access first checks
// the object's size, and a SIGBUS inside a mapped region (a shrink that raced the
// check) replaces the mapping with zero pages and marks the region, as Wayland's
// wl_shm does: the request fails with FAILED_PRECONDITION, the server carries on.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/array.h"
#include "kernels/backend.h"

namespace gpucompute {

// Mapped regions at once, all callers (the SIGBUS guard's fixed table).
inline constexpr int kMaxMappedRegions = 4096;

// Whether the POSIX shared-memory object `key` is still the object `object`
// ("DEV:INODE", SharedMemoryRegion::object()): false once it was unlinked.
bool SystemObjectExists(const std::string& key, absl::string_view object);

class SharedMemoryRegion : public std::enable_shared_from_this<SharedMemoryRegion> {
 public:
  // `byte_size` bytes from byte `offset` of the POSIX shared-memory object `key`
  // ("/name"), mapped read-write and pinned through `backend`, for a caller
  // running as `caller_uid`. NOT_FOUND when no such object exists on this host,
  // PERMISSION_DENIED when the object belongs to another user than the caller
  // (uid 0 may register any: it could open any itself), INVALID_ARGUMENT when it
  // is smaller than offset + byte_size or the key is malformed. The object's
  // descriptor is closed once mapped: a region holds no file descriptor.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> MapSystem(Backend& backend,
                                                                       const std::string& key,
                                                                       uint64_t offset,
                                                                       uint64_t byte_size,
                                                                       uint32_t caller_uid);
  // `byte_size` bytes from byte `offset` of the allocation a CUDA IPC handle names.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> OpenCuda(Backend& backend,
                                                                      absl::string_view handle,
                                                                      absl::string_view pci_bus_id,
                                                                      uint64_t offset,
                                                                      uint64_t byte_size);
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  // `shape` elements of `dtype` from byte `offset`: INVALID_ARGUMENT naming
  // `field` when the shape is malformed or over `max_elements`, or the elements do
  // not lie within the region or are not aligned to the element size;
  // FAILED_PRECONDITION when the region is no longer usable.
  absl::StatusOr<std::shared_ptr<Array>> View(DType dtype, const Shape& shape, uint64_t offset,
                                              int64_t max_elements, absl::string_view field);
  // OK while the region may be used: FAILED_PRECONDITION naming `field` once its
  // shared-memory object was shrunk, or unlinked (its creator ended or removed it).
  absl::Status CheckUsable(absl::string_view field) const;
  // After a request used it: FAILED_PRECONDITION naming `field` when the object
  // shrank meanwhile (the request may have read zeros); an unlink does not matter
  // then, the mapping held the bytes.
  absl::Status CheckIntact(absl::string_view field) const;
  // Runs `callback` once the region is unmapped (at once when it already is gone
  // from every holder but the caller: then when the caller's reference drops).
  void WhenReleased(absl::AnyInvocable<void() &&> callback);
  // Whether the region's shared-memory object was unlinked: its creator ended (or
  // removed it), so no one can use the region any more.
  bool Orphaned() const;

  // System regions: which object is mapped ("DEV:INODE"), the same whatever
  // name it is registered under; "" for CUDA regions.
  const std::string& object() const { return object_; }
  uint64_t byte_size() const { return byte_size_; }
  int device() const { return device_; }  // kHostDevice or a CUDA ordinal
  bool pinned() const { return pin_ != nullptr; }

 private:
  SharedMemoryRegion() = default;

  // The object's status by its name: unset when the name is gone or names
  // another object now (the region's was unlinked).
  std::optional<struct stat> StatObject() const;

  std::string key_;        // system regions; for messages
  std::string object_;     // system regions: "DEV:INODE", told from a later object of that name
  uint64_t object_end_ = 0;  // system regions: the object must keep this many bytes
  void* mapping_ = nullptr;  // system regions: what mmap returned
  size_t mapping_bytes_ = 0;
  int guard_slot_ = -1;    // system regions: the SIGBUS guard's table entry
  std::shared_ptr<void> pin_;     // host registration with the driver, if any
  std::shared_ptr<void> device_memory_;  // CUDA regions: the opened IPC memory
  char* data_ = nullptr;   // the region's first byte
  uint64_t byte_size_ = 0;
  int device_ = kHostDevice;

  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> on_release_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute
