#include "server/buffer_store.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "server/echo.h"

namespace gpucompute {

absl::Status CheckBufferName(absl::string_view name, absl::string_view field) {
  if (name.size() > kMaxBufferNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", name.size(),
                                                   " bytes; the limit is ", kMaxBufferNameBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckBufferId(absl::string_view id, absl::string_view field) {
  if (id.size() > kBufferIdLength) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", id.size(),
                                                   " bytes; buffer ids have ", kBufferIdLength));
  }
  return absl::OkStatus();
}

BufferStore::Reservation& BufferStore::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    charge_ = std::exchange(other.charge_, Charge());
    principal_ = std::move(other.principal_);
  }
  return *this;
}

void BufferStore::Reservation::Release() {
  if (store_ != nullptr) store_->Uncharge(charge_, principal_);
  store_ = nullptr;
  charge_ = Charge();
}

std::string BufferStore::MetadataNote() const {
  if (overhead_bytes_ == 0) return "";
  return absl::StrCat(" (each buffer also counts ", overhead_bytes_,
                      " bytes of metadata plus its name)");
}

absl::StatusOr<BufferStore::Reservation> BufferStore::Reserve(uint64_t bytes,
                                                              absl::string_view what,
                                                              absl::string_view principal,
                                                              absl::string_view name) {
  const Charge charge{bytes, MetadataBytes(name), 1};
  // Saturating: a size near 2^64 must not wrap past the check below.
  const uint64_t needed =
      charge.data > UINT64_MAX - charge.metadata ? UINT64_MAX : charge.data + charge.metadata;
  absl::MutexLock lock(&mu_);
  if (needed > Left(quota_bytes_, used_)) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            what, " needs ", bytes, " bytes but the buffer quota (buffer_quota_bytes ",
            quota_bytes_, ") has ", Left(quota_bytes_, used_), " bytes left", MetadataNote(),
            "; delete buffers to make room")),
        reason::kQuotaExceeded,
        {{"limit_name", "buffer_quota_bytes"}, {"limit", absl::StrCat(quota_bytes_)},
         {"requested", absl::StrCat(bytes)}, {"available", absl::StrCat(Left(quota_bytes_, used_))}});
  }
  const Charge& mine = used_by_principal_[principal];
  if (principal_quota_bytes_ > 0 && needed > Left(principal_quota_bytes_, mine)) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            what, " needs ", bytes, " bytes but the caller's quota (principal_quota_bytes ",
            principal_quota_bytes_, ") has ", Left(principal_quota_bytes_, mine), " bytes left",
            MetadataNote(), "; delete buffers to make room")),
        reason::kQuotaExceeded,
        {{"limit_name", "principal_quota_bytes"}, {"limit", absl::StrCat(principal_quota_bytes_)},
         {"requested", absl::StrCat(bytes)},
         {"available", absl::StrCat(Left(principal_quota_bytes_, mine))}});
  }
  if (max_buffers_per_owner_ > 0 && mine.buffers >= max_buffers_per_owner_) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            what, " needs a new buffer but the caller holds ", mine.buffers,
            " (max_buffers_per_owner ", max_buffers_per_owner_, "); delete buffers to make room")),
        reason::kQuotaExceeded,
        {{"limit_name", "max_buffers_per_owner"}, {"limit", absl::StrCat(max_buffers_per_owner_)}});
  }
  ChargeLocked(charge, std::string(principal));
  return Reservation(this, charge, std::string(principal));
}

void BufferStore::Uncharge(const Charge& charge, const std::string& principal) {
  absl::MutexLock lock(&mu_);
  UnchargeLocked(charge, principal);
}

void BufferStore::ChargeLocked(const Charge& charge, const std::string& principal) {
  for (Charge* used : {&used_, &used_by_principal_[principal]}) {
    used->data += charge.data;
    used->metadata += charge.metadata;
    used->buffers += charge.buffers;
  }
}

void BufferStore::UnchargeLocked(const Charge& charge, const std::string& principal) {
  for (Charge* used : {&used_, &used_by_principal_[principal]}) {
    used->data -= charge.data;
    used->metadata -= charge.metadata;
    used->buffers -= charge.buffers;
  }
}

std::shared_ptr<Array> BufferStore::HoldingCharge(std::shared_ptr<Array> array, Charge charge,
                                                  std::string principal) {
  Array* raw = array.get();
  return std::shared_ptr<Array>(
      raw, [this, array = std::move(array), charge, principal = std::move(principal)](
               Array*) mutable {
        array.reset();  // the memory first, then the quota that counted it
        Uncharge(charge, principal);
      });
}

absl::StatusOr<StoredBuffer> BufferStore::Commit(Reservation reservation, std::string name,
                                                 std::shared_ptr<Array> array) {
  const Charge kept{array->bytes(), MetadataBytes(name), 1};
  const Charge reserved = reservation.charge_;
  if (reservation.store_ != this || reserved.data < kept.data ||
      reserved.metadata < kept.metadata) {
    return absl::InternalError("buffer committed without a matching quota reservation");
  }
  StoredBuffer buffer{NewBufferId(instance_id_), std::move(name), reservation.principal_, array,
                      absl::Now()};
  // The stored entry and the copies Get hands out hold the charge; the caller's
  // copy does not, so the charge ends with the id and its readers.
  StoredBuffer stored = buffer;
  stored.array = HoldingCharge(std::move(array), kept, buffer.owner);
  absl::MutexLock lock(&mu_);
  // The stored buffer's charge replaces the reservation's.
  UnchargeLocked(reserved, buffer.owner);
  ChargeLocked(kept, buffer.owner);
  reservation.store_ = nullptr;
  buffers_.emplace(buffer.id, std::move(stored));
  return buffer;
}

