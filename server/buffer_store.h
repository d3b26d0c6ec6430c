// Stored buffers: arrays that outlive a request (uploads and keep_on_device
// results). Bytes are reserved against the quota before any memory is allocated,
// so an over-quota request fails early, and nothing is ever evicted: a buffer
// disappears only through Delete. Its charge (data, metadata, one buffer of its
// owner's count) is given back only when the last reader (a Download, a compute
// request) lets go of its memory, so Delete cannot bypass the quota.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_id.h"
#include "kernels/array.h"

namespace gpucompute {

// The longest name a stored buffer may have (upload header.name, output.buffer_name).
inline constexpr size_t kMaxBufferNameBytes = 256;

// Quota charged for one stored buffer's metadata (id, shape, map entry) on top of
// its data and its name bytes: without it, many tiny buffers fit any quota.
inline constexpr uint64_t kBufferOverheadBytes = 128;

// INVALID_ARGUMENT naming `field` when `name` is longer than kMaxBufferNameBytes.
absl::Status CheckBufferName(absl::string_view name, absl::string_view field);

// kInstanceIdLength lowercase hex digits from the OS entropy source.
std::string NewInstanceId();
// `instance_id` followed by 96 random bits in hex: kBufferIdLength digits.
std::string NewBufferId(absl::string_view instance_id);

// INVALID_ARGUMENT naming `field` when `id` is longer than any buffer id.
absl::Status CheckBufferId(absl::string_view id, absl::string_view field);

struct StoredBuffer {
  std::string id;
  std::string name;
  std::string owner;  // principal that stored it ("" when auth is off)
  std::shared_ptr<Array> array;
  absl::Time created;
};

class BufferStore {
  // What one buffer counts against its owner's and the global limits.
  struct Charge {
    uint64_t data = 0;
    uint64_t metadata = 0;
    int64_t buffers = 0;
  };

 public:
  // Quota bytes held for a buffer that is not stored yet; returned on destruction
  // unless handed to Commit.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    uint64_t bytes() const { return charge_.data; }

   private:
    friend class BufferStore;
    Reservation(BufferStore* store, Charge charge, std::string principal)
        : store_(store), charge_(charge), principal_(std::move(principal)) {}
    void Release();
    BufferStore* store_ = nullptr;
    Charge charge_;
    std::string principal_;
  };

  // principal_quota_bytes 0: no per-principal limit; max_buffers_per_owner 0: no
  // count limit; overhead_bytes: metadata charged per buffer on top of its name bytes.
  // instance_id: this replica's (NewInstanceId), the prefix of every id it issues.
  explicit BufferStore(uint64_t quota_bytes, uint64_t principal_quota_bytes = 0,
                       int64_t max_buffers_per_owner = 0, uint64_t overhead_bytes = 0,
                       std::string instance_id = NewInstanceId())
      : quota_bytes_(quota_bytes),
        principal_quota_bytes_(principal_quota_bytes),
        max_buffers_per_owner_(max_buffers_per_owner),
        overhead_bytes_(overhead_bytes),
        instance_id_(std::move(instance_id)) {}

  // RESOURCE_EXHAUSTED naming the quota when `bytes` and the metadata of a buffer
  // named `name` do not fit in the global or the principal's quota, or when the
  // principal already holds max_buffers_per_owner buffers; `what` names the
  // request (e.g. "upload 'weights'"). Everything the buffer will count is
  // charged here, so that Commit never takes usage past a quota.
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::string_view what,
                                      absl::string_view principal = "",
                                      absl::string_view name = "");
  // Stores `array` under a new unguessable id, owned by the reservation's
  // principal. The reservation must cover it and its name.
  absl::StatusOr<StoredBuffer> Commit(Reservation reservation, std::string name,
                                      std::shared_ptr<Array> array);
  // A buffer of `principal`. NOT_FOUND naming `field` when the id is unknown or
  // belongs to another principal: ids must not be probeable. FAILED_PRECONDITION
  // naming the owner when another replica issued the id (ForeignBufferError).
  absl::StatusOr<StoredBuffer> Get(absl::string_view id, absl::string_view field,
                                   absl::string_view principal = "") const;
  // Removes the id at once; returns the data bytes that are freed once the last
  // reader lets go.
  absl::StatusOr<uint64_t> Delete(absl::string_view id, absl::string_view principal = "");

  // Where a page of List starts: after the buffer created at `created` with `id`.
  struct ListCursor {
    absl::Time created;
    std::string id;
  };
  // The principal's buffers, oldest first (ties by id), after `after` when given,
  // at most `limit` of them.
  std::vector<StoredBuffer> List(absl::string_view principal = "",
                                 const ListCursor* after = nullptr,
                                 size_t limit = SIZE_MAX) const;

  // Data bytes of stored buffers, of reservations and of deleted buffers still
  // being read; all principals together, or one.
  uint64_t used_bytes() const;
  uint64_t used_bytes(absl::string_view principal) const;
  // The quota bytes a principal's buffers count for their metadata, on top of used_bytes.
  uint64_t metadata_bytes(absl::string_view principal) const;
  uint64_t quota_bytes() const { return quota_bytes_; }
  size_t count() const;
  const std::string& instance_id() const { return instance_id_; }

 private:
  // The quota bytes left under `limit` with `used` charged; 0, never a wrapped
  // count, when usage reached the limit.
  static uint64_t Left(uint64_t limit, const Charge& used) {
    const uint64_t charged = used.data + used.metadata;
    return charged >= limit ? 0 : limit - charged;
  }
  // What a buffer of `bytes` named `name` counts for its metadata.
  uint64_t MetadataBytes(absl::string_view name) const {
    return overhead_bytes_ == 0 ? 0 : overhead_bytes_ + name.size();
  }
  std::string MetadataNote() const;
  // FAILED_PRECONDITION when `id` is well formed but was issued by another instance.
  absl::Status CheckIssuedHere(absl::string_view id, absl::string_view field) const;
  void Uncharge(const Charge& charge, const std::string& principal) ABSL_LOCKS_EXCLUDED(mu_);
  void ChargeLocked(const Charge& charge, const std::string& principal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnchargeLocked(const Charge& charge, const std::string& principal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `array` whose last holder gives `charge` back, after freeing the memory.
  std::shared_ptr<Array> HoldingCharge(std::shared_ptr<Array> array, Charge charge,
                                       std::string principal);

  const uint64_t quota_bytes_;
  const uint64_t principal_quota_bytes_;
  const int64_t max_buffers_per_owner_;
  const uint64_t overhead_bytes_;
  const std::string instance_id_;
  mutable absl::Mutex mu_;
  // Stored buffers (also deleted ones still read) plus outstanding reservations.
  Charge used_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Charge> used_by_principal_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, StoredBuffer> buffers_ ABSL_GUARDED_BY(mu_);
};

// Whether `status` is Reserve's refusal over max_buffers_per_owner (counted apart
// from the byte quotas in the rejection metrics).
bool IsBufferCountRefusal(const absl::Status& status);

}  // namespace gpucompute
