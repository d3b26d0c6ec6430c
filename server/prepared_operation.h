// Turns compute requests into backend calls. Prepare* runs on the gRPC thread:
// it only checks the request (dtypes, shapes, sizes, stored-buffer ids, and the
// values of inline operands against kernels/preconditions.h's rules) and never
// blocks. Stored and shared-memory operands' values are not read here: the
// Haversine points kernels check theirs; Lomb-Scargle x and freqs are checked by
// Execute (OperandSpec::stored_rule). Execute runs on the executor: it copies
// inline and host shared-memory operands to the backend, checks stored values,
// allocates the output (or uses its shared-memory slice) and runs the operation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
#include "server/shared_memory_registry.h"

namespace gpucompute {

// One input of an operation, checked but not yet on the backend.
struct OperandSpec {
  std::string field;  // request field, for messages ("values", "points.lat")
  DType dtype = DType::kFloat64;
  Shape shape;
  std::shared_ptr<Array> stored;     // a stored buffer, or
  const v1::Tensor* tensor = nullptr;  // inline data (owned by the request), or
  std::vector<HostPiece> pieces;       // inline data in pieces (a batch's, stacked), or
  std::shared_ptr<Array> view;       // a slice of `region`, a shared-memory region
  std::shared_ptr<SharedMemoryRegion> region;
  // The rule a stored (or shared-memory) operand's values are checked against on the
  // backend before the run, where the operation's kernels do not check them; null:
  // no check.
  const ValueRule* stored_rule = nullptr;
};

// What a request may see: the stored buffers and shared-memory regions of its
// principal, within the limits.
struct RequestScope {
  const BufferStore& store;
  std::string principal;
  int64_t max_elements;
  // The registry when this call may use shared memory, else why not (SharedMemoryFor);
  // off unless a caller grants it.
  absl::StatusOr<const SharedMemoryRegistry*> regions = SharedMemoryOff();
};

// Checks an Operand: a well-formed inline tensor (known dtype, shape within
// limits, data length matching) or a buffer id of the caller's.
absl::StatusOr<OperandSpec> ResolveOperand(const v1::Operand& operand, absl::string_view field,
                                           const RequestScope& scope);

using RunFn = absl::AnyInvocable<absl::Status(Backend& backend,
                                              std::span<const std::shared_ptr<Array>> operands,
                                              Array& out, OpContext& ctx)>;

// How a request may share one launch with others (server/dynamic_batcher.h):
// the requests of one key differ only in the leading extent of their stacked
// operands and of their result, which line up (operation rows are independent).
struct BatchPlan {
  // The operation, dtype and options, and the shapes and bytes of shared operands.
  std::string key;
  // Per operand: its shape with a leading batch axis (stacked), or empty (shared:
  // the same bytes in every request of the key).
  std::vector<Shape> stacked;
  Shape out;  // the result with the same leading batch axis
};

struct PreparedOperation {
  std::vector<OperandSpec> operands;
  DType out_dtype = DType::kFloat64;
  Shape out_shape;
  // What it costs, in work units: result elements, or batch x samples x
  // frequencies for Lomb-Scargle (whose result is small but whose work is not);
  // saturates at INT64_MAX. Picks the executor lane and meets max_work_per_request.
  int64_t work = 0;
  RunFn run;
  // output.shared_memory: the result is written into this slice of `output_region`.
  std::shared_ptr<Array> output_view;
  std::shared_ptr<SharedMemoryRegion> output_region;
  // Set when every operand is inline and the operation can run stacked.
  std::optional<BatchPlan> batch;
};

// Checks output.shared_memory against the prepared result (dtype and shape,
// when the slice gives them, must match it) and sets prepared's output view.
absl::Status ResolveOutputSlice(const v1::SharedMemorySlice& slice, const RequestScope& scope,
                                PreparedOperation& prepared);

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
  // The result copied into its shared-memory slice (when it could not be computed there).
  absl::Duration transfer_out = absl::ZeroDuration();
  uint64_t bytes_in = 0;
  std::string device;  // where it ran, e.g. "cpu" or "cuda:0"
  std::string method;  // the algorithm, for operations with a choice (OpContext::method)
  int batch_size = 1;  // requests that shared the launch
};

// What the work of a request produced.
struct StreamSource {
  std::shared_ptr<Array> array;
  ExecutionTimes times;
  // The result's bytes already on the host (a batch's result is copied out
  // once), at `host_offset`; null: copy them from `array`.
  std::shared_ptr<const std::string> host;
  uint64_t host_offset = 0;
  // The bytes of `array` the data chunks cover (a Download's range); end 0: all.
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Materializes the operands on one device (that of the first stored operand or
// device-memory slice, else the backend's pick), allocates the output there (or
// computes right into its shared-memory slice when that lives there and overlaps
// no operand) and runs the operation; returns the output slice when one was given.
// The operation holds a slot of that device's queue while it runs.
// `result_to_host`: the caller sends the result from host memory (it fits one
// chunk and is not kept); work whose operands are all inline then runs from host
// bytes in one backend call (Backend::RunFromHost: on a GPU one stream and one
// wait, the result back in host memory), its copies timed with the wait as
// transfer_in.
absl::StatusOr<std::shared_ptr<Array>> Execute(PreparedOperation& prepared, Backend& backend,
                                               DeviceQueues& queues, Metrics& metrics,
                                               OpContext& ctx, ExecutionTimes& times,
                                               bool result_to_host);

}  // namespace gpucompute
