#include "server/streaming_plan.h"

#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/preconditions.h"
#include "kernels/shape_rules.h"
#include "server/proto_convert.h"

namespace gpucompute {
namespace {

// The whole stream's elements (and its result's) may pass max_elements; their
// byte counts must still fit an int64.
constexpr int64_t kMaxStreamElements = std::numeric_limits<int64_t>::max() / 16;

// `field`.shape within kMaxStreamElements, a bound of the whole stream apart
// from max_elements (which bounds a chunk's arrays): refusals quote the bound
// that applies.
absl::Status CheckStreamElements(const Shape& shape, absl::string_view field) {
  absl::Status counted = CheckedElementCount(shape, kMaxStreamElements, field).status();
  if (counted.ok() || !absl::StrContains(counted.message(), "(the server's max_elements)")) {
    return counted;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ".shape ", ShapeToString(shape),
                                                 " has more than ", kMaxStreamElements,
                                                 " elements, the most one stream may carry"));
}

int64_t Product(const Shape& shape) {
  int64_t product = 1;
  for (int64_t extent : shape) product *= extent;
  return product;
}

absl::Status CheckDiscountFactors(StreamingPlan& plan, const v1::StreamingComputeHeader& header,
                                  const RequestScope& scope) {
  if (!header.has_factors()) {
    return absl::InvalidArgumentError(
        "header.factors is not set; STREAMING_DISCOUNT_PRODUCT needs the factors operand");
  }
  GC_ASSIGN_OR_RETURN(OperandSpec factors, ResolveOperand(header.factors(), "header.factors", scope));
  if (factors.dtype != plan.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("header.factors is ", DTypeName(factors.dtype),
                                                   " but header.dtype is ", DTypeName(plan.dtype),
                                                   "; they must be equal"));
  }
  const Shape& f = factors.shape;
  GC_ASSIGN_OR_RETURN(const Shape out,
                      BroadcastShapes(f, plan.shape, "header.factors", "header"));
  if (out != plan.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.factors.shape ", ShapeToString(f), " widens header.shape ",
        ShapeToString(plan.shape), " to ", ShapeToString(out),
        "; the streamed values must have the result's shape"));
  }
  for (int64_t extent : f) {
    if (extent == 0) return absl::InvalidArgumentError("header.factors is empty");
  }
  // Values element i takes factor i mod the period: the trailing extents of the
  // shape that the factors span (their leading extents of 1 aside).
  size_t spanned = f.size();
  for (size_t i = 0; i < f.size() && f[i] == 1; ++i) --spanned;
  plan.factor_shape.assign(plan.shape.end() - spanned, plan.shape.end());
  const int64_t period = Product(plan.factor_shape);
  if (period > scope.max_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.factors.shape ", ShapeToString(f), " spans ", ShapeToString(plan.factor_shape),
        " of header.shape: ", period, " elements, over max_elements ", scope.max_elements));
  }
  plan.factors = std::move(factors);
  plan.out_shape = plan.shape;
  return absl::OkStatus();
}

absl::Status CheckHaversinePoints(StreamingPlan& plan, const v1::StreamingComputeHeader& header) {
  if (header.references_size() == 0) {
    return absl::InvalidArgumentError(
        "header.references is empty; give at least one reference point");
  }
  for (const v1::GeoPoint& ref : header.references()) {
    plan.references.push_back({ref.lat(), ref.lon()});
  }
  GC_RETURN_IF_ERROR(CheckReferences(plan.references));
  plan.radius = header.radius() == 0 ? kDefaultEarthRadiusKm : header.radius();
  GC_RETURN_IF_ERROR(CheckRadius(plan.radius));
  if (plan.shape.size() >= static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.shape has rank ", plan.shape.size(), "; the result adds an axis and the limit is ",
        kMaxRank));
  }
  plan.streamed_operands = 2;
  plan.result_runs = static_cast<int64_t>(plan.references.size());
  plan.out_shape = {plan.result_runs};
  plan.out_shape.insert(plan.out_shape.end(), plan.shape.begin(), plan.shape.end());
  return CheckStreamElements(plan.out_shape, "result");
}

}  // namespace

