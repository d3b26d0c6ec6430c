#include "server/resumable_uploads.h"

#include <algorithm>
#include <iterator>

#include "common/error_reason.h"

namespace gpucompute {

absl::Status ResumableUpload::BeginWrite() {
  absl::MutexLock lock(&mu_);
  if (stored_) {
    return WithReason(absl::FailedPreconditionError(
        "the resumable upload was already stored by another of its streams; a stored buffer "
        "cannot be written: start a new upload (a new session_token) for other bytes"),
                      reason::kUploadAlreadyStored);
  }
  ++writers_;
  return absl::OkStatus();
}

void ResumableUpload::EndWrite(uint64_t begin, uint64_t end, bool copied) {
  absl::MutexLock lock(&mu_);
  --writers_;
  last_used_ = absl::Now();
  if (!copied || begin >= end) return;
  // Merge [begin, end) with every range it overlaps or touches.
  auto it = received_.upper_bound(begin);
  if (it != received_.begin() && std::prev(it)->second >= begin) --it;
  while (it != received_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    received_bytes_ -= it->second - it->first;
    it = received_.erase(it);
  }
  received_.emplace(begin, end);
  received_bytes_ += end - begin;
}

std::vector<std::pair<uint64_t, uint64_t>> ResumableUpload::ReceivedRanges() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [begin, end] : received_) ranges.emplace_back(begin, end - begin);
  return ranges;
}

std::optional<BufferStore::Reservation> ResumableUpload::TakeIfComplete() {
  absl::MutexLock lock(&mu_);
  // Stored by another stream: this one's bytes were all in before (BeginWrite refuses
  // writes after), so it ends as the other stripes of an upload do, without the id.
  if (stored_) return std::nullopt;
  // A copy still in flight belongs to a stream that stores the buffer when it ends.
  if (received_bytes_ != array_->bytes() || writers_ > 0) return std::nullopt;
  stored_ = true;
  return std::exchange(reservation_, std::nullopt);
}

std::shared_ptr<ResumableUpload> ResumableUploads::Attach(const std::string& principal,
                                                      const std::string& token) {
  absl::MutexLock lock(&mu_);
  auto it = uploads_.find(Key(principal, token));
  if (it == uploads_.end()) return nullptr;
  absl::MutexLock upload_lock(&it->second->mu_);
  ++it->second->streams_;
  return it->second;
}

absl::Status ResumableUploads::Add(const std::shared_ptr<ResumableUpload>& upload) {
  absl::MutexLock lock(&mu_);
  if (!uploads_.try_emplace(Key(upload->principal(), upload->token()), upload).second) {
    return absl::AbortedError(
        "another stream created this upload session meanwhile; start the session with one "
        "stream, then add the others");
  }
  absl::MutexLock upload_lock(&upload->mu_);
  ++upload->streams_;
  return absl::OkStatus();
}

void ResumableUploads::Detach(const std::shared_ptr<ResumableUpload>& upload) {
  {
    absl::MutexLock lock(&upload->mu_);
    --upload->streams_;
    upload->last_used_ = absl::Now();
  }
  std::string key = Key(upload->principal(), upload->token());
  timer_.Schedule(absl::Now() + ttl_, [this, key = std::move(key)] { ExpireIfUnused(key); });
}

void ResumableUploads::ExpireIfUnused(const std::string& key) {
  std::shared_ptr<ResumableUpload> dropped;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = uploads_.find(key);
  if (it == uploads_.end()) return;
  absl::MutexLock upload_lock(&it->second->mu_);
  if (it->second->streams_ > 0 || absl::Now() - it->second->last_used_ < ttl_) return;
  dropped = std::move(it->second);
  uploads_.erase(it);
}

void ResumableUploads::Remove(const ResumableUpload& upload) {
  std::shared_ptr<ResumableUpload> removed;
  absl::MutexLock lock(&mu_);
  auto it = uploads_.find(Key(upload.principal(), upload.token()));
  if (it == uploads_.end() || it->second.get() != &upload) return;
  removed = std::move(it->second);
  uploads_.erase(it);
}

std::shared_ptr<ResumableUpload> ResumableUploads::Find(const std::string& principal,
                                                    const std::string& token) const {
  absl::MutexLock lock(&mu_);
  auto it = uploads_.find(Key(principal, token));
  return it == uploads_.end() ? nullptr : it->second;
}

size_t ResumableUploads::count() const {
  absl::MutexLock lock(&mu_);
  return uploads_.size();
}

}  // namespace gpucompute
