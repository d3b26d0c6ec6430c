// The request fuzzer's checks on what Prepare* and Execute return: the allowed
// errors, the prepared operands, and each operation's values against an
// independent reference. Every violation aborts through FUZZ_CHECK.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "server/prepared_operation.h"

namespace gpucompute::fuzz {

// The request scope's max_elements, which every prepared output must respect.
inline constexpr int64_t kMaxElements = int64_t{1} << 20;

int64_t Product(const Shape& shape);

// ---------------------------------------------------------------------------
// Invariants on Prepare and Execute.

// A rejected request: INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED with a
// message, or FAILED_PRECONDITION where an operand may be refused so (`refusable_operand`:
// a buffer id another replica instance issued, a shared-memory slice).
void CheckPrepareError(const absl::Status& s, bool refusable_operand);

// `stored_arrays[k]` is the array behind "$k"; no operand may resolve
// kForeignBuffer's.
void CheckPrepared(const PreparedOperation& prepared,
                   const std::vector<std::shared_ptr<Array>>& stored_arrays);

// Data-dependent failures a validated request may still hit at execution.
bool ExpectedExecuteError(const absl::Status& s, Operation op);

// ---------------------------------------------------------------------------
// Value oracles.

// Bitwise equal to an independent broadcast multiply.
void CheckDiscountProduct(const PreparedOperation& prepared, const Array& out);

// 2 R atan2(sqrt(h), sqrt(1 - h)) within a tolerance.
void CheckHaversine(const v1::HaversineGridRequest& request, const PreparedOperation& prepared,
                    const Array& out);

// x / norm per row; `result` fails exactly on the first row whose norm is 0 or not
// finite (rows whose norm is ill-conditioned are skipped).
void CheckNormalize(const v1::NormalizeRequest& request, const PreparedOperation& prepared,
                    const absl::StatusOr<std::shared_ptr<Array>>& result);

// Accepted weights are valid; a rejection names the first bad weights row.
void CheckLombScargle(const v1::LombScargleRequest& request, const PreparedOperation& prepared,
                      const absl::StatusOr<std::shared_ptr<Array>>& result);

}  // namespace gpucompute::fuzz
