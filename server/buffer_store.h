// Stored buffers: arrays that outlive a request (uploads and keep_on_device
// results). Bytes are reserved against the quota before any memory is allocated,
// so an over-quota request fails early, and nothing is ever evicted: a buffer
// disappears only through Delete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/array.h"

namespace gpucompute {

// The longest name a stored buffer may have (upload header.name, output.buffer_name).
inline constexpr size_t kMaxBufferNameBytes = 256;

// INVALID_ARGUMENT naming `field` when `name` is longer than kMaxBufferNameBytes.
absl::Status CheckBufferName(absl::string_view name, absl::string_view field);

struct StoredBuffer {
  std::string id;
  std::string name;
  std::string owner;  // principal that stored it ("" when auth is off)
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
    Reservation(BufferStore* store, uint64_t bytes, std::string principal)
        : store_(store), bytes_(bytes), principal_(std::move(principal)) {}
    void Release();
    BufferStore* store_ = nullptr;
    uint64_t bytes_ = 0;
    std::string principal_;
  };

  // principal_quota_bytes 0: no per-principal limit.
  explicit BufferStore(uint64_t quota_bytes, uint64_t principal_quota_bytes = 0)
      : quota_bytes_(quota_bytes), principal_quota_bytes_(principal_quota_bytes) {}

  // RESOURCE_EXHAUSTED naming the quota when `bytes` do not fit in the global or
  // the principal's quota; `what` names the request (e.g. "upload 'weights'").
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::string_view what,
                                      absl::string_view principal = "");
  // Stores `array` under a new unguessable id, owned by the reservation's
  // principal. The reservation must cover it.
  absl::StatusOr<StoredBuffer> Commit(Reservation reservation, std::string name,
                                      std::shared_ptr<Array> array);
  // A buffer of `principal`. NOT_FOUND naming `field` when the id is unknown or
  // belongs to another principal: ids must not be probeable.
  absl::StatusOr<StoredBuffer> Get(absl::string_view id, absl::string_view field,
                                   absl::string_view principal = "") const;
  // Returns the bytes freed.
  absl::StatusOr<uint64_t> Delete(absl::string_view id, absl::string_view principal = "");
  // The principal's buffers, oldest first.
  std::vector<StoredBuffer> List(absl::string_view principal = "") const;

  // All principals together.
  uint64_t used_bytes() const;
  uint64_t used_bytes(absl::string_view principal) const;
  uint64_t quota_bytes() const { return quota_bytes_; }
  size_t count() const;

 private:
  void Unreserve(uint64_t bytes, const std::string& principal);

  const uint64_t quota_bytes_;
  const uint64_t principal_quota_bytes_;
  mutable absl::Mutex mu_;
  // Bytes of stored buffers plus outstanding reservations.
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, uint64_t> used_by_principal_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, StoredBuffer> buffers_ ABSL_GUARDED_BY(mu_);
};

// 128 random bits as 32 lowercase hex digits, from the OS entropy source.
std::string NewBufferId();

}  // namespace gpucompute
