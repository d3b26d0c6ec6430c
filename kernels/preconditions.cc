#include "kernels/preconditions.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gpucompute {

// The comparisons are false for NaN, so every rule rejects it; the bounds reject infinities.
const ValueRule kLatitudeRule = {-90, 90, false, "latitude must lie in [-90, 90] degrees"};
const ValueRule kLongitudeRule = {
    -kMaxAbsLongitude, kMaxAbsLongitude, false,
    "longitude must be finite with |lon| <= 1e6 degrees (kMaxAbsLongitude)"};
// > 0: the smallest positive double is the lowest value.
const ValueRule kRadiusRule = {
    std::numeric_limits<double>::denorm_min(), kMaxRadius, false,
    "it must be finite, > 0 and <= 1e30 (kMaxRadius: pi * radius fits float32)"};
const ValueRule kSampleTimeRule = {
    -kMaxAbsPhaseFactor, kMaxAbsPhaseFactor, false,
    "sample times must be finite with |x| <= 1e150 (kMaxAbsPhaseFactor)"};
const ValueRule kFrequencyRule = {
    -kMaxAbsPhaseFactor, kMaxAbsPhaseFactor, true,
    "frequencies must be non-zero (SciPy raises ZeroDivisionError) and finite with "
    "|f| <= 1e150 (kMaxAbsPhaseFactor)"};

absl::Status CheckDType(const Array& array, absl::string_view name, DType expected) {
  if (array.dtype() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has dtype ", DTypeName(array.dtype()),
                                                   "; expected ", DTypeName(expected)));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const Array& array, absl::string_view name, const Shape& expected) {
  if (array.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeToString(array.shape()),
                                                   " must be ", ShapeToString(expected)));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<double> CheckWeightsRow(const T* weights, int64_t row, int64_t samples) {
  double sum = 0;
  for (int64_t n = 0; n < samples; ++n) {
    if (weights[n] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("weights row ", row, " has weight ",
                                                     weights[n], " at index ", n,
                                                     "; weights must be >= 0"));
    }
    sum += weights[n];
  }
  if (!(sum > 0) || !std::isfinite(sum)) return WeightsSumError(row, sum);
  return sum;
}
template absl::StatusOr<double> CheckWeightsRow(const float*, int64_t, int64_t);
template absl::StatusOr<double> CheckWeightsRow(const double*, int64_t, int64_t);

absl::Status WeightsSumError(int64_t row, double sum) {
  return absl::InvalidArgumentError(
      absl::StrCat("weights row ", row, " sums to ", sum, "; weights must have a finite sum > 0"));
}

absl::Status BadRowError(int64_t row, NormKind kind, double norm, DType dtype) {
  const bool usable = norm != 0 && std::isfinite(norm);
  return absl::InvalidArgumentError(absl::StrCat(
      "input row ", row, " has ", NormName(kind), " norm ", norm,
      "; rows must have a finite, non-zero norm",
      usable ? absl::StrCat(" that leaves every element divided by it finite in ", DTypeName(dtype))
             : ""));
}

absl::Status CheckValue(double value, absl::string_view field, const ValueRule& rule) {
  if (rule.holds(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " is ", value, "; ", rule.statement));
}

absl::Status CheckRadius(double radius) { return CheckValue(radius, "radius", kRadiusRule); }

absl::Status CheckReferences(std::span<const GeoPoint> refs) {
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!kLatitudeRule.holds(refs[i].lat)) {
      return CheckValue(refs[i].lat, absl::StrCat("references[", i, "].lat"), kLatitudeRule);
    }
    if (!kLongitudeRule.holds(refs[i].lon)) {
      return CheckValue(refs[i].lon, absl::StrCat("references[", i, "].lon"), kLongitudeRule);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMeshBounds(const LatLonMesh& mesh) {
  GC_RETURN_IF_ERROR(CheckValue(mesh.lat.start, "mesh.lat_start", kLatitudeRule));
  GC_RETURN_IF_ERROR(CheckValue(mesh.lat.stop, "mesh.lat_stop", kLatitudeRule));
  GC_RETURN_IF_ERROR(CheckValue(mesh.lon.start, "mesh.lon_start", kLongitudeRule));
  return CheckValue(mesh.lon.stop, "mesh.lon_stop", kLongitudeRule);
}

absl::Status CheckHaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs,
                                double radius, const Array& out) {
  GC_RETURN_IF_ERROR(CheckRadius(radius));
  GC_RETURN_IF_ERROR(CheckReferences(refs));
  GC_RETURN_IF_ERROR(CheckMeshBounds(mesh));
  if (mesh.lat.count < 0 || mesh.lon.count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("mesh has ", mesh.lat.count, " latitudes and ",
                                                   mesh.lon.count,
                                                   " longitudes; counts must be >= 0"));
  }
  return CheckShape(out, "out", {static_cast<int64_t>(refs.size()), mesh.lat.count, mesh.lon.count});
}

