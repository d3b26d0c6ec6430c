#include "server/operations.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/shape_rules.h"

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
  absl::StatusOr<OperandSpec> spec = ResolveOperand(operand, field, scope);
  if (!spec.ok()) return spec.status();
  if (absl::Status s = NotEmpty(*spec); !s.ok()) return s;
  return spec;
}

absl::Status CheckOutputSize(const Shape& shape, int64_t max_elements) {
  return CheckedElementCount(shape, max_elements, "result").status();
}

absl::Status CheckLatitude(double lat, absl::string_view field) {
  if (!(lat >= -90.0 && lat <= 90.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", lat, "; latitude must lie in [-90, 90] degrees"));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(double value, absl::string_view field) {
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", value, "; it must be finite"));
  }
  return absl::OkStatus();
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

}  // namespace

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::FLOAT32: return DType::kFloat32;
    case v1::FLOAT64: return DType::kFloat64;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is DTYPE_UNSPECIFIED; use FLOAT32 or FLOAT64"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, " has unknown value ",
                                                     static_cast<int>(dtype),
                                                     "; use FLOAT32 (1) or FLOAT64 (2)"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  return dtype == DType::kFloat32 ? v1::FLOAT32 : v1::FLOAT64;
}

std::string DeviceLabel(int device) {
  return device == kHostDevice ? "cpu" : absl::StrCat("cuda:", device);
}

void ToBufferInfo(const StoredBuffer& buffer, v1::BufferInfo* info) {
  info->set_id(buffer.id);
  info->set_name(buffer.name);
  info->set_dtype(DTypeToProto(buffer.array->dtype()));
  info->clear_shape();
  for (int64_t extent : buffer.array->shape()) info->add_shape(extent);
  info->set_bytes(buffer.array->bytes());
  info->set_location(DeviceLabel(buffer.array->device()));
  info->set_created_unix_ms(absl::ToUnixMillis(buffer.created));
}

absl::StatusOr<OperandSpec> ResolveOperand(const v1::Operand& operand, absl::string_view field,
                                           const RequestScope& scope) {
  OperandSpec spec;
  spec.field = std::string(field);
  switch (operand.source_case()) {
    case v1::Operand::kTensor: {
      const v1::Tensor& tensor = operand.tensor();
      absl::StatusOr<DType> dtype = DTypeFromProto(tensor.dtype(), absl::StrCat(field, ".dtype"));
      if (!dtype.ok()) return dtype.status();
      spec.dtype = *dtype;
      spec.shape.assign(tensor.shape().begin(), tensor.shape().end());
      absl::StatusOr<int64_t> count = CheckedElementCount(spec.shape, scope.max_elements, field);
      if (!count.ok()) return count.status();
      const uint64_t expected = static_cast<uint64_t>(*count) * ElementSize(spec.dtype);
      if (tensor.data().size() != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".data has ", tensor.data().size(), " bytes but shape ",
            ShapeToString(spec.shape), " of ", DTypeName(spec.dtype), " needs ", expected));
      }
      spec.tensor = &tensor;
      return spec;
    }
    case v1::Operand::kBufferId: {
      absl::StatusOr<StoredBuffer> buffer =
          scope.store.Get(operand.buffer_id(), absl::StrCat(field, ".buffer_id"), scope.principal);
      if (!buffer.ok()) return buffer.status();
      spec.dtype = buffer->array->dtype();
      spec.shape = buffer->array->shape();
      spec.stored = std::move(buffer->array);
      return spec;
    }
    case v1::Operand::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is not set; give a tensor or a buffer_id"));
}

absl::StatusOr<PreparedOperation> PrepareDiscountProduct(const v1::DiscountProductRequest& request,
                                                         const RequestScope& scope) {
  const int64_t max_elements = scope.max_elements;
  absl::StatusOr<OperandSpec> factors =
      ResolveNonEmpty(request.factors(), "factors", scope);
  if (!factors.ok()) return factors.status();
  absl::StatusOr<OperandSpec> values =
      ResolveNonEmpty(request.values(), "values", scope);
  if (!values.ok()) return values.status();
  if (absl::Status s = SameDType(*factors, *values); !s.ok()) return s;
  absl::StatusOr<Shape> out = BroadcastShapes(factors->shape, values->shape, "factors", "values");
  if (!out.ok()) return out.status();
  if (absl::Status s = CheckOutputSize(*out, max_elements); !s.ok()) return s;

  PreparedOperation prepared;
  prepared.op = Operation::kDiscountProduct;
  prepared.out_dtype = factors->dtype;
  prepared.out_shape = *std::move(out);
  prepared.operands = {*std::move(factors), *std::move(values)};
  prepared.run = [](Backend& backend, std::span<const std::shared_ptr<Array>> in, Array& out,
                    OpContext& ctx) { return backend.DiscountProduct(*in[0], *in[1], out, ctx); };
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
  for (int i = 0; i < request.references_size(); ++i) {
    const v1::GeoPoint& ref = request.references(i);
    if (absl::Status s = CheckLatitude(ref.lat(), absl::StrCat("references[", i, "].lat"));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckFinite(ref.lon(), absl::StrCat("references[", i, "].lon"));
        !s.ok()) {
      return s;
    }
    refs.push_back({ref.lat(), ref.lon()});
  }
  double radius = request.radius() == 0 ? kDefaultEarthRadiusKm : request.radius();
  if (!(radius > 0) || !std::isfinite(radius)) {
    return absl::InvalidArgumentError(
        absl::StrCat("radius is ", request.radius(), "; it must be positive and finite"));
  }
  const int64_t n_ref = static_cast<int64_t>(refs.size());

  PreparedOperation prepared;
  prepared.op = Operation::kHaversineGrid;
  switch (request.grid_case()) {
    case v1::HaversineGridRequest::kMesh: {
      const v1::LatLonMesh& m = request.mesh();
      for (auto [value, field] : {std::pair{m.lat_start(), "mesh.lat_start"},
                                  std::pair{m.lat_stop(), "mesh.lat_stop"}}) {
        if (absl::Status s = CheckLatitude(value, field); !s.ok()) return s;
      }
      for (auto [value, field] : {std::pair{m.lon_start(), "mesh.lon_start"},
                                  std::pair{m.lon_stop(), "mesh.lon_stop"}}) {
        if (absl::Status s = CheckFinite(value, field); !s.ok()) return s;
      }
      absl::StatusOr<int64_t> n_lat = CheckCount(m.n_lat(), "mesh.n_lat", max_elements);
      if (!n_lat.ok()) return n_lat.status();
      absl::StatusOr<int64_t> n_lon = CheckCount(m.n_lon(), "mesh.n_lon", max_elements);
      if (!n_lon.ok()) return n_lon.status();
      if (m.dtype() == v1::DTYPE_UNSPECIFIED) {
        prepared.out_dtype = DType::kFloat64;
      } else {
        absl::StatusOr<DType> dtype = DTypeFromProto(m.dtype(), "mesh.dtype");
        if (!dtype.ok()) return dtype.status();
        prepared.out_dtype = *dtype;
      }
      prepared.out_shape = {n_ref, *n_lat, *n_lon};
      if (absl::Status s = CheckOutputSize(prepared.out_shape, max_elements); !s.ok()) return s;
      const LatLonMesh mesh{{m.lat_start(), m.lat_stop(), *n_lat},
                            {m.lon_start(), m.lon_stop(), *n_lon}};
      prepared.run = [mesh, refs = std::move(refs), radius](
                         Backend& backend, std::span<const std::shared_ptr<Array>>, Array& out,
                         OpContext& ctx) {
        return backend.HaversineMesh(mesh, refs, radius, out, ctx);
      };
      return prepared;
    }
    case v1::HaversineGridRequest::kPoints: {
      absl::StatusOr<OperandSpec> lat =
          ResolveNonEmpty(request.points().lat(), "points.lat", scope);
      if (!lat.ok()) return lat.status();
      absl::StatusOr<OperandSpec> lon =
          ResolveNonEmpty(request.points().lon(), "points.lon", scope);
      if (!lon.ok()) return lon.status();
      if (absl::Status s = SameDType(*lat, *lon); !s.ok()) return s;
      if (lat->shape != lon->shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "points.lat.shape ", ShapeToString(lat->shape), " and points.lon.shape ",
            ShapeToString(lon->shape), " differ; they must be equal"));
      }
      if (lat->shape.size() >= static_cast<size_t>(kMaxRank)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "points.lat has rank ", lat->shape.size(), "; the result adds an axis and the limit is ",
            kMaxRank));
      }
      prepared.out_dtype = lat->dtype;
      prepared.out_shape = {n_ref};
      prepared.out_shape.insert(prepared.out_shape.end(), lat->shape.begin(), lat->shape.end());
      if (absl::Status s = CheckOutputSize(prepared.out_shape, max_elements); !s.ok()) return s;
      prepared.operands = {*std::move(lat), *std::move(lon)};
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
  absl::StatusOr<OperandSpec> input = ResolveOperand(request.input(), "input", scope);
  if (!input.ok()) return input.status();
  if (absl::Status s = CheckNormalizeShape(input->shape, "input"); !s.ok()) return s;
  if (absl::Status s = NotEmpty(*input); !s.ok()) return s;
  NormKind norm;
  switch (request.norm()) {
    case v1::NORM_SUM: norm = NormKind::kSum; break;
    case v1::NORM_L1: norm = NormKind::kL1; break;
    case v1::NORM_L2: norm = NormKind::kL2; break;
    case v1::NORM_MAX_ABS: norm = NormKind::kMaxAbs; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "norm has unknown value ", static_cast<int>(request.norm()),
          "; use NORM_SUM, NORM_L1, NORM_L2 or NORM_MAX_ABS"));
  }
  PreparedOperation prepared;
  prepared.op = Operation::kNormalize;
  prepared.out_dtype = input->dtype;
  prepared.out_shape = input->shape;
  prepared.operands = {*std::move(input)};
  prepared.run = [norm](Backend& backend, std::span<const std::shared_ptr<Array>> in, Array& out,
                        OpContext& ctx) { return backend.Normalize(*in[0], norm, out, ctx); };
  return prepared;
}

