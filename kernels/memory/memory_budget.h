// Memory budgets: one per memory (the host, each GPU) that every array a backend
// allocates draws from, so that results, staging and stored buffers together
// cannot take the process past what the machine has. An allocation that does
// not fit waits a bounded time for memory to be released, then fails with
// RESOURCE_EXHAUSTED naming the flag that sets the budget.
//
// Reserved share: an allocation larger than 1/16 of a budget ("large") may not
// raise its use past 3/4 of the budget. The last quarter is left to small
// allocations, so that while hostile callers hold big results (stalled readers,
// huge meshes) the small requests of other callers still run; a single
// allocation can take at most 3/4 of the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/backend.h"

namespace gpucompute {

// Physical RAM; UINT64_MAX when the system cannot tell.
uint64_t PhysicalMemoryBytes();
// This process's resident set; 0 when the system cannot tell.
uint64_t ResidentSetBytes();

// The memory this process may take: physical RAM, or the limit of its cgroup
// (v2 memory.max, v1 memory.limit_in_bytes; the smallest of its cgroup and the
// ancestors visible under `cgroup_root`) where that is lower, as in a container.
struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // "physical memory" or "cgroup v2 memory.max at PATH", ...
};
MemoryLimit ProcessMemoryLimit(const std::string& cgroup_root,
                               const std::string& self_cgroup_file = "/proc/self/cgroup");

// Budgets derived from the machine when their option is 0.
inline constexpr double kDefaultHostBudgetFraction = 0.5;
inline constexpr double kDefaultDeviceBudgetFraction = 0.875;

// The host budget when its option is 0: kDefaultHostBudgetFraction of the
// process's memory limit; `source` says where the figure came from.
MemoryLimit DefaultHostBudget(const BackendOptions& options);

// True for the RESOURCE_EXHAUSTED of a budget (counted as reason "memory_budget").
bool IsMemoryBudgetRefusal(const absl::Status& status);

class MemoryBudget : public std::enable_shared_from_this<MemoryBudget> {
 public:
  static constexpr uint64_t kLargeAllocationDivisor = 16;  // large: > capacity / 16
  static constexpr double kLargeAllocationCeiling = 0.75;  // large ones fill up to 3/4

  // Bytes held against a budget until destroyed (or moved from).
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept;
    Charge& operator=(Charge&& other) noexcept;
    ~Charge();

    uint64_t bytes() const { return bytes_; }

   private:
    friend class MemoryBudget;
    Charge(std::shared_ptr<MemoryBudget> budget, uint64_t bytes);
    void Release();

    std::shared_ptr<MemoryBudget> budget_;
    uint64_t bytes_ = 0;
  };

  // `memory` names it ("host", "cuda:0"), `flag` is the flag that sets
  // `capacity_bytes`; `wait` bounds how long Reserve waits for room.
  static std::shared_ptr<MemoryBudget> Create(std::string memory, std::string flag,
                                              uint64_t capacity_bytes, absl::Duration wait);

  // `bytes` charged once they fit (see the reserved share above), waiting up
  // to `wait` for releases; RESOURCE_EXHAUSTED at once when they never can.
  absl::StatusOr<Charge> Reserve(uint64_t bytes);
  // Memory that must be taken without waiting (pinned staging for the life of
  // the process, gRPC's serialized copy of a result chunk being written):
  // never refused.
  Charge ChargeFixed(uint64_t bytes);

  const std::string& memory() const { return memory_; }
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t used_bytes() const;
  // The most that an allocation of `bytes` may raise usage to.
  uint64_t CeilingFor(uint64_t bytes) const;

 private:
  MemoryBudget(std::string memory, std::string flag, uint64_t capacity_bytes,
               absl::Duration wait);
  absl::Status Refusal(uint64_t bytes, uint64_t used, absl::string_view why) const;
  void Release(uint64_t bytes);

  const std::string memory_;
  const std::string flag_;
  const uint64_t capacity_bytes_;
  const absl::Duration wait_;
  mutable absl::Mutex mu_;
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// `inner` with every Allocate charged to the budget of the memory the array
// lives in, until the array's last owner lets go. Budgets come from `options`
// (0: derived from the machine); the inner backend's pinned staging is
// charged to the host budget at once.
std::unique_ptr<Backend> WithMemoryBudgets(std::unique_ptr<Backend> inner,
                                           const BackendOptions& options);

// The host budget of a backend made by WithMemoryBudgets, for host memory the
// server takes beside arrays (result chunk copies); null for any other backend.
std::shared_ptr<MemoryBudget> HostMemoryBudget(const Backend& backend);

}  // namespace gpucompute
