// Turns compute requests into backend calls. Prepare* runs on the gRPC thread:
// it only checks the request (dtypes, shapes, sizes, stored-buffer ids, and the
// values of inline operands against kernels/preconditions.h's rules) and never
// blocks. Stored operands' values are on the backend and not read here: the
// Haversine points kernels check theirs; Lomb-Scargle x and freqs are checked by
// Execute (OperandSpec::stored_rule). Execute runs on the executor: it copies
// inline operands to the backend, checks stored values, allocates the output and
// runs the operation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/preconditions.h"
#include "server/admission.h"
#include "server/buffer_store.h"
#include "server/metrics.h"

namespace gpucompute {

// One input of an operation, checked but not yet on the backend.
struct OperandSpec {
  std::string field;  // request field, for messages ("values", "points.lat")
  DType dtype = DType::kFloat64;
  Shape shape;
  std::shared_ptr<Array> stored;     // a stored buffer, or
  const v1::Tensor* tensor = nullptr;  // inline data (owned by the request)
  // The rule a stored operand's values are checked against on the backend before
  // the run, where the operation's kernels do not check them; null: no check.
  const ValueRule* stored_rule = nullptr;
};

// What a request may see: the stored buffers of its principal, within the limits.
struct RequestScope {
  const BufferStore& store;
  std::string principal;
  int64_t max_elements;
};

// Checks an Operand: a well-formed inline tensor (known dtype, shape within
// limits, data length matching) or a buffer id of the caller's.
absl::StatusOr<OperandSpec> ResolveOperand(const v1::Operand& operand, absl::string_view field,
                                           const RequestScope& scope);

using RunFn = absl::AnyInvocable<absl::Status(Backend& backend,
                                              std::span<const std::shared_ptr<Array>> operands,
                                              Array& out, OpContext& ctx)>;

struct PreparedOperation {
  std::vector<OperandSpec> operands;
  DType out_dtype = DType::kFloat64;
  Shape out_shape;
  // What it costs, in work units: result elements, or batch x samples x
  // frequencies for Lomb-Scargle (whose result is small but whose work is not);
  // saturates at INT64_MAX. Picks the executor lane and meets max_work_per_request.
  int64_t work = 0;
  RunFn run;
};

absl::StatusOr<PreparedOperation> PrepareDiscountProduct(const v1::DiscountProductRequest& request,
    const RequestScope& scope);
absl::StatusOr<PreparedOperation> PrepareHaversineGrid(const v1::HaversineGridRequest& request,
    const RequestScope& scope);
absl::StatusOr<PreparedOperation> PrepareNormalize(const v1::NormalizeRequest& request,
    const RequestScope& scope);
absl::StatusOr<PreparedOperation> PrepareLombScargle(const v1::LombScargleRequest& request,
    const RequestScope& scope);

struct ExecutionTimes {
  absl::Duration transfer_in = absl::ZeroDuration();
  absl::Duration compute = absl::ZeroDuration();
  uint64_t bytes_in = 0;
  std::string device;  // where it ran, e.g. "cpu" or "cuda:0"
};

// Materializes the operands on one device (that of the first stored operand, else
// the backend's pick), allocates the output there and runs the operation.
// The operation holds a slot of that device's queue while it runs.
absl::StatusOr<std::shared_ptr<Array>> Execute(PreparedOperation& prepared, Backend& backend,
                                               DeviceQueues& queues, Metrics& metrics,
                                               OpContext& ctx, ExecutionTimes& times);

}  // namespace gpucompute
