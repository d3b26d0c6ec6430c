#include "server/prepared_operation.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "absl/base/casts.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "kernels/lombscargle_nufft.h"
#include "kernels/preconditions.h"
#include "kernels/shape_rules.h"
#include "server/inline_run.h"
#include "server/proto_convert.h"

namespace gpucompute {
namespace {

absl::Status NotEmpty(const OperandSpec& operand) {
  for (int64_t extent : operand.shape) {
    if (extent == 0) {
      return absl::InvalidArgumentError(absl::StrCat(operand.field, ".shape ",
                                                     ShapeToString(operand.shape),
                                                     " is empty; operands need >= 1 element"));
    }
  }
  return absl::OkStatus();
}

absl::Status SameDType(const OperandSpec& a, const OperandSpec& b) {
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(a.field, " is ", DTypeName(a.dtype), " but ",
                                                   b.field, " is ", DTypeName(b.dtype),
                                                   "; operands must share one dtype"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OperandSpec> ResolveNonEmpty(const v1::Operand& operand, absl::string_view field,
                                            const RequestScope& scope) {
  GC_ASSIGN_OR_RETURN(OperandSpec spec, ResolveOperand(operand, field, scope));
  GC_RETURN_IF_ERROR(NotEmpty(spec));
  return spec;
}

absl::Status CheckOutputSize(const Shape& shape, int64_t max_elements) {
  return CheckedElementCount(shape, max_elements, "result").status();
}

// The product of `factors` (each >= 0), INT64_MAX when it would overflow.
int64_t SaturatingProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t factor : factors) {
    if (factor != 0 && product > std::numeric_limits<int64_t>::max() / factor) {
      return std::numeric_limits<int64_t>::max();
    }
    product *= factor;
  }
  return product;
}

// Elements of a shape already checked against max_elements (so no overflow).
int64_t ElementsOf(const Shape& shape) {
  int64_t elements = 1;
  for (int64_t extent : shape) elements *= extent;
  return elements;
}

template <typename T>
double Load(const std::string& data, int64_t i) {
  T value;
  std::memcpy(&value, data.data() + i * sizeof(T), sizeof(T));
  return value;
}

// An inline operand's values against `rule`. Stored operands' values are on the
// backend: the operation's kernels check them, or `RequireValues` has them checked.
absl::Status CheckInlineValues(const OperandSpec& operand, const ValueRule& rule) {
  if (operand.tensor == nullptr) return absl::OkStatus();
  const std::string& data = operand.tensor->data();
  const int64_t count = static_cast<int64_t>(data.size() / ElementSize(operand.dtype));
  if (operand.dtype == DType::kFloat32) {
    return CheckElements(count, [&](int64_t i) { return Load<float>(data, i); }, operand.field,
                         rule);
  }
  return CheckElements(count, [&](int64_t i) { return Load<double>(data, i); }, operand.field,
                       rule);
}

// The region a slice names, when this call may use shared memory.
absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> RegionOf(const v1::SharedMemorySlice& slice,
                                                             absl::string_view field,
                                                             const RequestScope& scope) {
  if (!scope.regions.ok()) {
    return WithContext(scope.regions.status(), field);
  }
  absl::StatusOr<std::string> owner = scope.regions->Owner();
  if (!owner.ok()) {
    return WithContext(owner.status(), field);
  }
  return scope.regions->registry->Get(slice.region_id(), absl::StrCat(field, ".region_id"), *owner);
}

// Whether two arrays on one device share a byte.
bool Overlap(const Array& a, const Array& b) {
  if (a.device() != b.device() || a.bytes() == 0 || b.bytes() == 0) return false;
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

// `source` (stored, or a shared-memory slice) as an array on `device`: itself
// when it lives there, else a copy.
absl::StatusOr<std::shared_ptr<Array>> OnDevice(const std::shared_ptr<Array>& source, int device,
                                                Backend& backend, Metrics& metrics,
                                                ExecutionTimes& times) {
  if (source->device() == device) return source;
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> copy,
                      backend.Allocate(source->dtype(), source->shape(), device));
  const absl::Time start = absl::Now();
  if (source->device() == kHostDevice) {
    GC_RETURN_IF_ERROR(backend.CopyToArray(source->data(), 0, source->bytes(), *copy));
    metrics.Transferred(Direction::kHostToDevice, source->bytes(), absl::Now() - start);
  } else {
    // Stored on (or shared from) another GPU.
    GC_RETURN_IF_ERROR(backend.CopyArray(*source, *copy));
  }
  times.transfer_in += absl::Now() - start;
  return copy;
}

// Every value of `operand` follows `rule`: inline data now, stored data on the
// backend before the run.
absl::Status RequireValues(OperandSpec& operand, const ValueRule& rule) {
  operand.stored_rule = &rule;
  return CheckInlineValues(operand, rule);
}

absl::StatusOr<int64_t> CheckCount(uint64_t count, absl::string_view field, int64_t max_elements) {
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is 0; need at least 1"));
  }
  if (count > static_cast<uint64_t>(max_elements)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", count, "; the limit is ",
                                                   max_elements, " (max_elements)"));
  }
  return static_cast<int64_t>(count);
}


