#include "server/buffer_store.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpucompute {

absl::Status CheckBufferName(absl::string_view name, absl::string_view field) {
  if (name.size() > kMaxBufferNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", name.size(),
                                                   " bytes; the limit is ", kMaxBufferNameBytes));
  }
  return absl::OkStatus();
}

BufferStore::Reservation& BufferStore::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    principal_ = std::move(other.principal_);
  }
  return *this;
}

void BufferStore::Reservation::Release() {
  if (store_ != nullptr) store_->Unreserve(bytes_, principal_);
  store_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<BufferStore::Reservation> BufferStore::Reserve(uint64_t bytes,
                                                              absl::string_view what,
                                                              absl::string_view principal) {
  absl::MutexLock lock(&mu_);
  if (bytes > quota_bytes_ - used_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs ", bytes, " bytes but the buffer quota (buffer_quota_bytes ", quota_bytes_,
        ") has ", quota_bytes_ - used_bytes_, " bytes left; delete buffers to make room"));
  }
  uint64_t& mine = used_by_principal_[principal];
  if (principal_quota_bytes_ > 0 && bytes > principal_quota_bytes_ - mine) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs ", bytes, " bytes but the caller's quota (principal_quota_bytes ",
        principal_quota_bytes_, ") has ", principal_quota_bytes_ - mine,
        " bytes left; delete buffers to make room"));
  }
  used_bytes_ += bytes;
  mine += bytes;
  return Reservation(this, bytes, std::string(principal));
}

void BufferStore::Unreserve(uint64_t bytes, const std::string& principal) {
  absl::MutexLock lock(&mu_);
  used_bytes_ -= bytes;
  used_by_principal_[principal] -= bytes;
}

absl::StatusOr<StoredBuffer> BufferStore::Commit(Reservation reservation, std::string name,
                                                 std::shared_ptr<Array> array) {
  if (reservation.store_ != this || reservation.bytes_ < array->bytes()) {
    return absl::InternalError("buffer committed without a matching quota reservation");
  }
  StoredBuffer buffer{NewBufferId(), std::move(name), reservation.principal_, std::move(array),
                      absl::Now()};
  absl::MutexLock lock(&mu_);
  // The reservation's bytes now belong to the stored buffer.
  const uint64_t unused = reservation.bytes_ - buffer.array->bytes();
  used_bytes_ -= unused;
  used_by_principal_[buffer.owner] -= unused;
  reservation.store_ = nullptr;
  buffers_.emplace(buffer.id, buffer);
  return buffer;
}

absl::StatusOr<StoredBuffer> BufferStore::Get(absl::string_view id, absl::string_view field,
                                              absl::string_view principal) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end() || it->second.owner != principal) {
    return absl::NotFoundError(absl::StrCat(field, " '", id, "' is not a stored buffer"));
  }
  return it->second;
}

absl::StatusOr<uint64_t> BufferStore::Delete(absl::string_view id, absl::string_view principal) {
  std::shared_ptr<Array> released;  // freed after the lock is dropped
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end() || it->second.owner != principal) {
    return absl::NotFoundError(absl::StrCat("buffer_id '", id, "' is not a stored buffer"));
  }
  const uint64_t bytes = it->second.array->bytes();
  released = std::move(it->second.array);
  used_by_principal_[it->second.owner] -= bytes;
  buffers_.erase(it);
  used_bytes_ -= bytes;
  return bytes;
}

std::vector<StoredBuffer> BufferStore::List(absl::string_view principal) const {
  absl::MutexLock lock(&mu_);
  std::vector<StoredBuffer> result;
  for (const auto& [id, buffer] : buffers_) {
    if (buffer.owner == principal) result.push_back(buffer);
  }
  std::sort(result.begin(), result.end(),
            [](const StoredBuffer& a, const StoredBuffer& b) { return a.created < b.created; });
  return result;
}

uint64_t BufferStore::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_bytes_;
}

uint64_t BufferStore::used_bytes(absl::string_view principal) const {
  absl::MutexLock lock(&mu_);
  auto it = used_by_principal_.find(principal);
  return it == used_by_principal_.end() ? 0 : it->second;
}

size_t BufferStore::count() const {
  absl::MutexLock lock(&mu_);
  return buffers_.size();
}

std::string NewBufferId() {
  std::random_device entropy;
  std::string raw(16, '\0');
  for (size_t i = 0; i < raw.size(); i += 4) {
    const uint32_t word = entropy();
    for (size_t b = 0; b < 4; ++b) raw[i + b] = static_cast<char>((word >> (8 * b)) & 0xff);
  }
  return absl::BytesToHexString(raw);
}

}  // namespace gpucompute