absl::Status BufferStore::CheckIssuedHere(absl::string_view id, absl::string_view field) const {
  const absl::string_view issuer = IssuingInstance(id);
  if (issuer.empty() || issuer == instance_id_) return absl::OkStatus();
  // Clients route by the id's prefix (ServerInfo.instance_id); only a stale route
  // or a client that does not route lands here. Nothing is looked up or copied.
  // A single server sees this for ids from before its restart (stored buffers do
  // not survive one), so the message names that case first.
  return WithReason(
      absl::FailedPreconditionError(absl::StrCat(
          field, " ", QuoteClientString(id), " was stored by replica instance ", issuer,
          ", not by this one (instance ", instance_id_,
          "): a single server has restarted since (stored buffers do not survive a "
          "restart: store the data again); behind replicas, send calls naming it to that "
          "replica (ServerInfo.instance_id)")),
      reason::kBufferOnOtherReplica,
      {{"field", std::string(field)}, {"owner_instance", std::string(issuer)},
       {"instance", instance_id_}});
}

absl::StatusOr<StoredBuffer> BufferStore::Get(absl::string_view id, absl::string_view field,
                                              absl::string_view principal) const {
  GC_RETURN_IF_ERROR(CheckBufferId(id, field));
  GC_RETURN_IF_ERROR(CheckIssuedHere(id, field));
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end() || it->second.owner != principal) {
    return WithReason(
        absl::NotFoundError(absl::StrCat(field, " ", QuoteClientString(id), " is not a stored buffer")),
        reason::kBufferNotFound, {{"field", std::string(field)}});
  }
  return it->second;
}

absl::StatusOr<uint64_t> BufferStore::Delete(absl::string_view id, absl::string_view principal) {
  // Dropped after the lock: the last holder of the array gives its charge back.
  std::shared_ptr<Array> released;
  GC_RETURN_IF_ERROR(CheckBufferId(id, "buffer_id"));
  GC_RETURN_IF_ERROR(CheckIssuedHere(id, "buffer_id"));
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end() || it->second.owner != principal) {
    return WithReason(
        absl::NotFoundError(absl::StrCat("buffer_id ", QuoteClientString(id), " is not a stored buffer")),
        reason::kBufferNotFound, {{"field", "buffer_id"}});
  }
  released = std::move(it->second.array);
  buffers_.erase(it);
  return released->bytes();
}

std::vector<StoredBuffer> BufferStore::List(absl::string_view principal, const ListCursor* after,
                                            size_t limit) const {
  auto key = [](const StoredBuffer& b) { return std::tie(b.created, b.id); };
  std::vector<StoredBuffer> result;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, buffer] : buffers_) {
    if (buffer.owner != principal) continue;
    if (after != nullptr && key(buffer) <= std::tie(after->created, after->id)) continue;
    result.push_back(buffer);
  }
  std::sort(result.begin(), result.end(),
            [&](const StoredBuffer& a, const StoredBuffer& b) { return key(a) < key(b); });
  if (result.size() > limit) result.resize(limit);
  return result;
}

uint64_t BufferStore::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_.data;
}

uint64_t BufferStore::used_bytes(absl::string_view principal) const {
  absl::MutexLock lock(&mu_);
  auto it = used_by_principal_.find(principal);
  return it == used_by_principal_.end() ? 0 : it->second.data;
}

uint64_t BufferStore::metadata_bytes(absl::string_view principal) const {
  absl::MutexLock lock(&mu_);
  auto it = used_by_principal_.find(principal);
  return it == used_by_principal_.end() ? 0 : it->second.metadata;
}

size_t BufferStore::count() const {
  absl::MutexLock lock(&mu_);
  return buffers_.size();
}

bool IsBufferCountRefusal(const absl::Status& status) {
  return absl::IsResourceExhausted(status) &&
         absl::StrContains(status.message(), "(max_buffers_per_owner ");
}

namespace {

// `digits` lowercase hex digits (a multiple of 8) from the OS entropy source.
std::string RandomHex(size_t digits) {
  std::random_device entropy;
  std::string raw(digits / 2, '\0');
  for (size_t i = 0; i < raw.size(); i += 4) {
    const uint32_t word = entropy();
    for (size_t b = 0; b < 4; ++b) raw[i + b] = static_cast<char>((word >> (8 * b)) & 0xff);
  }
  return absl::BytesToHexString(raw);
}

}  // namespace

std::string NewInstanceId() { return RandomHex(kInstanceIdLength); }

std::string NewBufferId(absl::string_view instance_id) {
  return absl::StrCat(instance_id, RandomHex(kBufferIdLength - instance_id.size()));
}

}  // namespace gpucompute
