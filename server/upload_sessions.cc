#include "server/upload_sessions.h"

#include <algorithm>
#include <iterator>

namespace gpucompute {

absl::Status UploadSession::BeginWrite() {
  absl::MutexLock lock(&mu_);
  if (stored_) {
    return absl::FailedPreconditionError(
        "the upload session was already stored by another of its streams; a stored buffer "
        "cannot be written: start a new session (a new session_token) for other bytes");
  }
  ++writers_;
  return absl::OkStatus();
}

void UploadSession::EndWrite(uint64_t begin, uint64_t end, bool copied) {
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

std::vector<std::pair<uint64_t, uint64_t>> UploadSession::ReceivedRanges() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [begin, end] : received_) ranges.emplace_back(begin, end - begin);
  return ranges;
}

absl::StatusOr<std::optional<BufferStore::Reservation>> UploadSession::TakeIfComplete() {
  absl::MutexLock lock(&mu_);
  if (stored_) {
    return absl::FailedPreconditionError(
        "the upload session was already stored by another of its streams");
  }
  // A copy still in flight belongs to a stream that stores the buffer when it ends.
  if (received_bytes_ != array_->bytes() || writers_ > 0) return std::nullopt;
  stored_ = true;
  return std::exchange(reservation_, std::nullopt);
}

std::shared_ptr<UploadSession> UploadSessions::Attach(const std::string& principal,
                                                      const std::string& token) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(Key(principal, token));
  if (it == sessions_.end()) return nullptr;
  absl::MutexLock session_lock(&it->second->mu_);
  ++it->second->streams_;
  return it->second;
}

absl::Status UploadSessions::Add(const std::shared_ptr<UploadSession>& session) {
  absl::MutexLock lock(&mu_);
  if (!sessions_.try_emplace(Key(session->principal(), session->token()), session).second) {
    return absl::AbortedError(
        "another stream created this upload session meanwhile; start the session with one "
        "stream, then add the others");
  }
  absl::MutexLock session_lock(&session->mu_);
  ++session->streams_;
  return absl::OkStatus();
}

void UploadSessions::Detach(const std::shared_ptr<UploadSession>& session) {
  {
    absl::MutexLock lock(&session->mu_);
    --session->streams_;
    session->last_used_ = absl::Now();
  }
  std::string key = Key(session->principal(), session->token());
  timer_.Schedule(absl::Now() + ttl_, [this, key = std::move(key)] { ExpireIfUnused(key); });
}

void UploadSessions::ExpireIfUnused(const std::string& key) {
  std::shared_ptr<UploadSession> dropped;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  absl::MutexLock session_lock(&it->second->mu_);
  if (it->second->streams_ > 0 || absl::Now() - it->second->last_used_ < ttl_) return;
  dropped = std::move(it->second);
  sessions_.erase(it);
}

void UploadSessions::Remove(const UploadSession& session) {
  std::shared_ptr<UploadSession> removed;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(Key(session.principal(), session.token()));
  if (it == sessions_.end() || it->second.get() != &session) return;
  removed = std::move(it->second);
  sessions_.erase(it);
}

std::shared_ptr<UploadSession> UploadSessions::Find(const std::string& principal,
                                                    const std::string& token) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(Key(principal, token));
  return it == sessions_.end() ? nullptr : it->second;
}

size_t UploadSessions::count() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace gpucompute
