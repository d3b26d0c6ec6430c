#include "server/shared_memory_registry.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "server/buffer_store.h"
#include "server/echo.h"
#include "server/peer_identity.h"

namespace gpucompute {

absl::Status SharedMemoryRegistry::CheckRoom(absl::string_view owner, uint64_t bytes,
                                             absl::string_view key) {
  absl::MutexLock lock(&mu_);
  DropOrphansLocked();
  return CheckRoomLocked(owner, bytes, key);
}

void SharedMemoryRegistry::DropOrphans() {
  absl::MutexLock lock(&mu_);
  DropOrphansLocked();
}

void SharedMemoryRegistry::DropOrphansLocked() {
  for (auto it = regions_.begin(); it != regions_.end();) {
    auto next = std::next(it);
    if (it->second.region->Orphaned()) EraseLocked(it);
    it = next;
  }
  for (auto it = claims_.begin(); it != claims_.end();) {
    auto next = std::next(it);
    if (!SystemObjectExists(it->second.key, it->first)) {
      if (--claims_by_owner_[it->second.owner] == 0) claims_by_owner_.erase(it->second.owner);
      claims_.erase(it);
    }
    it = next;
  }
}

void SharedMemoryRegistry::EraseLocked(
    absl::flat_hash_map<std::string, RegisteredRegion>::iterator it) {
  const std::string owner = it->second.owner;
  const uint64_t bytes = it->second.region->byte_size();
  used_bytes_ -= bytes;
  if ((used_by_owner_[owner] -= bytes) == 0) used_by_owner_.erase(owner);
  if (--count_by_owner_[owner] == 0) count_by_owner_.erase(owner);
  regions_.erase(it);
}

absl::Status SharedMemoryRegistry::CheckRoomLocked(absl::string_view owner, uint64_t bytes,
                                                   absl::string_view key) const {
  if (!key.empty()) {
    for (const auto& [id, entry] : regions_) {
      if (entry.key == key && entry.owner != owner) {
        return WithReason(absl::PermissionDeniedError(absl::StrCat(
                              "key ", QuoteClientString(key),
                              " is registered by another principal")),
                          reason::kSharedMemoryNotOwned, {{"field", "key"}});
      }
    }
  }
  const auto count = count_by_owner_.find(owner);
  if (limits_.max_regions_per_owner > 0 && count != count_by_owner_.end() &&
      count->second >= limits_.max_regions_per_owner) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            "the caller has ", count->second, " shared-memory regions registered, the limit "
            "(--max_shared_memory_regions_per_owner); unregister some first")),
        reason::kQuotaExceeded,
        {{"limit_name", "max_shared_memory_regions_per_owner"},
         {"limit", absl::StrCat(limits_.max_regions_per_owner)}});
  }
  if (bytes > limits_.quota_bytes - std::min(used_bytes_, limits_.quota_bytes)) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            "byte_size ", bytes, " does not fit the shared-memory quota: ", used_bytes_, " of ",
            limits_.quota_bytes, " bytes registered (--shared_memory_quota_bytes)")),
        reason::kQuotaExceeded,
        {{"limit_name", "shared_memory_quota_bytes"}, {"limit", absl::StrCat(limits_.quota_bytes)}});
  }
  const auto used = used_by_owner_.find(owner);
  const uint64_t owner_used = used == used_by_owner_.end() ? 0 : used->second;
  if (limits_.principal_quota_bytes > 0 &&
      bytes > limits_.principal_quota_bytes - std::min(owner_used, limits_.principal_quota_bytes)) {
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            "byte_size ", bytes, " does not fit the caller's shared-memory quota: ", owner_used,
            " of ", limits_.principal_quota_bytes,
            " bytes registered (--shared_memory_principal_quota_bytes)")),
        reason::kQuotaExceeded,
        {{"limit_name", "shared_memory_principal_quota_bytes"},
         {"limit", absl::StrCat(limits_.principal_quota_bytes)}});
  }
  return absl::OkStatus();
}