absl::StatusOr<StreamingPlan> CheckStreamingHeader(const v1::StreamingComputeHeader& header,
                                                   const RequestScope& scope) {
  StreamingPlan plan;
  plan.op = header.operation();
  GC_ASSIGN_OR_RETURN(plan.dtype, DTypeFromProto(header.dtype(), "header.dtype"));
  plan.shape.assign(header.shape().begin(), header.shape().end());
  plan.max_chunk_elements = scope.max_elements;
  if (plan.shape.empty()) {
    return absl::InvalidArgumentError(
        "header.shape is () ; a streamed operand needs rank >= 1 (its rows are streamed)");
  }
  GC_RETURN_IF_ERROR(CheckStreamElements(plan.shape, "header"));
  for (int64_t extent : plan.shape) {
    if (extent == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.shape ", ShapeToString(plan.shape), " is empty; it needs >= 1 element"));
    }
  }
  if (plan.op == v1::STREAMING_NORMALIZE) {
    GC_RETURN_IF_ERROR(CheckNormalizeShape(plan.shape, "header"));
    GC_ASSIGN_OR_RETURN(plan.norm, NormFromProto(header.norm(), "header.norm"));
    plan.row_shape = {plan.shape.back()};
    plan.out_shape = plan.shape;
  } else if (plan.op == v1::STREAMING_HAVERSINE_POINTS) {
    plan.row_shape.assign(plan.shape.begin() + 1, plan.shape.end());
  }  // discount product: chunks of any element count (row_shape ())
  plan.row_elements = Product(plan.row_shape);
  plan.rows = Product(plan.shape) / plan.row_elements;
  switch (plan.op) {
    case v1::STREAMING_DISCOUNT_PRODUCT:
      GC_RETURN_IF_ERROR(CheckDiscountFactors(plan, header, scope));
      break;
    case v1::STREAMING_HAVERSINE_POINTS:
      GC_RETURN_IF_ERROR(CheckHaversinePoints(plan, header));
      break;
    case v1::STREAMING_NORMALIZE:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "header.operation ", static_cast<int>(header.operation()),
          " is not a streaming operation; use STREAMING_DISCOUNT_PRODUCT, "
          "STREAMING_HAVERSINE_POINTS or STREAMING_NORMALIZE"));
  }
  // One row (and its result) must fit a chunk's arrays.
  const int64_t row_result = plan.row_elements * plan.result_runs;
  if (row_result > scope.max_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "one row of header.shape ", ShapeToString(plan.shape), " has ", row_result,
        " result elements; a chunk's arrays are limited to max_elements ", scope.max_elements));
  }
  return plan;
}

absl::StatusOr<int64_t> ChunkRows(const StreamingPlan& plan, uint64_t bytes,
                                  int64_t received_rows, uint64_t message) {
  const uint64_t row_bytes = plan.row_bytes();
  if (bytes == 0 || bytes % row_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data message ", message, " has ", bytes, " bytes; a chunk must hold whole rows: a ",
        "positive multiple of ", row_bytes, " bytes (", plan.row_elements, " ",
        DTypeName(plan.dtype), " elements per row",
        plan.streamed_operands == 2 ? ", lat then lon" : "", ")"));
  }
  const int64_t rows = static_cast<int64_t>(bytes / row_bytes);
  if (rows > plan.rows - received_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data message ", message, " carries ", rows, " rows past row ", received_rows,
        "; header.shape ", ShapeToString(plan.shape), " declares ", plan.rows, " rows"));
  }
  if (rows * plan.row_elements * plan.result_runs > plan.max_chunk_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data message ", message, " carries ", rows, " rows (",
        rows * plan.row_elements * plan.result_runs, " result elements); max_elements is ",
        plan.max_chunk_elements, "; send smaller chunks"));
  }
  return rows;
}

namespace {

// The operand on `device` (a stored one as it is when it lives there).
absl::StatusOr<std::shared_ptr<Array>> OnDevice(const OperandSpec& operand, int device,
                                                Backend& backend) {
  if (operand.stored != nullptr && operand.stored->device() == device) return operand.stored;
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array,
                      backend.Allocate(operand.dtype, operand.shape, device));
  const std::shared_ptr<Array>& held = operand.stored != nullptr ? operand.stored : operand.view;
  if (held != nullptr) {
    GC_RETURN_IF_ERROR(backend.CopyArray(*held, *array));
  } else {
    const std::string& data = operand.tensor->data();
    GC_RETURN_IF_ERROR(backend.CopyToArray(data.data(), 0, data.size(), *array));
  }
  return array;
}

template <typename T>
std::vector<T> Ones(int64_t count) {
  return std::vector<T>(static_cast<size_t>(count), T{1});
}

}  // namespace

absl::StatusOr<std::shared_ptr<Array>> PrepareFactors(const StreamingPlan& plan, int device,
                                                      Backend& backend, OpContext& ctx) {
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> factors, OnDevice(*plan.factors, device, backend));
  const int64_t period = Product(plan.factor_shape);
  if (factors->size() == period) return factors;
  // Broadcast within the period (extents of 1): factors * 1, exact. The factors'
  // leading extents of 1 lie outside the period: dropped, so that they do not
  // widen it ((1, 24, 1) over a (24, 7) period is (24, 1)).
  const Shape& shape = factors->shape();
  const Shape within(shape.end() - std::min(shape.size(), plan.factor_shape.size()), shape.end());
  factors = std::make_shared<ArraySlice>(factors, 0, within, factors->size());
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> ones,
                      backend.Allocate(plan.dtype, plan.factor_shape, device));
  if (plan.dtype == DType::kFloat32) {
    const std::vector<float> host = Ones<float>(period);
    GC_RETURN_IF_ERROR(backend.CopyToArray(host.data(), 0, ones->bytes(), *ones));
  } else {
    const std::vector<double> host = Ones<double>(period);
    GC_RETURN_IF_ERROR(backend.CopyToArray(host.data(), 0, ones->bytes(), *ones));
  }
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> expanded,
                      backend.Allocate(plan.dtype, plan.factor_shape, device));
  GC_RETURN_IF_ERROR(backend.DiscountProduct(*factors, *ones, *expanded, ctx));
  return expanded;
}

namespace {

// The pieces' bytes [begin, end), as pieces.
std::vector<HostPiece> PiecesWithin(std::span<const HostPiece> pieces, uint64_t begin,
                                    uint64_t end) {
  std::vector<HostPiece> within;
  uint64_t at = 0;
  for (const HostPiece& piece : pieces) {
    const uint64_t lo = std::max(begin, at);
    const uint64_t hi = std::min(end, at + piece.bytes);
    if (lo < hi) within.push_back({static_cast<const char*>(piece.data) + (lo - at), hi - lo});
    at += piece.bytes;
  }
  return within;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Array>> ChunkArrays::Take(DType dtype, const Shape& shape) {
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<Array>& array : arrays_) {
    // Only the pool holds it (and mu_ keeps another Take from it).
    if (array.use_count() == 1 && array->dtype() == dtype && array->shape() == shape) return array;
  }
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array, backend_.Allocate(dtype, shape, device_));
  if (arrays_.size() < capacity_) {
    arrays_.push_back(array);
  } else {
    // Full: make room by dropping one no one uses (e.g. of another shape).
    for (std::shared_ptr<Array>& held : arrays_) {
      if (held.use_count() == 1) {
        held = array;
        break;
      }
    }
  }
  return array;
}

void ChunkArrays::Clear() {
  absl::MutexLock lock(&mu_);
  arrays_.clear();
}

namespace {

// Elements [first, first + count) of `values` times the factors they take (one
// period of `factors`, flat): a run within a period against a slice of the
// factors, then whole periods against all of them, then the rest.
absl::Status DiscountRange(const std::shared_ptr<Array>& factors,
                           const std::shared_ptr<Array>& values,
                           const std::shared_ptr<Array>& out, int64_t first, Backend& backend,
                           OpContext& ctx, absl::Duration& compute) {
  const int64_t period = factors->size();
  const int64_t count = values->size();
  auto slice = [](const std::shared_ptr<Array>& a, int64_t offset, Shape shape) {
    int64_t n = 1;
    for (int64_t extent : shape) n *= extent;
    return std::make_shared<ArraySlice>(a, offset, std::move(shape), n);
  };
  auto run = [&](const std::shared_ptr<Array>& f, int64_t at, Shape shape) -> absl::Status {
    ctx.compute_time = absl::ZeroDuration();
    GC_RETURN_IF_ERROR(backend.DiscountProduct(*f, *slice(values, at, shape),
                                               *slice(out, at, shape), ctx));
    compute += ctx.compute_time;
    return absl::OkStatus();
  };
  int64_t at = 0;
  const int64_t phase = first % period;
  if (phase != 0) {
    const int64_t n = std::min(count, period - phase);
    GC_RETURN_IF_ERROR(run(slice(factors, phase, {n}), 0, {n}));
    at = n;
  }
  if (const int64_t periods = (count - at) / period; periods > 0) {
    GC_RETURN_IF_ERROR(run(slice(factors, 0, {period}), at, {periods, period}));
    at += periods * period;
  }
  if (at < count) {
    GC_RETURN_IF_ERROR(run(slice(factors, 0, {count - at}), at, {count - at}));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Array>> RunStreamingChunk(const StreamingPlan& plan,
                                                         const std::shared_ptr<Array>& factors,
                                                         ChunkArrays& arrays, Backend& backend,
                                                         std::span<const HostPiece> pieces,
                                                         int64_t first_row, int64_t rows,
                                                         OpContext& ctx, ExecutionTimes& times) {
  Shape chunk_shape = {rows};
  chunk_shape.insert(chunk_shape.end(), plan.row_shape.begin(), plan.row_shape.end());
  const uint64_t operand_bytes =
      static_cast<uint64_t>(rows * plan.row_elements) * plan.element_bytes();
  std::vector<std::shared_ptr<Array>> inputs;
  const absl::Time copy_start = absl::Now();
  for (int i = 0; i < plan.streamed_operands; ++i) {
    GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> input, arrays.Take(plan.dtype, chunk_shape));
    const std::vector<HostPiece> within =
        PiecesWithin(pieces, i * operand_bytes, (i + 1) * operand_bytes);
    GC_RETURN_IF_ERROR(backend.CopyPiecesToArray(within, 0, *input));
    inputs.push_back(std::move(input));
  }
  times.transfer_in += absl::Now() - copy_start;
  times.bytes_in += operand_bytes * plan.streamed_operands;
  Shape out_shape = chunk_shape;
  if (plan.op == v1::STREAMING_HAVERSINE_POINTS) out_shape.insert(out_shape.begin(), plan.result_runs);
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> out, arrays.Take(plan.dtype, out_shape));
  ctx.compute_time = absl::ZeroDuration();
  switch (plan.op) {
    case v1::STREAMING_DISCOUNT_PRODUCT:
      GC_RETURN_IF_ERROR(
          DiscountRange(factors, inputs[0], out, first_row, backend, ctx, times.compute));
      return out;
    case v1::STREAMING_HAVERSINE_POINTS:
      GC_RETURN_IF_ERROR(backend.HaversinePoints(*inputs[0], *inputs[1], plan.references,
                                                 plan.radius, *out, ctx));
      break;
    default:
      GC_RETURN_IF_ERROR(backend.Normalize(*inputs[0], plan.norm, *out, ctx));
      break;
  }
  times.compute += ctx.compute_time;
  return out;
}

std::vector<ResultRun> ChunkResultRuns(const StreamingPlan& plan, int64_t first_row,
                                       int64_t rows) {
  const uint64_t row_bytes = static_cast<uint64_t>(plan.row_elements) * plan.element_bytes();
  const uint64_t run_bytes = static_cast<uint64_t>(rows) * row_bytes;
  const uint64_t total_run_bytes = static_cast<uint64_t>(plan.rows) * row_bytes;
  std::vector<ResultRun> runs;
  for (int64_t r = 0; r < plan.result_runs; ++r) {
    runs.push_back({.source = r * run_bytes,
                    .offset = r * total_run_bytes + static_cast<uint64_t>(first_row) * row_bytes,
                    .bytes = run_bytes});
  }
  return runs;
}

}  // namespace gpucompute
