// Client processes (gpucompute-cli, bulk-transfer-bench): keeps glibc malloc from
// handing large blocks back to the kernel after each use.
//
// Bulk transfers allocate and free megabyte-sized blocks at a high rate (gRPC
// slices of every message, result buffers). With glibc's defaults, blocks above
// the mmap threshold are mmapped and unmapped each time, and a heap whose top
// exceeds the trim threshold is trimmed: either way every reuse page-faults the
// memory back in, zeroed by the kernel, which cost a downloading client more CPU
// than the copies themselves. The process then keeps
// up to kBulkTrimThresholdBytes of freed heap mapped, which a client may; the
// server keeps its own, RSS-bounding settings (server/main.cc ConfigureMalloc) and
// avoids the churn by not allocating per chunk instead.
#pragma once

#include <malloc.h>

#include <cstddef>

namespace gpucompute::client {

// Blocks up to this size come from the heap (so their pages are reused).
inline constexpr int kBulkMmapThresholdBytes = 64 << 20;
// Freed heap kept mapped before it is returned to the kernel.
inline constexpr int kBulkTrimThresholdBytes = 1 << 30;

// Call once at start-up, before threads start allocating.
inline void TuneMallocForBulkTransfers() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, kBulkMmapThresholdBytes);
  mallopt(M_TRIM_THRESHOLD, kBulkTrimThresholdBytes);
#endif
}

}  // namespace gpucompute::client