absl::Status CheckHaversinePoints(const Array& lat, const Array& lon,
                                  std::span<const GeoPoint> refs, double radius, const Array& out) {
  GC_RETURN_IF_ERROR(CheckRadius(radius));
  GC_RETURN_IF_ERROR(CheckReferences(refs));
  GC_RETURN_IF_ERROR(CheckDType(lat, "lat", out.dtype()));
  GC_RETURN_IF_ERROR(CheckDType(lon, "lon", out.dtype()));
  GC_RETURN_IF_ERROR(CheckShape(lon, "lon", lat.shape()));
  Shape expected = {static_cast<int64_t>(refs.size())};
  expected.insert(expected.end(), lat.shape().begin(), lat.shape().end());
  return CheckShape(out, "out", expected);
}

absl::Status CheckFrequencyGrid(const Linspace& grid, absl::string_view name) {
  GC_RETURN_IF_ERROR(CheckValue(grid.start, absl::StrCat(name, ".start"), kFrequencyRule));
  GC_RETURN_IF_ERROR(CheckValue(grid.stop, absl::StrCat(name, ".stop"), kFrequencyRule));
  if ((grid.start < 0) == (grid.stop < 0) || grid.count < 3) return absl::OkStatus();
  // The grid crosses zero: only the points next to the crossing can round to it.
  const double step = (grid.stop - grid.start) / static_cast<double>(grid.count - 1);
  const int64_t crossing = static_cast<int64_t>(-grid.start / step);
  for (int64_t i = std::max<int64_t>(crossing - 1, 0);
       i <= std::min(crossing + 1, grid.count - 1); ++i) {
    GC_RETURN_IF_ERROR(
        CheckValue(grid.At(i), absl::StrCat(name, " point ", i), kFrequencyRule));
  }
  return absl::OkStatus();
}

absl::Status CheckCopyBounds(const Array& array, size_t offset, size_t bytes, const void* host) {
  if (offset > array.bytes() || bytes > array.bytes() - offset) {
    return absl::OutOfRangeError(absl::StrCat("copy of ", bytes, " bytes at offset ", offset,
                                              " runs past the array's ", array.bytes(), " bytes"));
  }
  if (host == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy of ", bytes, " bytes has a null host pointer"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LombScargleShape> CheckLombScargleArrays(const Array& x, const Array& y,
                                                        const Array* weights, const Array* freqs,
                                                        const Linspace& grid, const Array& out,
                                                        const LombScargleOptions& options) {
  if (options.normalize && options.amplitude) {
    return absl::InvalidArgumentError(
        "normalize and amplitude exclude each other (SciPy's normalize is one of \"power\", "
        "\"normalize\" and \"amplitude\")");
  }
  const DType dtype = y.dtype();
  GC_RETURN_IF_ERROR(CheckDType(x, "x", dtype));
  GC_RETURN_IF_ERROR(CheckDType(out, "out", dtype));
  if (weights != nullptr) {
    GC_RETURN_IF_ERROR(CheckDType(*weights, "weights", dtype));
  }
  int64_t frequencies = grid.count;
  if (freqs != nullptr) {
    GC_RETURN_IF_ERROR(CheckDType(*freqs, "freqs", dtype));
    if (freqs->shape().size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("freqs.shape ", ShapeToString(freqs->shape()), " must be (M,)"));
    }
    frequencies = freqs->size();
  } else {
    GC_RETURN_IF_ERROR(CheckFrequencyGrid(grid, "grid"));
  }
  GC_ASSIGN_OR_RETURN(
      LombScargleShape shape,
      LombScargleShapes(x.shape(), y.shape(), weights != nullptr ? &weights->shape() : nullptr,
                        frequencies, options.row_offsets));
  GC_RETURN_IF_ERROR(CheckShape(out, "out", LombScargleOutShape(shape, options.amplitude)));
  return shape;
}

}  // namespace gpucompute
