// A prepared operation whose operands are all inline (the request's bytes, or a
// batch's pieces of them) run from those host bytes in one backend call
// (Backend::RunFromHost), for a result the server sends from host memory: on a GPU
// the allocations, copies and kernels of a small request share one stream and one
// wait instead of a wait each, and the result comes back in host memory.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "server/metrics.h"
#include "server/prepared_operation.h"

namespace gpucompute {

// Every operand inline and no shared-memory output.
bool InlineRunnable(const PreparedOperation& prepared);

// Runs `prepared` on `device` (InlineRunnable): the result, in host memory where
// the backend put it there. The copies are not timed apart from the wait:
// transfer_in is the call but the kernel.
absl::StatusOr<std::shared_ptr<Array>> RunInline(PreparedOperation& prepared, Backend& backend,
                                                 int device, Metrics& metrics, OpContext& ctx,
                                                 ExecutionTimes& times);

}  // namespace gpucompute
