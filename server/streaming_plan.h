// StreamingCompute's rules (the operation of a header, the rows of a chunk) and
// its one step per chunk on the backend. CheckStreamingHeader runs on the gRPC
// thread and never blocks; PrepareFixedOperand and RunStreamingChunk run on the
// executor. A chunk runs the same backend call the unary operation makes, over
// its rows, so the results are byte for byte the unary operation's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "server/prepared_operation.h"

namespace gpucompute {

// A header checked: what every chunk runs and where its result goes.
struct StreamingPlan {
  v1::StreamingOperation op = v1::STREAMING_OPERATION_UNSPECIFIED;
  DType dtype = DType::kFloat64;
  Shape shape;                 // the whole streamed operand
  Shape row_shape;             // one row (discount product: an element); k rows: (k, *row_shape)
  Shape factor_shape;          // discount product: the trailing extents factors span
  int64_t rows = 0;            // rows in the whole stream
  int64_t row_elements = 0;    // elements per row
  int streamed_operands = 1;   // 2 for haversine points: lat rows, then lon rows
  int64_t result_runs = 1;     // runs of results per chunk (n_ref for haversine)
  Shape out_shape;             // the whole result (the unary operation's)
  std::optional<OperandSpec> factors;  // discount product
  std::vector<GeoPoint> references;    // haversine points
  double radius = kDefaultEarthRadiusKm;
  NormKind norm = NormKind::kSum;
  uint32_t result_chunk_bytes = 0;      // largest result data message
  int64_t max_chunk_elements = 0;       // max_elements, per chunk array

  uint64_t element_bytes() const { return ElementSize(dtype); }
  // Bytes of input per row, all streamed operands together.
  uint64_t row_bytes() const {
    return static_cast<uint64_t>(row_elements) * element_bytes() * streamed_operands;
  }
};

// The header checked: INVALID_ARGUMENT naming the field and the limit. Inline
// factors point into `header`, which must outlive the plan's use.
absl::StatusOr<StreamingPlan> CheckStreamingHeader(const v1::StreamingComputeHeader& header,
                                                   const RequestScope& scope);

// Rows in a data chunk of `bytes` payload bytes when `received_rows` came before it
// (the chunk is message number `message`): whole rows, not past the declared shape,
// within max_elements; else INVALID_ARGUMENT naming the sizes.
absl::StatusOr<int64_t> ChunkRows(const StreamingPlan& plan, uint64_t bytes,
                                  int64_t received_rows, uint64_t message);

// The discount factors on `device`, of plan.factor_shape (stored ones as they are
// when they live there and need no broadcasting within it).
absl::StatusOr<std::shared_ptr<Array>> PrepareFactors(const StreamingPlan& plan, int device,
                                                      Backend& backend, OpContext& ctx);

// Arrays of a call's chunks, recycled: a fresh multi-megabyte block per chunk
// costs more in page faults than the copy into it. Holds at
// most `capacity` arrays (all charged to the budgets while held), each handed out
// again once no one else holds it (a result's payload slices hold theirs until
// gRPC has sent them).
class ChunkArrays {
 public:
  ChunkArrays(Backend& backend, int device, size_t capacity)
      : backend_(backend), device_(device), capacity_(capacity) {}
  absl::StatusOr<std::shared_ptr<Array>> Take(DType dtype, const Shape& shape);
  void Clear();

 private:
  Backend& backend_;
  const int device_;
  const size_t capacity_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Array>> arrays_ ABSL_GUARDED_BY(mu_);
};

// One chunk of `rows` rows (its payload `pieces`) through the device: the
// operands copied in, the operation run, the chunk's result array returned.
// (Discount product: rows are elements; the chunk's first, `first_row`, says
// which factors its elements take.)
absl::StatusOr<std::shared_ptr<Array>> RunStreamingChunk(const StreamingPlan& plan,
                                                         const std::shared_ptr<Array>& factors,
                                                         ChunkArrays& arrays, Backend& backend,
                                                         std::span<const HostPiece> pieces,
                                                         int64_t first_row, int64_t rows,
                                                         OpContext& ctx, ExecutionTimes& times);

// Where a chunk's result goes: bytes [source, source + bytes) of the chunk's
// result array at byte `offset` of the whole result.
struct ResultRun {
  uint64_t source = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
std::vector<ResultRun> ChunkResultRuns(const StreamingPlan& plan, int64_t first_row,
                                       int64_t rows);

}  // namespace gpucompute
