#include "kernels/preconditions.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gpucompute {

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

absl::Status CheckRadius(double radius) {
  if (!(radius > 0) || !std::isfinite(radius)) {
    return absl::InvalidArgumentError(
        absl::StrCat("radius is ", radius, "; it must be finite and > 0"));
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
                                                        const Linspace& grid, const Array& out) {
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
  }
  GC_ASSIGN_OR_RETURN(
      LombScargleShape shape,
      LombScargleShapes(x.shape(), y.shape(), weights != nullptr ? &weights->shape() : nullptr,
                        frequencies));
  GC_RETURN_IF_ERROR(CheckShape(out, "out", shape.out));
  return shape;
}

}  // namespace gpucompute
