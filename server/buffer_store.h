// Stored buffers: arrays that outlive a request (uploads and keep_on_device
// results). Bytes are reserved against the quota before any memory is allocated,
// so an over-quota request fails early, and nothing is ever evicted: a buffer
// disappears only through Delete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/array.h"

namespace gpucompute {

struct StoredBuffer {
  std::string id;
  std::string name;
  std::shared_ptr<Array> array;
  absl::Time created;
};

class BufferStore {
 public:
  // Quota bytes held for a buffer that is not stored yet; returned on destruction
  // unless handed to Commit.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class BufferStore;
    Reservation(BufferStore* store, uint64_t bytes) : store_(store), bytes_(bytes) {}
    void Release();
    BufferStore* store_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit BufferStore(uint64_t quota_bytes) : quota_bytes_(quota_bytes) {}

  // RESOURCE_EXHAUSTED naming the quota when `bytes` do not fit; `what` names the
  // request (e.g. "upload 'weights'").
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::string_view what);
  // Stores `array` under a new unguessable id. The reservation must cover it.
  absl::StatusOr<StoredBuffer> Commit(Reservation reservation, std::string name,
                                      std::shared_ptr<Array> array);
  // NOT_FOUND naming `field` when the id is unknown.
  absl::StatusOr<StoredBuffer> Get(absl::string_view id, absl::string_view field) const;
  // Returns the bytes freed.
  absl::StatusOr<uint64_t> Delete(absl::string_view id);
  std::vector<StoredBuffer> List() const;

  uint64_t used_bytes() const;
  uint64_t quota_bytes() const { return quota_bytes_; }
  size_t count() const;

 private:
  void Unreserve(uint64_t bytes);

  const uint64_t quota_bytes_;
  mutable absl::Mutex mu_;
  // Bytes of stored buffers plus outstanding reservations.
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, StoredBuffer> buffers_ ABSL_GUARDED_BY(mu_);
};

// 128 random bits as 32 lowercase hex digits, from the OS entropy source.
std::string NewBufferId();

}  // namespace gpucompute