absl::StatusOr<PreparedOperation> PrepareLombScargle(const v1::LombScargleRequest& request,
                                                     const RequestScope& scope) {
  const int64_t max_elements = scope.max_elements;
  absl::StatusOr<OperandSpec> x = ResolveOperand(request.x(), "x", scope);
  if (!x.ok()) return x.status();
  absl::StatusOr<OperandSpec> y = ResolveOperand(request.y(), "y", scope);
  if (!y.ok()) return y.status();
  if (absl::Status s = SameDType(*y, *x); !s.ok()) return s;

  PreparedOperation prepared;
  prepared.op = Operation::kLombScargle;
  prepared.operands = {*x, *y};
  const bool has_weights = request.has_weights();
  if (has_weights) {
    absl::StatusOr<OperandSpec> weights =
        ResolveOperand(request.weights(), "weights", scope);
    if (!weights.ok()) return weights.status();
    if (absl::Status s = SameDType(*y, *weights); !s.ok()) return s;
    prepared.operands.push_back(*std::move(weights));
  }

  Linspace grid;
  bool has_freqs = false;
  int64_t frequencies = 0;
  switch (request.frequencies_case()) {
    case v1::LombScargleRequest::kFreqs: {
      absl::StatusOr<OperandSpec> freqs =
          ResolveOperand(request.freqs(), "freqs", scope);
      if (!freqs.ok()) return freqs.status();
      if (absl::Status s = SameDType(*y, *freqs); !s.ok()) return s;
      if (freqs->shape.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("freqs.shape ", ShapeToString(freqs->shape), " must be (M,)"));
      }
      frequencies = freqs->shape[0];
      prepared.operands.push_back(*std::move(freqs));
      has_freqs = true;
      break;
    }
    case v1::LombScargleRequest::kFreqGrid: {
      const v1::FrequencyGrid& g = request.freq_grid();
      if (absl::Status s = CheckFinite(g.start(), "freq_grid.start"); !s.ok()) return s;
      if (absl::Status s = CheckFinite(g.stop(), "freq_grid.stop"); !s.ok()) return s;
      absl::StatusOr<int64_t> count = CheckCount(g.count(), "freq_grid.count", max_elements);
      if (!count.ok()) return count.status();
      grid = {g.start(), g.stop(), *count};
      frequencies = *count;
      break;
    }
    case v1::LombScargleRequest::FREQUENCIES_NOT_SET:
      return absl::InvalidArgumentError("frequencies are not set; give freqs or freq_grid");
  }

  const Shape* weights_shape = has_weights ? &prepared.operands[2].shape : nullptr;
  absl::StatusOr<LombScargleShape> shapes =
      LombScargleShapes(x->shape, y->shape, weights_shape, frequencies);
  if (!shapes.ok()) return shapes.status();
  prepared.out_dtype = y->dtype;
  prepared.out_shape = shapes->out;
  if (absl::Status s = CheckOutputSize(prepared.out_shape, max_elements); !s.ok()) return s;

  const LombScargleOptions options{request.precenter(), request.normalize(),
                                   request.floating_mean()};
  prepared.run = [has_weights, has_freqs, grid, options](
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
                                               OpContext& ctx, ExecutionTimes& times) {
  int device = kHostDevice;
  bool placed = false;
  for (const OperandSpec& operand : prepared.operands) {
    if (operand.stored != nullptr) {
      device = operand.stored->device();
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

  std::vector<std::shared_ptr<Array>> arrays;
  arrays.reserve(prepared.operands.size());
  for (const OperandSpec& operand : prepared.operands) {
    if (operand.stored != nullptr && operand.stored->device() == device) {
      arrays.push_back(operand.stored);
      continue;
    }
    if (operand.stored != nullptr) {
      // Stored on another GPU: bring a copy to the device the operation runs on.
      absl::StatusOr<std::shared_ptr<Array>> copy =
          backend.Allocate(operand.dtype, operand.shape, device);
      if (!copy.ok()) return copy.status();
      const absl::Time start = absl::Now();
      if (absl::Status s = backend.CopyArray(*operand.stored, **copy); !s.ok()) return s;
      times.transfer_in += absl::Now() - start;
      arrays.push_back(*std::move(copy));
      continue;
    }
    absl::StatusOr<std::shared_ptr<Array>> array =
        backend.Allocate(operand.dtype, operand.shape, device);
    if (!array.ok()) return array.status();
    const absl::Time start = absl::Now();
    const std::string& data = operand.tensor->data();
    if (absl::Status s = backend.CopyToArray(data.data(), 0, data.size(), **array); !s.ok()) {
      return s;
    }
    const absl::Duration elapsed = absl::Now() - start;
    times.transfer_in += elapsed;
    times.bytes_in += data.size();
    metrics.Transferred(Direction::kHostToDevice, data.size(), elapsed);
    arrays.push_back(*std::move(array));
  }
  if (ctx.IsCancelled()) return absl::CancelledError("request cancelled before it ran");

  absl::StatusOr<std::shared_ptr<Array>> out =
      backend.Allocate(prepared.out_dtype, prepared.out_shape, device);
  if (!out.ok()) return out.status();
  if (absl::Status s = prepared.run(backend, arrays, **out, ctx); !s.ok()) return s;
  times.compute = ctx.compute_time;
  return out;
}

}  // namespace gpucompute