// Shared operands of a batch larger than this are not batched (their bytes are
// part of the key).
constexpr size_t kMaxSharedBatchBytes = 64 << 10;

std::string KeyPart(const Shape& shape) { return ShapeToString(shape); }

// `shape` with the leading extent `rows` in front.
Shape WithRows(int64_t rows, const Shape& shape) {
  Shape out = {rows};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

bool AllInline(const std::vector<OperandSpec>& operands) {
  for (const OperandSpec& operand : operands) {
    if (operand.tensor == nullptr) return false;
  }
  return true;
}

// Appends a shared operand to `key`: its shape and bytes. False when too large.
bool AppendShared(std::string& key, const OperandSpec& operand) {
  const std::string& data = operand.tensor->data();
  if (data.size() > kMaxSharedBatchBytes) return false;
  absl::StrAppend(&key, "|", KeyPart(operand.shape), ":", data.size(), ":");
  key.append(data);
  return true;
}

// Normalize rows of one length and norm stack along the rows.
std::optional<BatchPlan> NormalizeBatch(const PreparedOperation& prepared, NormKind norm) {
  if (!AllInline(prepared.operands)) return std::nullopt;
  const Shape& shape = prepared.operands[0].shape;
  const int64_t cols = shape.back();
  const int64_t rows = ElementsOf(shape) / cols;
  BatchPlan plan;
  plan.key = absl::StrCat("normalize|", DTypeName(prepared.out_dtype), "|", static_cast<int>(norm),
                          "|", cols);
  plan.stacked = {{rows, cols}};
  plan.out = {rows, cols};
  return plan;
}

// Discount products of the same operand shapes stack along a new leading axis.
std::optional<BatchPlan> DiscountBatch(const PreparedOperation& prepared) {
  if (!AllInline(prepared.operands)) return std::nullopt;
  const Shape& factors = prepared.operands[0].shape;
  const Shape& values = prepared.operands[1].shape;
  const size_t rank = std::max(factors.size(), values.size());
  if (rank + 1 > static_cast<size_t>(kMaxRank)) return std::nullopt;
  const auto padded = [rank](const Shape& shape) {
    Shape out(rank - shape.size(), 1);
    out.insert(out.end(), shape.begin(), shape.end());
    return WithRows(1, out);
  };
  BatchPlan plan;
  plan.key = absl::StrCat("discount|", DTypeName(prepared.out_dtype), "|", KeyPart(factors), "|",
                          KeyPart(values));
  plan.stacked = {padded(factors), padded(values)};
  plan.out = WithRows(1, prepared.out_shape);
  return plan;
}

}  // namespace

