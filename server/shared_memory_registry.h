// The shared-memory regions registered with the server, each owned by the
// principal that registered it like a stored buffer: another principal's region
// ids are NOT_FOUND, and the objects it registered cannot be registered by
// anyone else as long as they exist, unregistered or not (a claim per object).
// Registered bytes count against a global and a per-principal quota, and the
// regions of one principal against a count limit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/shared_memory_region.h"

namespace gpucompute {

class SharedMemoryRegistry;

// How many objects a principal may have claimed per region it may register.
inline constexpr int64_t kClaimsPerRegion = 4;

struct SharedMemoryLimits {
  uint64_t quota_bytes = 0;            // all regions together
  uint64_t principal_quota_bytes = 0;  // one principal's; 0: only the global quota
  int64_t max_regions_per_owner = 0;   // 0: no limit
};

enum class SharedMemoryKind { kSystem, kCuda };

// Why a call may not use shared memory on a server started without
// --allow_shared_memory (FAILED_PRECONDITION); made once, every compute request asks.
const absl::Status& SharedMemoryOff();

// What a call may do with shared memory: the registry, and whose regions it
// uses: its principal when it has one, else the local user that owns its
// connection ("uid:N"), so that anonymous local users do not share regions.
struct SharedMemoryAccess {
  SharedMemoryRegistry* registry = nullptr;
  std::string principal;  // "" when anonymous
  std::string peer;       // the connection (grpc::ServerContext::peer())

  // The uid of the connection's local user (peer_identity.h).
  absl::StatusOr<uint32_t> PeerUid() const;
  // The owner the call's regions are registered under.
  absl::StatusOr<std::string> Owner() const;
};

struct RegisteredRegion {
  std::string id;
  std::string name;
  std::string owner;
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  std::string key;  // system regions
  absl::Time created;
  std::shared_ptr<SharedMemoryRegion> region;
};

class SharedMemoryRegistry {
 public:
  // instance_id: this replica's, the prefix of every region id it issues (as of
  // buffer ids), so that replica-aware clients route region calls to it.
  SharedMemoryRegistry(SharedMemoryLimits limits, std::string instance_id)
      : limits_(limits), instance_id_(std::move(instance_id)) {}

  const SharedMemoryLimits& limits() const { return limits_; }
  // RESOURCE_EXHAUSTED naming the limit when `owner` may not register `bytes`
  // more; PERMISSION_DENIED when another principal has registered `key`. First
  // drops the regions whose object was unlinked (their client ended without
  // unregistering), so that they neither stay pinned nor hold the quota.
  absl::Status CheckRoom(absl::string_view owner, uint64_t bytes, absl::string_view key);
  // Stores `entry` (region, owner, name, kind, key) under a new unguessable id,
  // checking the limits again; returns it with its id and creation time.
  absl::StatusOr<RegisteredRegion> Add(RegisteredRegion entry);
  // The region `id` of `owner`; NOT_FOUND naming `field` otherwise.
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> Get(absl::string_view id,
                                                          absl::string_view field,
                                                          absl::string_view owner) const;
  // Takes region `id` of `owner` out of the registry; requests that hold views
  // of it keep it mapped until they are done.
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> Remove(absl::string_view id,
                                                             absl::string_view owner);
  // Forgets the regions whose object was unlinked and the claims on objects
  // that are gone.
  void DropOrphans();
  // The owner's regions, oldest first.
  std::vector<RegisteredRegion> List(absl::string_view owner) const;
  uint64_t used_bytes(absl::string_view owner) const;
  // All principals together (metrics).
  uint64_t used_bytes() const;
  size_t count() const;
  // What one principal may register in all: the smaller of the two quotas.
  uint64_t principal_limit_bytes() const;

 private:
  void DropOrphansLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(absl::flat_hash_map<std::string, RegisteredRegion>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRoomLocked(absl::string_view owner, uint64_t bytes,
                               absl::string_view key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const SharedMemoryLimits limits_;
  const std::string instance_id_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, RegisteredRegion> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, uint64_t> used_by_owner_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> count_by_owner_ ABSL_GUARDED_BY(mu_);
  // Who registered each object first, kept while the object exists (under its
  // key), so that an unregistered object is no one else's to register.
  struct Claim {
    std::string owner;
    std::string key;
  };
  absl::flat_hash_map<std::string, Claim> claims_ ABSL_GUARDED_BY(mu_);  // by object()
  absl::flat_hash_map<std::string, int64_t> claims_by_owner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute
