// The request fuzzer's result checks: see result_checks.h.
#include "tests/fuzz/result_checks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "server/prepared_operation.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_common.h"

namespace gpucompute::fuzz {
namespace {

// Values compared per result (evenly spaced, always including the last).
constexpr int64_t kMaxSamples = 4096;

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

}  // namespace

int64_t Product(const Shape& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// ---------------------------------------------------------------------------
// Invariants on Prepare and Execute.

void CheckPrepareError(const absl::Status& s, bool refusable_operand) {
  const bool allowed = absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsResourceExhausted(s) ||
                       (refusable_operand && absl::IsFailedPrecondition(s));
  FUZZ_CHECK(allowed, StatusText(s));
  FUZZ_CHECK(!s.message().empty(), StatusText(s));
}

void CheckPrepared(const PreparedOperation& prepared,
                   const std::vector<std::shared_ptr<Array>>& stored_arrays) {
  absl::StatusOr<int64_t> count = CheckedElementCount(prepared.out_shape, kMaxElements, "out");
  FUZZ_CHECK(count.ok() && *count >= 1,
             absl::StrCat("out_shape ", ShapeToString(prepared.out_shape)));
  FUZZ_CHECK(static_cast<bool>(prepared.run), "prepared.run is empty");
  for (const OperandSpec& operand : prepared.operands) {
    if (operand.stored != nullptr) {
      bool known = false;
      for (size_t k = 0; k < stored_arrays.size(); ++k) {
        if (stored_arrays[k] == operand.stored) {
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

}  // namespace gpucompute::fuzz