absl::StatusOr<OperandSpec> ResolveOperand(const v1::Operand& operand, absl::string_view field,
                                           const RequestScope& scope) {
  OperandSpec spec;
  spec.field = std::string(field);
  switch (operand.source_case()) {
    case v1::Operand::kTensor: {
      const v1::Tensor& tensor = operand.tensor();
      GC_ASSIGN_OR_RETURN(spec.dtype,
                          DTypeFromProto(tensor.dtype(), absl::StrCat(field, ".dtype")));
      spec.shape.assign(tensor.shape().begin(), tensor.shape().end());
      GC_ASSIGN_OR_RETURN(const int64_t count,
                          CheckedElementCount(spec.shape, scope.max_elements, field));
      const uint64_t expected = static_cast<uint64_t>(count) * ElementSize(spec.dtype);
      if (tensor.data().size() != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".data has ", tensor.data().size(), " bytes but shape ",
            ShapeToString(spec.shape), " of ", DTypeName(spec.dtype), " needs ", expected));
      }
      spec.tensor = &tensor;
      return spec;
    }
    case v1::Operand::kBufferId: {
      GC_ASSIGN_OR_RETURN(
          StoredBuffer buffer,
          scope.store.Get(operand.buffer_id(), absl::StrCat(field, ".buffer_id"), scope.principal));
      spec.dtype = buffer.array->dtype();
      spec.shape = buffer.array->shape();
      spec.stored = std::move(buffer.array);
      return spec;
    }
    case v1::Operand::kSharedMemory: {
      const v1::SharedMemorySlice& slice = operand.shared_memory();
      const std::string slice_field = absl::StrCat(field, ".shared_memory");
      GC_ASSIGN_OR_RETURN(spec.region, RegionOf(slice, slice_field, scope));
      GC_ASSIGN_OR_RETURN(spec.dtype,
                          DTypeFromProto(slice.dtype(), absl::StrCat(slice_field, ".dtype")));
      spec.shape.assign(slice.shape().begin(), slice.shape().end());
      GC_ASSIGN_OR_RETURN(spec.view, spec.region->View(spec.dtype, spec.shape, slice.offset(),
                                                       scope.max_elements, slice_field));
      return spec;
    }
    case v1::Operand::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is not set; give a tensor, a buffer_id or a shared_memory slice"));
}

absl::Status ResolveOutputSlice(const v1::SharedMemorySlice& slice, const RequestScope& scope,
                                PreparedOperation& prepared) {
  constexpr absl::string_view kField = "output.shared_memory";
  GC_ASSIGN_OR_RETURN(prepared.output_region, RegionOf(slice, kField, scope));
  if (slice.dtype() != v1::DTYPE_UNSPECIFIED &&
      slice.dtype() != DTypeToProto(prepared.out_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(kField, ".dtype is ",
                                                   v1::DType_Name(slice.dtype()),
                                                   " but the result is ",
                                                   DTypeName(prepared.out_dtype)));
  }
  const Shape shape(slice.shape().begin(), slice.shape().end());
  if (!shape.empty() && shape != prepared.out_shape) {
    return absl::InvalidArgumentError(absl::StrCat(kField, ".shape ", ShapeToString(shape),
                                                   " differs from the result's ",
                                                   ShapeToString(prepared.out_shape)));
  }
  GC_ASSIGN_OR_RETURN(prepared.output_view,
                      prepared.output_region->View(prepared.out_dtype, prepared.out_shape,
                                                   slice.offset(), scope.max_elements, kField));
  return absl::OkStatus();
}

absl::StatusOr<PreparedOperation> PrepareDiscountProduct(const v1::DiscountProductRequest& request,
                                                         const RequestScope& scope) {
  GC_ASSIGN_OR_RETURN(OperandSpec factors, ResolveNonEmpty(request.factors(), "factors", scope));
  GC_ASSIGN_OR_RETURN(OperandSpec values, ResolveNonEmpty(request.values(), "values", scope));
  GC_RETURN_IF_ERROR(SameDType(factors, values));
  GC_ASSIGN_OR_RETURN(Shape out,
                      BroadcastShapes(factors.shape, values.shape, "factors", "values"));
  GC_RETURN_IF_ERROR(CheckOutputSize(out, scope.max_elements));

  PreparedOperation prepared;
  prepared.out_dtype = factors.dtype;
  prepared.out_shape = std::move(out);
  prepared.work = ElementsOf(prepared.out_shape);
  prepared.operands = {std::move(factors), std::move(values)};
  prepared.run = [](Backend& backend, std::span<const std::shared_ptr<Array>> in, Array& out,
                    OpContext& ctx) { return backend.DiscountProduct(*in[0], *in[1], out, ctx); };
  prepared.batch = DiscountBatch(prepared);
  return prepared;
}

absl::StatusOr<PreparedOperation> PrepareHaversineGrid(const v1::HaversineGridRequest& request,
                                                       const RequestScope& scope) {
  const int64_t max_elements = scope.max_elements;
  if (request.references_size() == 0) {
    return absl::InvalidArgumentError("references is empty; give at least one reference point");
  }
  std::vector<GeoPoint> refs;
  refs.reserve(request.references_size());
  for (const v1::GeoPoint& ref : request.references()) refs.push_back({ref.lat(), ref.lon()});
  GC_RETURN_IF_ERROR(CheckReferences(refs));
  const double radius = request.radius() == 0 ? kDefaultEarthRadiusKm : request.radius();
  GC_RETURN_IF_ERROR(CheckRadius(radius));
  const int64_t n_ref = static_cast<int64_t>(refs.size());

  PreparedOperation prepared;
  switch (request.grid_case()) {
    case v1::HaversineGridRequest::kMesh: {
      const v1::LatLonMesh& m = request.mesh();
      LatLonMesh mesh{{m.lat_start(), m.lat_stop(), 0}, {m.lon_start(), m.lon_stop(), 0}};
      GC_RETURN_IF_ERROR(CheckMeshBounds(mesh));
      GC_ASSIGN_OR_RETURN(mesh.lat.count, CheckCount(m.n_lat(), "mesh.n_lat", max_elements));
      GC_ASSIGN_OR_RETURN(mesh.lon.count, CheckCount(m.n_lon(), "mesh.n_lon", max_elements));
      if (m.dtype() == v1::DTYPE_UNSPECIFIED) {
        prepared.out_dtype = DType::kFloat64;
      } else {
        GC_ASSIGN_OR_RETURN(prepared.out_dtype, DTypeFromProto(m.dtype(), "mesh.dtype"));
      }
      prepared.out_shape = {n_ref, mesh.lat.count, mesh.lon.count};
      GC_RETURN_IF_ERROR(CheckOutputSize(prepared.out_shape, max_elements));
      prepared.work = ElementsOf(prepared.out_shape);
      prepared.run = [mesh, refs = std::move(refs), radius](
                         Backend& backend, std::span<const std::shared_ptr<Array>>, Array& out,
                         OpContext& ctx) {
        return backend.HaversineMesh(mesh, refs, radius, out, ctx);
      };
      return prepared;
    }
    case v1::HaversineGridRequest::kPoints: {
      GC_ASSIGN_OR_RETURN(OperandSpec lat,
                          ResolveNonEmpty(request.points().lat(), "points.lat", scope));
      GC_ASSIGN_OR_RETURN(OperandSpec lon,
                          ResolveNonEmpty(request.points().lon(), "points.lon", scope));
      GC_RETURN_IF_ERROR(SameDType(lat, lon));
      GC_RETURN_IF_ERROR(CheckInlineValues(lat, kLatitudeRule));
      GC_RETURN_IF_ERROR(CheckInlineValues(lon, kLongitudeRule));
      if (lat.shape != lon.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "points.lat.shape ", ShapeToString(lat.shape), " and points.lon.shape ",
            ShapeToString(lon.shape), " differ; they must be equal"));
      }
      if (lat.shape.size() >= static_cast<size_t>(kMaxRank)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "points.lat has rank ", lat.shape.size(), "; the result adds an axis and the limit is ",
            kMaxRank));
      }
      prepared.out_dtype = lat.dtype;
      prepared.out_shape = {n_ref};
      prepared.out_shape.insert(prepared.out_shape.end(), lat.shape.begin(), lat.shape.end());
      GC_RETURN_IF_ERROR(CheckOutputSize(prepared.out_shape, max_elements));
      prepared.work = ElementsOf(prepared.out_shape);
      prepared.operands = {std::move(lat), std::move(lon)};
      prepared.run = [refs = std::move(refs), radius](
                         Backend& backend, std::span<const std::shared_ptr<Array>> in, Array& out,
                         OpContext& ctx) {
        return backend.HaversinePoints(*in[0], *in[1], refs, radius, out, ctx);
      };
      return prepared;
    }
    case v1::HaversineGridRequest::GRID_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("grid is not set; give mesh or points");
}

absl::StatusOr<PreparedOperation> PrepareNormalize(const v1::NormalizeRequest& request,
                                                   const RequestScope& scope) {
  GC_ASSIGN_OR_RETURN(OperandSpec input, ResolveOperand(request.input(), "input", scope));
  GC_RETURN_IF_ERROR(CheckNormalizeShape(input.shape, "input"));
  GC_RETURN_IF_ERROR(NotEmpty(input));
  GC_ASSIGN_OR_RETURN(const NormKind norm, NormFromProto(request.norm(), "norm"));
  PreparedOperation prepared;
  prepared.out_dtype = input.dtype;
  prepared.out_shape = input.shape;
  prepared.work = ElementsOf(prepared.out_shape);
  prepared.operands = {std::move(input)};
  prepared.run = [norm](Backend& backend, std::span<const std::shared_ptr<Array>> in, Array& out,
                        OpContext& ctx) { return backend.Normalize(*in[0], norm, out, ctx); };
  prepared.batch = NormalizeBatch(prepared, norm);
  return prepared;
}

absl::StatusOr<PreparedOperation> PrepareLombScargle(const v1::LombScargleRequest& request,
                                                     const RequestScope& scope) {
  const int64_t max_elements = scope.max_elements;
  GC_ASSIGN_OR_RETURN(OperandSpec x, ResolveOperand(request.x(), "x", scope));
  GC_ASSIGN_OR_RETURN(const OperandSpec y, ResolveOperand(request.y(), "y", scope));
  GC_RETURN_IF_ERROR(SameDType(y, x));
  GC_RETURN_IF_ERROR(RequireValues(x, kSampleTimeRule));

  PreparedOperation prepared;
  prepared.operands = {x, y};
  const bool has_weights = request.has_weights();
  if (has_weights) {
    GC_ASSIGN_OR_RETURN(OperandSpec weights, ResolveOperand(request.weights(), "weights", scope));
    GC_RETURN_IF_ERROR(SameDType(y, weights));
    prepared.operands.push_back(std::move(weights));
  }

  Linspace grid;
  bool has_freqs = false;
  int64_t frequencies = 0;
  switch (request.frequencies_case()) {
    case v1::LombScargleRequest::kFreqs: {
      GC_ASSIGN_OR_RETURN(OperandSpec freqs, ResolveOperand(request.freqs(), "freqs", scope));
      GC_RETURN_IF_ERROR(SameDType(y, freqs));
      if (freqs.shape.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("freqs.shape ", ShapeToString(freqs.shape), " must be (M,)"));
      }
      GC_RETURN_IF_ERROR(RequireValues(freqs, kFrequencyRule));
      frequencies = freqs.shape[0];
      prepared.operands.push_back(std::move(freqs));
      has_freqs = true;
      break;
    }
    case v1::LombScargleRequest::kFreqGrid: {
      const v1::FrequencyGrid& g = request.freq_grid();
      GC_ASSIGN_OR_RETURN(frequencies, CheckCount(g.count(), "freq_grid.count", max_elements));
      grid = {g.start(), g.stop(), frequencies};
      GC_RETURN_IF_ERROR(CheckFrequencyGrid(grid, "freq_grid"));
      break;
    }
    case v1::LombScargleRequest::FREQUENCIES_NOT_SET:
      return absl::InvalidArgumentError("frequencies are not set; give freqs or freq_grid");
  }

  const Shape* weights_shape = has_weights ? &prepared.operands[2].shape : nullptr;
  LombScargleOptions options{.precenter = request.precenter(),
                             .floating_mean = request.floating_mean()};
  GC_RETURN_IF_ERROR(LombScargleNormalizationFromProto(request, options));
  options.row_offsets.assign(request.row_offsets().begin(), request.row_offsets().end());
  GC_ASSIGN_OR_RETURN(
      const LombScargleShape shapes,
      LombScargleShapes(x.shape, y.shape, weights_shape, frequencies, options.row_offsets));
  prepared.out_dtype = y.dtype;
  prepared.out_shape = LombScargleOutShape(shapes, options.amplitude);
  GC_RETURN_IF_ERROR(CheckOutputSize(prepared.out_shape, max_elements));
  prepared.work = shapes.ragged
                      ? SaturatingProduct({y.shape[0], shapes.frequencies})
                      : SaturatingProduct({shapes.batch, shapes.samples, shapes.frequencies});

  GC_ASSIGN_OR_RETURN(options.method, LombScargleMethodFromProto(request.method(), "method"));
  if (request.accuracy() != 0) options.accuracy = request.accuracy();
  GC_RETURN_IF_ERROR(CheckNufftAccuracy(options.accuracy, "accuracy"));
  // Series of one x, frequencies and options stack along the batch axis of y.
  // (Under method auto a batch may run the other method than one series would:
  // the trailer says which ran, and both agree within the accuracy.)
  if (!has_weights && !shapes.x_batched && !shapes.ragged && AllInline(prepared.operands)) {
    BatchPlan plan;
    plan.key = absl::StrCat("lombscargle|", DTypeName(y.dtype), "|", options.precenter,
                            options.normalize, options.floating_mean, options.amplitude, "|",
                            static_cast<int>(options.method), ":", options.accuracy, "|",
                            shapes.samples, "|", shapes.frequencies);
    bool shared_fits = AppendShared(plan.key, prepared.operands[0]);
    if (has_freqs) {
      shared_fits = shared_fits && AppendShared(plan.key, prepared.operands.back());
    } else {
      absl::StrAppend(&plan.key, "|grid:", absl::Hex(absl::bit_cast<uint64_t>(grid.start)), ":",
                      absl::Hex(absl::bit_cast<uint64_t>(grid.stop)));
    }
    plan.stacked.resize(prepared.operands.size());
    plan.stacked[1] = {shapes.batch, shapes.samples};
    plan.out = {shapes.batch, shapes.frequencies};
    if (options.amplitude) plan.out.push_back(2);
    if (shared_fits) prepared.batch = std::move(plan);
  }
  prepared.run = [has_weights, has_freqs, grid, options = std::move(options)](
                     Backend& backend, std::span<const std::shared_ptr<Array>> in, Array& out,
                     OpContext& ctx) {
    const Array* weights = has_weights ? in[2].get() : nullptr;
    const Array* freqs = has_freqs ? in.back().get() : nullptr;
    return backend.LombScargle(*in[0], *in[1], weights, freqs, grid, options, out, ctx);
  };
  return prepared;
}

