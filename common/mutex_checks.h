// The distribution's Abseil checks lock order on every Mutex acquisition and
// destruction through one process-wide graph behind a global lock: ~5% of a
// process's CPU under small requests (the server, and the gRPC threads of a
// client with many calls in flight), serializing every thread. The binaries turn
// it off at start; tests keep it.
#pragma once

#include "absl/synchronization/mutex.h"

namespace gpucompute {

inline void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace gpucompute
