// libFuzzer target over request validation (operations.cc Prepare*) and the CPU
// execution path (Execute on CreateCpuBackend(1)), plus a model of the
// Buffers.Upload framing over the real BufferStore and backend calls.
// Input format: tests/fuzz/fuzz_common.h. Build and run: scripts/fuzz.sh.
//
// Invariants checked (a violation aborts, which libFuzzer reports as a crash):
// - Prepare* fails only with INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED
//   and a message; on success the output has 1..max_elements elements, every
//   inline operand's data matches its shape, and no operand is another
//   principal's buffer.
// - Execute of a prepared request fails only with RESOURCE_EXHAUSTED or the
//   data-dependent INVALID_ARGUMENTs ("input row ...", "weights row ..."); on
//   success the result is a host array with exactly the prepared dtype/shape.
// - Values: DiscountProduct equals an independent broadcast multiply (bitwise);
//   HaversineGrid equals 2 R atan2(sqrt(h), sqrt(1 - h)) within a tolerance;
//   Normalize equals x / norm per row, and fails exactly on the first row whose
//   norm is 0 or not finite (rows whose norm is ill-conditioned are skipped).
// - Upload: the reactor's checks in order; committed buffers read back what was
//   sent; quota accounting returns to 0 once everything is deleted.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/wire_format_lite.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "server/buffer_store.h"
#include "server/metrics.h"
#include "server/operations.h"
#include "server/proto_convert.h"
#include "tests/fuzz/fuzz_common.h"

namespace gpucompute::fuzz {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 20;
constexpr uint64_t kQuotaBytes = uint64_t{64} << 20;
// Upload streams run in a fresh, small store so quotas are reachable.
constexpr uint64_t kUploadQuotaBytes = uint64_t{1} << 20;
constexpr uint64_t kUploadPrincipalQuotaBytes = uint64_t{512} << 10;
// Lomb-Scargle costs B * N * M; past this the harness validates but does not run it.
constexpr int64_t kMaxLombScargleWork = int64_t{1} << 22;
// Values compared per result (evenly spaced, always including the last).
constexpr int64_t kMaxSamples = 4096;

[[noreturn]] void Fail(absl::string_view what, absl::string_view detail) {
  std::fprintf(stderr, "\n*** gpucompute fuzz invariant violated: %.*s\n    %.*s\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(detail.size()),
               detail.data());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, detail) \
  do {                           \
    if (!(cond)) Fail(#cond, (detail)); \
  } while (0)

std::string StatusText(const absl::Status& s) { return s.ToString(); }

// ---------------------------------------------------------------------------
// The process-wide environment: store with the "$k" buffers, metrics, backend.

struct Env {
  Env()
      : store(kQuotaBytes),
        device_queues(1),  // one operation at a time: each must release its slot
        metrics(BuildInfo{"fuzz", "fuzz", "none", "cpu"}),
        backend(CreateCpuBackend(1)) {
    const std::vector<StoredBufferSpec>& specs = StoredBuffers();
    for (size_t k = 0; k < specs.size(); ++k) {
      const StoredBufferSpec& spec = specs[k];
      absl::StatusOr<std::shared_ptr<Array>> array =
          backend->Allocate(spec.dtype, spec.shape, backend->PickDevice());
      FUZZ_CHECK(array.ok(), StatusText(array.status()));
      for (int64_t i = 0; i < (*array)->size(); ++i) {
        const double v = 0.5 * static_cast<double>(i + 1);
        if (spec.dtype == DType::kFloat32) {
          (*array)->data_as<float>()[i] = static_cast<float>(v);
        } else {
          (*array)->data_as<double>()[i] = v;
        }
      }
      absl::StatusOr<BufferStore::Reservation> reservation =
          store.Reserve((*array)->bytes(), "fuzz seed buffer", spec.owner);
      FUZZ_CHECK(reservation.ok(), StatusText(reservation.status()));
      absl::StatusOr<StoredBuffer> stored =
          store.Commit(*std::move(reservation), absl::StrCat("$", k), *array);
      FUZZ_CHECK(stored.ok(), StatusText(stored.status()));
      ids.push_back(stored->id);
      arrays.push_back(*array);
    }
  }

  BufferStore store;
  DeviceQueues device_queues;
  Metrics metrics;
  std::unique_ptr<Backend> backend;
  std::vector<std::string> ids;
  std::vector<std::shared_ptr<Array>> arrays;
};

Env& GetEnv() {
  static Env* env = new Env;
  return *env;
}

RequestScope Scope(const Env& env) {
  return RequestScope{env.store, kPrincipal, kMaxElements};
}

// "$k" -> the id of stored buffer k.
void Rewrite(v1::Operand* operand, const Env& env) {
  if (operand->source_case() != v1::Operand::kBufferId) return;
  const std::string& id = operand->buffer_id();
  if (id.size() == 2 && id[0] == '$' && id[1] >= '0' && id[1] <= '9') {
    const size_t k = static_cast<size_t>(id[1] - '0');
    if (k < env.ids.size()) operand->set_buffer_id(env.ids[k]);
  }
}

// ---------------------------------------------------------------------------
// Reading operands and results as doubles.

struct View {
  DType dtype = DType::kFloat64;
  const unsigned char* data = nullptr;
  int64_t size = 0;

  double operator[](int64_t i) const {
    if (dtype == DType::kFloat32) {
      float v;
      std::memcpy(&v, data + i * 4, 4);  // inline tensor bytes may be unaligned
      return v;
    }
    double v;
    std::memcpy(&v, data + i * 8, 8);
    return v;
  }
};

View ViewOf(const Array& array) {
  return View{array.dtype(), static_cast<const unsigned char*>(array.data()), array.size()};
}

View ViewOf(const OperandSpec& operand) {
  if (operand.stored != nullptr) return ViewOf(*operand.stored);
  const std::string& data = operand.tensor->data();
  return View{operand.dtype, reinterpret_cast<const unsigned char*>(data.data()),
              static_cast<int64_t>(data.size() / ElementSize(operand.dtype))};
}

int64_t Product(const Shape& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// Evenly spaced sample indices in [0, n), the last one included.
std::vector<int64_t> Samples(int64_t n) {
  std::vector<int64_t> out;
  if (n <= kMaxSamples) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  const int64_t step = n / kMaxSamples;
  for (int64_t i = 0; i < n; i += step) out.push_back(i);
  if (out.back() != n - 1) out.push_back(n - 1);
  return out;
}

bool SameValue(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return a == b;
}

bool Close(double got, double want, double tolerance) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tolerance;
}

// ---------------------------------------------------------------------------
// Invariants on Prepare and Execute.

void CheckPrepareError(const absl::Status& s) {
  const bool allowed = absl::IsInvalidArgument(s) || absl::IsNotFound(s) ||
                       absl::IsResourceExhausted(s);
  FUZZ_CHECK(allowed, StatusText(s));
  FUZZ_CHECK(!s.message().empty(), StatusText(s));
}

void CheckPrepared(const PreparedOperation& prepared, const Env& env) {
  absl::StatusOr<int64_t> count = CheckedElementCount(prepared.out_shape, kMaxElements, "out");
  FUZZ_CHECK(count.ok() && *count >= 1,
             absl::StrCat("out_shape ", ShapeToString(prepared.out_shape)));
  FUZZ_CHECK(static_cast<bool>(prepared.run), "prepared.run is empty");
  for (const OperandSpec& operand : prepared.operands) {
    if (operand.stored != nullptr) {
      bool known = false;
      for (size_t k = 0; k < env.arrays.size(); ++k) {
        if (env.arrays[k] == operand.stored) {
          FUZZ_CHECK(static_cast<int>(k) != kForeignBuffer,
                     absl::StrCat(operand.field, " resolved another principal's buffer"));
          known = true;
        }
      }
      FUZZ_CHECK(known, absl::StrCat(operand.field, " resolved an unknown array"));
      FUZZ_CHECK(operand.shape == operand.stored->shape() &&
                     operand.dtype == operand.stored->dtype(),
                 operand.field);
      continue;
    }
    FUZZ_CHECK(operand.tensor != nullptr, absl::StrCat(operand.field, " has no source"));
    absl::StatusOr<int64_t> n = CheckedElementCount(operand.shape, kMaxElements, operand.field);
    FUZZ_CHECK(n.ok(), StatusText(n.status()));
    FUZZ_CHECK(operand.tensor->data().size() ==
                   static_cast<uint64_t>(*n) * ElementSize(operand.dtype),
               absl::StrCat(operand.field, ".data size"));
  }
}

// Data-dependent failures a validated request may still hit at execution.
bool ExpectedExecuteError(const absl::Status& s, Operation op) {
  if (absl::IsResourceExhausted(s)) return true;
  if (!absl::IsInvalidArgument(s)) return false;
  if (op == Operation::kNormalize) return absl::StartsWith(s.message(), "input row ");
  if (op == Operation::kLombScargle) return absl::StartsWith(s.message(), "weights row ");
  return false;
}

// ---------------------------------------------------------------------------
// Value oracles.

void CheckDiscountProduct(const PreparedOperation& prepared, const Array& out) {
  const OperandSpec& a = prepared.operands[0];
  const OperandSpec& b = prepared.operands[1];
  const View va = ViewOf(a);
  const View vb = ViewOf(b);
  const View vo = ViewOf(out);
  const Shape& shape = prepared.out_shape;
  const size_t rank = shape.size();
  for (int64_t flat : Samples(vo.size)) {
    // Multi-index of `flat`, then the right-aligned index into each operand.
    int64_t rest = flat;
    int64_t ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t i = 0; i < rank; ++i) {
      const size_t axis = rank - 1 - i;
      const int64_t idx = rest % shape[axis];
      rest /= shape[axis];
      if (i < a.shape.size()) {
        const int64_t ext = a.shape[a.shape.size() - 1 - i];
        ia += (ext == 1 ? 0 : idx) * sa;
        sa *= ext;
      }
      if (i < b.shape.size()) {
        const int64_t ext = b.shape[b.shape.size() - 1 - i];
        ib += (ext == 1 ? 0 : idx) * sb;
        sb *= ext;
      }
    }
    double want;
    if (out.dtype() == DType::kFloat32) {
      want = static_cast<float>(va[ia]) * static_cast<float>(vb[ib]);
    } else {
      want = va[ia] * vb[ib];
    }
    FUZZ_CHECK(SameValue(vo[flat], want),
               absl::StrCat("DiscountProduct out[", flat, "] = ", vo[flat], ", want ", want,
                            " (factors[", ia, "] = ", va[ia], ", values[", ib, "] = ", vb[ib],
                            ", out shape ", ShapeToString(shape), ")"));
  }
}

// The spec's formula, in float64.
double HaversineRef(double lat, double lon, double ref_lat, double ref_lon, double radius) {
  constexpr double kRad = std::numbers::pi / 180.0;
  const double sd = std::sin(0.5 * (lat - ref_lat) * kRad);
  const double sl = std::sin(0.5 * (lon - ref_lon) * kRad);
  double h = sd * sd + std::cos(ref_lat * kRad) * std::cos(lat * kRad) * sl * sl;
  if (h < 0) h = 0;
  if (h > 1) h = 1;
  return 2 * radius * std::atan2(std::sqrt(h), std::sqrt(1 - h));
}

void CheckHaversine(const v1::HaversineGridRequest& request, const PreparedOperation& prepared,
                    const Array& out) {
  const double radius = request.radius() == 0 ? kDefaultEarthRadiusKm : request.radius();
  const View vo = ViewOf(out);
  const bool f32 = out.dtype() == DType::kFloat32;
  // asin(sqrt(h)) vs atan2 near h = 1 loses ~sqrt(eps) relative; float32 rounding.
  const double tolerance = radius * (f32 ? 2e-6 : 1e-7);
  const int64_t n_ref = request.references_size();
  const int64_t per_ref = vo.size / n_ref;
  for (int64_t flat : Samples(vo.size)) {
    const int64_t r = flat / per_ref;
    const int64_t p = flat % per_ref;
    const v1::GeoPoint& ref = request.references(static_cast<int>(r));
    double lat, lon;
    if (request.has_mesh()) {
      const v1::LatLonMesh& m = request.mesh();
      const Linspace lats{m.lat_start(), m.lat_stop(), static_cast<int64_t>(m.n_lat())};
      const Linspace lons{m.lon_start(), m.lon_stop(), static_cast<int64_t>(m.n_lon())};
      lat = lats.At(p / lons.count);
      lon = lons.At(p % lons.count);
    } else {
      lat = ViewOf(prepared.operands[0])[p];
      lon = ViewOf(prepared.operands[1])[p];
    }
    double want = HaversineRef(lat, lon, ref.lat(), ref.lon(), radius);
    if (f32) want = static_cast<float>(want);
    FUZZ_CHECK(Close(vo[flat], want, tolerance),
               absl::StrCat("HaversineGrid out[", flat, "] = ", vo[flat], ", want ", want,
                            " (point ", lat, ", ", lon, "; reference ", ref.lat(), ", ",
                            ref.lon(), "; radius ", radius, ")"));
  }
}

void CheckNormalize(const v1::NormalizeRequest& request, const PreparedOperation& prepared,
                    const absl::StatusOr<std::shared_ptr<Array>>& result) {
  const OperandSpec& input = prepared.operands[0];
  const View vi = ViewOf(input);
  const int64_t length = input.shape.back();
  const int64_t rows = vi.size / length;
  const bool f32 = input.dtype == DType::kFloat32;

  int64_t failed_row = -1;
  if (!result.ok()) {
    absl::string_view rest = result.status().message();
    rest.remove_prefix(std::strlen("input row "));
    const size_t space = rest.find(' ');
    FUZZ_CHECK(space != absl::string_view::npos &&
                   absl::SimpleAtoi(rest.substr(0, space), &failed_row) && failed_row >= 0 &&
                   failed_row < rows,
               StatusText(result.status()));
  }
  const int64_t checked_rows = result.ok() ? rows : failed_row + 1;
  // Rows are checked in full, so cap the work.
  int64_t budget = kMaxSamples * 16;
  for (int64_t row = 0; row < checked_rows && budget > 0; ++row, budget -= length) {
    double sum = 0, l1 = 0, l2 = 0, max_abs = 0;
    bool has_pos = false, has_neg = false, has_nan = false;
    for (int64_t i = 0; i < length; ++i) {
      const double v = vi[row * length + i];
      sum += v;
      l1 += std::fabs(v);
      l2 += v * v;
      if (std::isnan(v)) has_nan = true;
      max_abs = std::fmax(max_abs, std::fabs(v));
      has_pos |= v > 0;
      has_neg |= v < 0;
    }
    double norm = 0;
    bool reliable = true;  // this oracle's norm matches any summation order
    switch (request.norm()) {
      case v1::NORM_SUM:
        norm = sum;
        // Cancellation makes the sum depend on the order; so does overflow near the limit.
        reliable = !(has_pos && has_neg) && (has_nan || !std::isinf(sum) || std::isinf(max_abs));
        break;
      case v1::NORM_L1:
        norm = l1;
        reliable = has_nan || !std::isinf(l1) || std::isinf(max_abs);
        break;
      case v1::NORM_L2:
        norm = has_nan ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(l2);
        // Squares that underflow or overflow make the norm depend on how it is summed.
        reliable = has_nan || max_abs == 0 || (l2 > 1e-290 && l2 < 1e290);
        break;
      case v1::NORM_MAX_ABS:
        norm = has_nan ? std::numeric_limits<double>::quiet_NaN() : max_abs;
        break;
      default:
        break;
    }
    const bool usable = norm != 0 && std::isfinite(norm);
    if (!reliable) continue;
    if (row == failed_row) {
      FUZZ_CHECK(!usable, absl::StrCat("Normalize rejected row ", row, " whose norm is ", norm,
                                       ": ", StatusText(result.status())));
      continue;
    }
    FUZZ_CHECK(usable, absl::StrCat("Normalize accepted row ", row, " whose norm is ", norm,
                                    " (norm ", static_cast<int>(request.norm()), ")"));
    if (!result.ok()) continue;
    const View vo = ViewOf(**result);
    for (int64_t i = 0; i < length; ++i) {
      const double x = vi[row * length + i];
      double want = x / norm;
      if (f32) want = static_cast<float>(want);
      // Relative, plus one float32 denormal step (float64 denormals are below 1e-300).
      const double tolerance = std::fabs(want) * (f32 ? 1e-6 : 1e-9) + (f32 ? 1e-44 : 1e-300);
      FUZZ_CHECK(Close(vo[row * length + i], want, tolerance),
                 absl::StrCat("Normalize out[", row, ", ", i, "] = ", vo[row * length + i],
                              ", want ", want, " (x ", x, ", norm ", norm, ", kind ",
                              static_cast<int>(request.norm()), ")"));
    }
  }
}

// ---------------------------------------------------------------------------
// One compute request.

void Rewrite(v1::DiscountProductRequest& r, const Env& env) {
  if (r.has_factors()) Rewrite(r.mutable_factors(), env);
  if (r.has_values()) Rewrite(r.mutable_values(), env);
}
void Rewrite(v1::HaversineGridRequest& r, const Env& env) {
  if (!r.has_points()) return;
  if (r.points().has_lat()) Rewrite(r.mutable_points()->mutable_lat(), env);
  if (r.points().has_lon()) Rewrite(r.mutable_points()->mutable_lon(), env);
}
void Rewrite(v1::NormalizeRequest& r, const Env& env) {
  if (r.has_input()) Rewrite(r.mutable_input(), env);
}
void Rewrite(v1::LombScargleRequest& r, const Env& env) {
  if (r.has_x()) Rewrite(r.mutable_x(), env);
  if (r.has_y()) Rewrite(r.mutable_y(), env);
  if (r.has_freqs()) Rewrite(r.mutable_freqs(), env);
  if (r.has_weights()) Rewrite(r.mutable_weights(), env);
}

template <typename Request, typename PrepareFn, typename CheckFn>
void FuzzCompute(const uint8_t* data, size_t size, Operation op, PrepareFn prepare, CheckFn check,
                 bool (*worth_running)(const Request&, const PreparedOperation&)) {
  Env& env = GetEnv();
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  Rewrite(request, env);
  absl::StatusOr<PreparedOperation> prepared = prepare(request, Scope(env));
  if (!prepared.ok()) {
    CheckPrepareError(prepared.status());
    return;
  }
  CheckPrepared(*prepared, env);
  if (worth_running != nullptr && !worth_running(request, *prepared)) return;

  OpContext ctx;
  ExecutionTimes times;
  absl::StatusOr<std::shared_ptr<Array>> out =
      Execute(*prepared, *env.backend, env.device_queues, env.metrics, ctx, times);
  FUZZ_CHECK(env.device_queues.depth(kHostDevice) == 0, "Execute kept its device queue slot");
  if (!out.ok()) {
    FUZZ_CHECK(ExpectedExecuteError(out.status(), op), StatusText(out.status()));
  } else {
    const Array& array = **out;
    FUZZ_CHECK(array.dtype() == prepared->out_dtype,
               absl::StrCat("result dtype ", DTypeName(array.dtype()), ", prepared ",
                            DTypeName(prepared->out_dtype)));
    FUZZ_CHECK(array.shape() == prepared->out_shape,
               absl::StrCat("result shape ", ShapeToString(array.shape()), ", prepared ",
                            ShapeToString(prepared->out_shape)));
    FUZZ_CHECK(array.size() == Product(prepared->out_shape) && array.device() == kHostDevice &&
                   array.bytes() == static_cast<size_t>(array.size()) * ElementSize(array.dtype()),
               "result size/device");
    FUZZ_CHECK(times.device == "cpu", times.device);
  }
  check(request, *prepared, out);
}

bool LombScargleWorthRunning(const v1::LombScargleRequest& request,
                             const PreparedOperation& prepared) {
  const int64_t samples = prepared.operands[1].shape.back();
  const int64_t outputs = Product(prepared.out_shape);  // B * M
  (void)request;
  return outputs <= kMaxLombScargleWork / samples;
}

void CheckLombScargle(const v1::LombScargleRequest& request, const PreparedOperation& prepared,
                      const absl::StatusOr<std::shared_ptr<Array>>& result) {
  if (!request.has_weights()) {
    FUZZ_CHECK(result.ok() || absl::IsResourceExhausted(result.status()),
               StatusText(result.status()));
    return;
  }
  // Weight rows must be >= 0 with a finite sum > 0; the error names the first bad row.
  const OperandSpec& weights = prepared.operands[2];
  const View vw = ViewOf(weights);
  const int64_t samples = weights.shape.back();
  const int64_t rows = vw.size / samples;
  int64_t first_bad = -1;
  for (int64_t row = 0; row < rows && first_bad < 0; ++row) {
    double sum = 0;
    bool negative = false;
    for (int64_t n = 0; n < samples; ++n) {
      const double w = vw[row * samples + n];
      negative |= w < 0;
      sum += w;
    }
    if (negative || !(sum > 0) || !std::isfinite(sum)) first_bad = row;
  }
  if (result.ok()) {
    FUZZ_CHECK(first_bad < 0, absl::StrCat("LombScargle accepted bad weights row ", first_bad));
  } else if (absl::IsInvalidArgument(result.status())) {
    FUZZ_CHECK(absl::StartsWith(result.status().message(),
                                absl::StrCat("weights row ", first_bad, " ")),
               absl::StrCat(StatusText(result.status()), " (oracle: first bad row ", first_bad,
                            ")"));
  }
}

// ---------------------------------------------------------------------------
// Buffers.Upload framing, as buffers_service.cc's UploadReactor applies it.

struct Committed {
  StoredBuffer buffer;
  std::string bytes;  // what the stream sent
  DType dtype;
  Shape shape;
};

struct UploadStream {
  std::string principal;
  std::optional<BufferStore::Reservation> reservation;
  std::shared_ptr<Array> array;
  uint64_t expected = 0;
  uint64_t received = 0;
  int messages = 0;
  std::string name;
  std::string sent;
  DType dtype = DType::kFloat64;
  Shape shape;
  bool done = false;  // completed with an error; later messages are ignored
};

void UploadFail(UploadStream& s, const absl::Status& status) {
  FUZZ_CHECK(!status.ok(), "UploadFail with OK");
  FUZZ_CHECK(absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status),
             StatusText(status));
  s.done = true;
  s.reservation.reset();
  s.array.reset();
}

void UploadMessage(UploadStream& s, const v1::UploadRequest& request, Env& env,
                   BufferStore& store) {
  if (s.done) return;
  switch (request.kind_case()) {
    case v1::UploadRequest::kHeader: {
      ++s.messages;
      if (s.array != nullptr || s.reservation.has_value()) {
        return UploadFail(s, absl::InvalidArgumentError("second header"));
      }
      const v1::UploadHeader& header = request.header();
      absl::StatusOr<DType> dtype = DTypeFromProto(header.dtype(), "header.dtype");
      if (!dtype.ok()) return UploadFail(s, dtype.status());
      Shape shape(header.shape().begin(), header.shape().end());
      absl::StatusOr<int64_t> count = CheckedElementCount(shape, kMaxElements, "header");
      if (!count.ok()) return UploadFail(s, count.status());
      if (*count == 0) return UploadFail(s, absl::InvalidArgumentError("empty"));
      if (header.name().size() > kMaxBufferNameBytes) {
        return UploadFail(s, absl::InvalidArgumentError("name too long"));
      }
      s.expected = static_cast<uint64_t>(*count) * ElementSize(*dtype);
      absl::StatusOr<BufferStore::Reservation> reservation =
          store.Reserve(s.expected, absl::StrCat("upload '", header.name(), "'"), s.principal);
      if (!reservation.ok()) {
        FUZZ_CHECK(absl::IsResourceExhausted(reservation.status()),
                   StatusText(reservation.status()));
        return UploadFail(s, reservation.status());
      }
      s.reservation = *std::move(reservation);
      s.name = header.name();
      s.dtype = *dtype;
      s.shape = shape;
      absl::StatusOr<std::shared_ptr<Array>> array =
          env.backend->Allocate(*dtype, std::move(shape), env.backend->PickDevice());
      FUZZ_CHECK(array.ok(), StatusText(array.status()));  // <= quota bytes: must fit
      FUZZ_CHECK((*array)->bytes() == s.expected, "allocated bytes");
      s.array = *std::move(array);
      return;
    }
    case v1::UploadRequest::kData: {
      ++s.messages;
      if (s.array == nullptr) return UploadFail(s, absl::InvalidArgumentError("data first"));
      const std::string& data = request.data();
      const uint64_t n = data.size();
      if (n > s.expected - s.received) {
        return UploadFail(s, absl::InvalidArgumentError("exceeds declared size"));
      }
      absl::Status copied = env.backend->CopyToArray(data.data(), s.received, n, *s.array);
      FUZZ_CHECK(copied.ok(), StatusText(copied));
      s.received += n;
      s.sent += data;
      return;
    }
    case v1::UploadRequest::KIND_NOT_SET:
      break;
  }
  UploadFail(s, absl::InvalidArgumentError("neither header nor data"));
}

void UploadEnd(UploadStream& s, BufferStore& store, std::vector<Committed>& committed) {
  if (s.done) return;
  if (s.array == nullptr) return UploadFail(s, absl::InvalidArgumentError("no header"));
  if (s.received != s.expected) return UploadFail(s, absl::InvalidArgumentError("short"));
  absl::StatusOr<StoredBuffer> stored =
      store.Commit(*std::move(s.reservation), s.name, std::move(s.array));
  s.reservation.reset();
  FUZZ_CHECK(stored.ok(), StatusText(stored.status()));
  FUZZ_CHECK(stored->owner == s.principal && stored->id.size() == 32, stored->id);
  committed.push_back(Committed{*stored, std::move(s.sent), s.dtype, s.shape});
}

const char* UploadPrincipal(int stream) { return stream % 2 == 0 ? "alice" : "bob"; }

void FuzzUpload(const uint8_t* data, size_t size) {
  Env& env = GetEnv();
  BufferStore store(kUploadQuotaBytes, kUploadPrincipalQuotaBytes);
  std::vector<Committed> committed;
  {
    int stream_index = 0;
    UploadStream stream;
    stream.principal = UploadPrincipal(stream_index);
    google::protobuf::io::CodedInputStream input(data, static_cast<int>(size));
    int messages = 0;
    while (messages < 64) {
      const uint32_t tag = input.ReadTag();
      if (tag == 0) break;
      if (tag == 0x0a) {  // field 1, length-delimited: one UploadRequest
        uint32_t length;
        if (!input.ReadVarint32(&length)) break;
        std::string bytes;
        if (!input.ReadString(&bytes, static_cast<int>(length))) break;
        v1::UploadRequest request;
        // A message that does not parse fails the call in gRPC before the reactor sees it.
        if (!request.ParseFromString(bytes)) break;
        UploadMessage(stream, request, env, store);
        ++messages;
        continue;
      }
      // Anything else: end of this stream, next one.
      if (!google::protobuf::internal::WireFormatLite::SkipField(&input, tag)) break;
      UploadEnd(stream, store, committed);
      stream = UploadStream{};
      stream.principal = UploadPrincipal(++stream_index);
    }
    UploadEnd(stream, store, committed);
  }
  // Every reservation is gone: exactly the committed bytes are in use.
  uint64_t total = 0, alice = 0;
  for (const Committed& c : committed) {
    total += c.buffer.array->bytes();
    if (c.buffer.owner == "alice") alice += c.buffer.array->bytes();
  }
  FUZZ_CHECK(store.used_bytes() == total,
             absl::StrCat("used ", store.used_bytes(), ", committed ", total));
  FUZZ_CHECK(store.used_bytes("alice") == alice, "alice's bytes");
  FUZZ_CHECK(store.count() == committed.size(), "buffer count");
  FUZZ_CHECK(store.used_bytes("alice") <= kUploadPrincipalQuotaBytes &&
                 store.used_bytes("bob") <= kUploadPrincipalQuotaBytes,
             "principal quota exceeded");
  for (const Committed& c : committed) {
    const std::string& owner = c.buffer.owner;
    const std::string other = owner == "alice" ? "bob" : "alice";
    absl::StatusOr<StoredBuffer> got = store.Get(c.buffer.id, "buffer_id", owner);
    FUZZ_CHECK(got.ok(), StatusText(got.status()));
    FUZZ_CHECK(got->array->dtype() == c.dtype && got->array->shape() == c.shape,
               "stored dtype/shape");
    std::string back(got->array->bytes(), '\0');
    absl::Status copied = env.backend->CopyFromArray(*got->array, 0, back.size(), back.data());
    FUZZ_CHECK(copied.ok(), StatusText(copied));
    FUZZ_CHECK(back == c.bytes, "downloaded bytes differ from the uploaded ones");
    FUZZ_CHECK(absl::IsNotFound(store.Get(c.buffer.id, "buffer_id", other).status()),
               "another principal can read the buffer");
    v1::BufferInfo info;
    ToBufferInfo(*got, &info);
    FUZZ_CHECK(info.id() == c.buffer.id && info.bytes() == c.bytes.size() &&
                   info.shape_size() == static_cast<int>(c.shape.size()) &&
                   info.location() == "cpu",
               info.ShortDebugString());
    FUZZ_CHECK(absl::IsNotFound(store.Delete(c.buffer.id, other).status()),
               "another principal can delete the buffer");
  }
  FUZZ_CHECK(store.List("alice").size() + store.List("bob").size() == committed.size(), "List");
  for (const Committed& c : committed) {
    absl::StatusOr<uint64_t> freed = store.Delete(c.buffer.id, c.buffer.owner);
    FUZZ_CHECK(freed.ok() && *freed == c.bytes.size(), "Delete");
  }
  FUZZ_CHECK(store.used_bytes() == 0 && store.count() == 0, "store not empty after deletes");
}

}  // namespace
}  // namespace gpucompute::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in string fields etc. would be logged for every input.
  google::protobuf::SetLogHandler(nullptr);
  gpucompute::fuzz::GetEnv();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpucompute;
  using namespace gpucompute::fuzz;
  if (size < 1 || size > (1u << 22)) return 0;
  const uint8_t* payload = data + 1;
  const size_t payload_size = size - 1;
  switch (data[0] % kTargetCount) {
    case kDiscountProduct:
      FuzzCompute<v1::DiscountProductRequest>(
          payload, payload_size, Operation::kDiscountProduct, PrepareDiscountProduct,
          [](const v1::DiscountProductRequest&, const PreparedOperation& prepared,
             const absl::StatusOr<std::shared_ptr<Array>>& out) {
            if (out.ok()) CheckDiscountProduct(prepared, **out);
          },
          nullptr);
      break;
    case kHaversineGrid:
      FuzzCompute<v1::HaversineGridRequest>(
          payload, payload_size, Operation::kHaversineGrid, PrepareHaversineGrid,
          [](const v1::HaversineGridRequest& request, const PreparedOperation& prepared,
             const absl::StatusOr<std::shared_ptr<Array>>& out) {
            if (out.ok()) CheckHaversine(request, prepared, **out);
          },
          nullptr);
      break;
    case kNormalize:
      FuzzCompute<v1::NormalizeRequest>(
          payload, payload_size, Operation::kNormalize, PrepareNormalize,
          [](const v1::NormalizeRequest& request, const PreparedOperation& prepared,
             const absl::StatusOr<std::shared_ptr<Array>>& out) {
            if (out.ok() || absl::IsInvalidArgument(out.status())) {
              CheckNormalize(request, prepared, out);
            }
          },
          nullptr);
      break;
    case kLombScargle:
      FuzzCompute<v1::LombScargleRequest>(payload, payload_size, Operation::kLombScargle,
                                          PrepareLombScargle, CheckLombScargle,
                                          LombScargleWorthRunning);
      break;
    case kUpload:
      FuzzUpload(payload, payload_size);
      break;
  }
  return 0;
}