absl::StatusOr<std::shared_ptr<Array>> Execute(PreparedOperation& prepared, Backend& backend,
                                               DeviceQueues& queues, Metrics& metrics,
                                               OpContext& ctx, ExecutionTimes& times,
                                               bool result_to_host) {
  int device = kHostDevice;
  bool placed = false;
  for (const OperandSpec& operand : prepared.operands) {
    const Array* held = operand.stored != nullptr ? operand.stored.get() : operand.view.get();
    // Host slices of shared memory do not place the work; GPU-resident data does.
    if (held != nullptr && (operand.stored != nullptr || held->device() != kHostDevice)) {
      device = held->device();
      placed = true;
      break;
    }
  }
  if (!placed) device = backend.PickDevice();
  times.device = DeviceLabel(device);
  absl::StatusOr<DeviceQueues::Slot> slot = queues.Enter(device, times.device);
  if (!slot.ok()) {
    metrics.Rejected(Rejection::kDeviceQueueFull);
    return slot.status();
  }
  if (result_to_host && InlineRunnable(prepared)) {
    return RunInline(prepared, backend, device, metrics, ctx, times);
  }

  std::vector<std::shared_ptr<Array>> arrays;
  arrays.reserve(prepared.operands.size());
  for (const OperandSpec& operand : prepared.operands) {
    const std::shared_ptr<Array>& held = operand.stored != nullptr ? operand.stored : operand.view;
    if (held != nullptr) {
      GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array,
                          OnDevice(held, device, backend, metrics, times));
      if (operand.stored_rule != nullptr) {
        GC_RETURN_IF_ERROR(backend.CheckValues(*array, operand.field, *operand.stored_rule));
      }
      arrays.push_back(std::move(array));
      continue;
    }
    GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array,
                        backend.Allocate(operand.dtype, operand.shape, device));
    const absl::Time start = absl::Now();
    size_t bytes = 0;
    if (operand.tensor != nullptr) {
      const std::string& data = operand.tensor->data();
      bytes = data.size();
      GC_RETURN_IF_ERROR(backend.CopyToArray(data.data(), 0, bytes, *array));
    } else {
      for (const HostPiece& piece : operand.pieces) bytes += piece.bytes;
      GC_RETURN_IF_ERROR(backend.CopyPiecesToArray(operand.pieces, 0, *array));
    }
    const absl::Duration elapsed = absl::Now() - start;
    times.transfer_in += elapsed;
    times.bytes_in += bytes;
    metrics.Transferred(Direction::kHostToDevice, bytes, elapsed);
    arrays.push_back(std::move(array));
  }
  if (ctx.IsCancelled()) return absl::CancelledError("request cancelled before it ran");

  const std::shared_ptr<Array>& slice = prepared.output_view;
  const bool in_place =
      slice != nullptr && slice->device() == device &&
      std::none_of(arrays.begin(), arrays.end(),
                   [&](const std::shared_ptr<Array>& in) { return Overlap(*in, *slice); });
  std::shared_ptr<Array> out = slice;
  if (!in_place) {
    GC_ASSIGN_OR_RETURN(out, backend.Allocate(prepared.out_dtype, prepared.out_shape, device));
  }
  GC_RETURN_IF_ERROR(prepared.run(backend, arrays, *out, ctx));
  times.compute = ctx.compute_time;
  times.method = std::string(ctx.method);
  if (slice != nullptr && !in_place) {
    const absl::Time start = absl::Now();
    if (slice->device() == kHostDevice) {
      GC_RETURN_IF_ERROR(backend.CopyFromArray(*out, 0, out->bytes(), slice->data()));
      metrics.Transferred(Direction::kDeviceToHost, out->bytes(), absl::Now() - start);
    } else {
      GC_RETURN_IF_ERROR(backend.CopyArray(*out, *slice));
    }
    times.transfer_out = absl::Now() - start;
    out = slice;
  }
  // A shared-memory object shrunk under the work made it read zeros.
  for (const OperandSpec& operand : prepared.operands) {
    if (operand.region != nullptr) GC_RETURN_IF_ERROR(operand.region->CheckIntact(operand.field));
  }
  if (prepared.output_region != nullptr) {
    GC_RETURN_IF_ERROR(prepared.output_region->CheckIntact("output.shared_memory"));
  }
  return out;
}

}  // namespace gpucompute
