// Resumable uploads: a buffer uploaded by byte ranges over several streams, in
// turn (resumed after a broken one) or at once (striped), named on the wire by
// UploadHeader.session_token. One is keyed by (principal, the client's token), so
// that one caller cannot reach another's. It holds the buffer's quota reservation and memory
// from its first stream until it is stored (the stream that ends with every byte
// received commits it) or dropped: one that no stream has used for
// --upload_session_ttl is freed, checked when its last stream lets go.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/array.h"
#include "server/buffer_store.h"
#include "server/executor.h"

namespace gpucompute {

inline constexpr size_t kMinUploadTokenBytes = 16;
inline constexpr size_t kMaxUploadTokenBytes = 64;

// One buffer being uploaded by ranges.
class ResumableUpload {
 public:
  ResumableUpload(std::string principal, std::string token, std::string name,
                BufferStore::Reservation reservation, std::shared_ptr<Array> array)
      : principal_(std::move(principal)), token_(std::move(token)), name_(std::move(name)),
        array_(std::move(array)), reservation_(std::move(reservation)) {}

  const std::string& principal() const { return principal_; }
  const std::string& token() const { return token_; }
  const std::string& name() const { return name_; }
  const std::shared_ptr<Array>& array() const { return array_; }

  // A stream is about to copy into the array: FAILED_PRECONDITION once the
  // upload is stored, since a stored buffer is immutable. Each OK is followed
  // by one EndWrite.
  absl::Status BeginWrite();
  // The copy is over; when `copied`, bytes [begin, end) are in the array.
  void EndWrite(uint64_t begin, uint64_t end, bool copied);
  // The received ranges as (offset, length), in order, adjacent ones merged.
  std::vector<std::pair<uint64_t, uint64_t>> ReceivedRanges() const;
  // Once every byte arrived and no copy is in flight, the reservation to store
  // the buffer under, once; from then on the upload is stored. nullopt while
  // bytes are missing or being copied, and once stored.
  std::optional<BufferStore::Reservation> TakeIfComplete();

 private:
  friend class ResumableUploads;
  const std::string principal_;
  const std::string token_;
  const std::string name_;
  const std::shared_ptr<Array> array_;
  mutable absl::Mutex mu_;
  std::optional<BufferStore::Reservation> reservation_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> received_ ABSL_GUARDED_BY(mu_);  // begin -> end
  uint64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int writers_ ABSL_GUARDED_BY(mu_) = 0;  // copies in flight
  bool stored_ ABSL_GUARDED_BY(mu_) = false;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;  // attached streams
  absl::Time last_used_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

// The resumable uploads in progress, of every caller.
class ResumableUploads {
 public:
  explicit ResumableUploads(absl::Duration ttl) : ttl_(ttl) {}

  // The caller's upload, attached to one more stream; null when there is none.
  std::shared_ptr<ResumableUpload> Attach(const std::string& principal, const std::string& token);
  // A new upload, attached; ABORTED when another stream created it meanwhile.
  absl::Status Add(const std::shared_ptr<ResumableUpload>& upload);
  // A stream lets go; the upload is dropped if it stays unused for the ttl.
  void Detach(const std::shared_ptr<ResumableUpload>& upload);
  // The upload is stored: it goes.
  void Remove(const ResumableUpload& upload);
  // The caller's upload without attaching (UploadStatus); null when none.
  std::shared_ptr<ResumableUpload> Find(const std::string& principal, const std::string& token) const;
  size_t count() const;

 private:
  static std::string Key(const std::string& principal, const std::string& token) {
    return principal + '\0' + token;
  }
  void ExpireIfUnused(const std::string& key);

  const absl::Duration ttl_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ResumableUpload>> uploads_ ABSL_GUARDED_BY(mu_);
  // Last: stopped (joined) before the uploads its checks look at go away.
  Timer timer_;
};

}  // namespace gpucompute
