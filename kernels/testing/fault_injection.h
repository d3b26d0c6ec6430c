// Faults a GPU can have, injected into any backend: device memory exhaustion, a
// sticky device error and a device that stops making progress (paused operations). Used by the fault tests, and by the server's
// --inject_sticky_error_after flag for drills of the restart path (health turns
// NOT_SERVING, the process drains and exits with status 3).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"

namespace gpucompute {

struct InjectedFaults {
  // The next N calls to Allocate fail with RESOURCE_EXHAUSTED ("no room").
  std::atomic<int> failing_allocations{0};
  // Every call fails with INTERNAL and Healthy() is false, as after an illegal
  // memory access on a GPU. Never cleared: a sticky error outlives the context.
  std::atomic<bool> sticky_error{false};
  // The sticky error starts once this many operations (compute calls) have run;
  // negative: never.
  int64_t sticky_error_after_operations = -1;

  // While paused, operations wait before they start, as on a hung device: tests hold
  // admission, device-queue and executor slots with it.
  void PauseOperations();
  void ResumeOperations();
  // Operations waiting on the pause now.
  int PausedOperations() const;
  // Blocks while paused; called by every operation.
  void WaitWhilePaused();

 private:
  mutable absl::Mutex mu_;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

// `inner` with `faults` applied; `faults` may be changed while it runs.
std::unique_ptr<Backend> WithInjectedFaults(std::unique_ptr<Backend> inner,
                                            std::shared_ptr<InjectedFaults> faults);

// The restart drill: `selection`'s backend failing as after a sticky device error
// once `operations` operations have run, its note saying so.
BackendSelection WithStickyErrorAfter(BackendSelection selection, int64_t operations);

}  // namespace gpucompute