absl::StatusOr<RegisteredRegion> SharedMemoryRegistry::Add(RegisteredRegion entry) {
  const uint64_t bytes = entry.region->byte_size();
  const std::string& object = entry.region->object();
  absl::MutexLock lock(&mu_);
  if (absl::Status room = CheckRoomLocked(entry.owner, bytes, entry.key); !room.ok()) return room;
  if (!object.empty()) {
    auto claim = claims_.find(object);
    if (claim != claims_.end() && claim->second.owner != entry.owner) {
      return WithReason(absl::PermissionDeniedError(absl::StrCat(
                            "key ", QuoteClientString(entry.key),
                            " names an object another principal registered; it stays theirs "
                            "while it exists")),
                        reason::kSharedMemoryNotOwned, {{"field", "key"}});
    }
    if (claim == claims_.end()) {
      // Bounded like the regions themselves: claims outlive unregistering.
      int64_t& held = claims_by_owner_[entry.owner];
      if (limits_.max_regions_per_owner > 0 &&
          held >= kClaimsPerRegion * limits_.max_regions_per_owner) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the caller has registered ", held, " shared-memory objects that still exist, the "
            "limit (", kClaimsPerRegion, " x --max_shared_memory_regions_per_owner); unlink "
            "objects it no longer uses"));
      }
      ++held;
      claims_.emplace(object, Claim{entry.owner, entry.key});
    }
  }
  entry.id = NewBufferId(instance_id_);
  entry.created = absl::Now();
  used_bytes_ += bytes;
  used_by_owner_[entry.owner] += bytes;
  ++count_by_owner_[entry.owner];
  regions_.emplace(entry.id, entry);
  return entry;
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::Get(
    absl::string_view id, absl::string_view field, absl::string_view owner) const {
  absl::ReaderMutexLock lock(&mu_);
  const auto it = regions_.find(id);
  if (it == regions_.end() || it->second.owner != owner) {
    return WithReason(absl::NotFoundError(absl::StrCat(
                          field, ": no shared-memory region ", QuoteClientString(id),
                          " of this caller (never registered, unregistered, or another "
                          "principal's)")),
                      reason::kSharedMemoryRegionNotFound, {{"field", std::string(field)}});
  }
  return it->second.region;
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::Remove(
    absl::string_view id, absl::string_view owner) {
  absl::MutexLock lock(&mu_);
  const auto it = regions_.find(id);
  if (it == regions_.end() || it->second.owner != owner) {
    return WithReason(absl::NotFoundError(absl::StrCat("region_id: no shared-memory region ",
                                                       QuoteClientString(id), " of this caller")),
                      reason::kSharedMemoryRegionNotFound, {{"field", "region_id"}});
  }
  std::shared_ptr<SharedMemoryRegion> region = it->second.region;
  EraseLocked(it);
  return region;
}

std::vector<RegisteredRegion> SharedMemoryRegistry::List(absl::string_view owner) const {
  std::vector<RegisteredRegion> out;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [id, entry] : regions_) {
      if (entry.owner == owner) out.push_back(entry);
    }
  }
  std::sort(out.begin(), out.end(), [](const RegisteredRegion& a, const RegisteredRegion& b) {
    return a.created != b.created ? a.created < b.created : a.id < b.id;
  });
  return out;
}

uint64_t SharedMemoryRegistry::used_bytes(absl::string_view owner) const {
  absl::ReaderMutexLock lock(&mu_);
  const auto it = used_by_owner_.find(owner);
  return it == used_by_owner_.end() ? 0 : it->second;
}

uint64_t SharedMemoryRegistry::used_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return used_bytes_;
}

size_t SharedMemoryRegistry::count() const {
  absl::ReaderMutexLock lock(&mu_);
  return regions_.size();
}

absl::StatusOr<uint32_t> SharedMemoryAccess::PeerUid() const { return LocalPeerUid(peer); }

absl::StatusOr<std::string> SharedMemoryAccess::Owner() const {
  if (!principal.empty()) return principal;
  GC_ASSIGN_OR_RETURN(const uint32_t uid, PeerUid());
  return absl::StrCat("uid:", uid);
}

const absl::Status& SharedMemoryOff() {
  static const absl::Status* const kOff = new absl::Status(absl::FailedPreconditionError(
      "shared memory is off on this server; start it with --allow_shared_memory, or send the "
      "data (tensor or buffer_id)"));
  return *kOff;
}

uint64_t SharedMemoryRegistry::principal_limit_bytes() const {
  return limits_.principal_quota_bytes > 0
             ? std::min(limits_.principal_quota_bytes, limits_.quota_bytes)
             : limits_.quota_bytes;
}

}  // namespace gpucompute
