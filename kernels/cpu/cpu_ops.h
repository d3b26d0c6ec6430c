// The CPU operations behind CpuBackend, one file each. Private to kernels/cpu:
// the backend checks that arrays live on the host and measures the time; these
// check dtypes and shapes, split the work over the pool and poll cancellation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/array.h"
#include "kernels/backend.h"
#include "kernels/preconditions.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"

namespace gpucompute::cpu {

absl::Status DiscountProduct(ThreadPool& pool, const Array& factors, const Array& values,
                             Array& out, const OpContext& ctx);

absl::Status HaversineMesh(ThreadPool& pool, const LatLonMesh& mesh, std::span<const GeoPoint> refs,
                           double radius, Array& out, const OpContext& ctx);

absl::Status HaversinePoints(ThreadPool& pool, const Array& lat, const Array& lon,
                             std::span<const GeoPoint> refs, double radius, Array& out,
                             const OpContext& ctx);

absl::Status Normalize(ThreadPool& pool, const Array& in, NormKind norm, Array& out,
                       const OpContext& ctx);

absl::Status LombScargle(ThreadPool& pool, const Array& x, const Array& y, const Array* weights,
                         const Array* freqs, const Linspace& grid,
                         const LombScargleOptions& options, Array& out, OpContext& ctx);

// Elements (or rows, points...) per ParallelFor block so that one block holds
// about `target` units of work: large enough to hide scheduling, small enough
// to balance two threads and to notice cancellation within a millisecond or so.
inline int64_t GrainFor(int64_t work_per_item, int64_t target = int64_t{1} << 16) {
  return std::max<int64_t>(1, target / std::max<int64_t>(work_per_item, 1));
}

}  // namespace gpucompute::cpu
