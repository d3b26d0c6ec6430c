#include "server/buffer_store.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace gpucompute {

BufferStore::Reservation& BufferStore::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void BufferStore::Reservation::Release() {
  if (store_ != nullptr) store_->Unreserve(bytes_);
  store_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<BufferStore::Reservation> BufferStore::Reserve(uint64_t bytes,
                                                              absl::string_view what) {
  absl::MutexLock lock(&mu_);
  if (bytes > quota_bytes_ - used_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " needs ", bytes, " bytes but the buffer quota (buffer_quota_bytes ", quota_bytes_,
        ") has ", quota_bytes_ - used_bytes_, " bytes left; delete buffers to make room"));
  }
  used_bytes_ += bytes;
  return Reservation(this, bytes);
}

void BufferStore::Unreserve(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_bytes_ -= bytes;
}

absl::StatusOr<StoredBuffer> BufferStore::Commit(Reservation reservation, std::string name,
                                                 std::shared_ptr<Array> array) {
  if (reservation.store_ != this || reservation.bytes_ < array->bytes()) {
    return absl::InternalError("buffer committed without a matching quota reservation");
  }
  StoredBuffer buffer{NewBufferId(), std::move(name), std::move(array), absl::Now()};
  absl::MutexLock lock(&mu_);
  // The reservation's bytes now belong to the stored buffer.
  used_bytes_ -= reservation.bytes_ - buffer.array->bytes();
  reservation.store_ = nullptr;
  buffers_.emplace(buffer.id, buffer);
  return buffer;
}

absl::StatusOr<StoredBuffer> BufferStore::Get(absl::string_view id, absl::string_view field) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat(field, " '", id, "' is not a stored buffer"));
  }
  return it->second;
}

absl::StatusOr<uint64_t> BufferStore::Delete(absl::string_view id) {
  std::shared_ptr<Array> released;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer_id '", id, "' is not a stored buffer"));
  }
  const uint64_t bytes = it->second.array->bytes();
  released = std::move(it->second.array);
  buffers_.erase(it);
  used_bytes_ -= bytes;
  return bytes;
}

std::vector<StoredBuffer> BufferStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<StoredBuffer> result;
  result.reserve(buffers_.size());
  for (const auto& [id, buffer] : buffers_) result.push_back(buffer);
  std::sort(result.begin(), result.end(),
            [](const StoredBuffer& a, const StoredBuffer& b) { return a.created < b.created; });
  return result;
}

uint64_t BufferStore::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_bytes_;
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
