// Checks every backend runs on its arrays before launching work. The server has
// validated the request already; these keep a backend safe on its own (tests,
// benchmarks, future callers) and give both backends, and the server, the same
// messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/array.h"
#include "kernels/backend.h"
#include "kernels/shape_rules.h"

namespace gpucompute {

// Bounds on finite inputs that keep every result finite.
// pi * radius, the longest distance, fits even float32 (3.4e38).
inline constexpr double kMaxRadius = 1e30;
// Longitudes in degrees: far beyond any wrap-around, and the mesh step
// (lon_stop - lon_start) / (n_lon - 1) cannot overflow.
inline constexpr double kMaxAbsLongitude = 1e6;
// Lomb-Scargle sample times and frequencies: the phase f * x stays below 1e300
// and a frequency grid's step cannot overflow.
inline constexpr double kMaxAbsPhaseFactor = 1e150;

// A rule a value must follow, and the words a message states it in. As data
// (not a function) so that a device kernel can check it too.
struct ValueRule {
  double lowest;   // every value lies in [lowest, highest]: NaN and inf never do
  double highest;
  bool nonzero;    // and is not 0
  absl::string_view statement;

  bool holds(double value) const {
    return value >= lowest && value <= highest && !(nonzero && value == 0);
  }
};
extern const ValueRule kLatitudeRule;     // [-90, 90] degrees
extern const ValueRule kLongitudeRule;    // finite, |lon| <= kMaxAbsLongitude
extern const ValueRule kRadiusRule;       // finite, > 0, <= kMaxRadius
extern const ValueRule kSampleTimeRule;   // finite, |x| <= kMaxAbsPhaseFactor
extern const ValueRule kFrequencyRule;    // that, and != 0 (SciPy's ZeroDivisionError)

// INVALID_ARGUMENT "<field> is <value>; <statement>" unless the rule holds.
absl::Status CheckValue(double value, absl::string_view field, const ValueRule& rule);

// The first of `count` elements that breaks the rule, as
// INVALID_ARGUMENT "<name>[i] is <value>; <statement>". For host data only:
// value_at(i) returns element i as a double.
template <typename ValueAt>
absl::Status CheckElements(int64_t count, ValueAt value_at, absl::string_view name,
                           const ValueRule& rule) {
  for (int64_t i = 0; i < count; ++i) {
    const double value = value_at(i);
    if (!rule.holds(value)) return CheckValue(value, absl::StrCat(name, "[", i, "]"), rule);
  }
  return absl::OkStatus();
}

absl::Status CheckDType(const Array& array, absl::string_view name, DType expected);
absl::Status CheckShape(const Array& array, absl::string_view name, const Shape& expected);
// kRadiusRule.
absl::Status CheckRadius(double radius);
// Every reference point: latitude and longitude rules, named "references[i].lat/lon".
absl::Status CheckReferences(std::span<const GeoPoint> refs);
// The mesh's end points, named as the request fields ("mesh.lat_start", ...).
absl::Status CheckMeshBounds(const LatLonMesh& mesh);
// Radius, references, mesh bounds and counts, and out's shape (n_ref, n_lat, n_lon).
absl::Status CheckHaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs,
                                double radius, const Array& out);
// Radius, references, lat/lon dtypes and shapes, and out's shape (n_ref, *lat.shape).
// Not the values of lat and lon, which may lie on a device.
absl::Status CheckHaversinePoints(const Array& lat, const Array& lon,
                                  std::span<const GeoPoint> refs, double radius, const Array& out);
// The grid's end points follow kFrequencyRule and no grid point is exactly 0.
absl::Status CheckFrequencyGrid(const Linspace& grid, absl::string_view name);

// A host copy of `bytes` at `offset` stays inside `array` and has a host pointer
// (null only for an empty copy).
absl::Status CheckCopyBounds(const Array& array, size_t offset, size_t bytes, const void* host);

// One row of Lomb-Scargle weights: every weight >= 0 and a finite sum > 0. Returns
// the sum, or INVALID_ARGUMENT naming the row and the first negative weight or the sum
// (WeightsSumError).
template <typename T>
absl::StatusOr<double> CheckWeightsRow(const T* weights, int64_t row, int64_t samples);
absl::Status WeightsSumError(int64_t row, double sum);

// Normalize's error for the first row it cannot divide: its norm is 0 or not finite, or
// dividing by it overflows `dtype`. Both backends report it in these words.
absl::Status BadRowError(int64_t row, NormKind kind, double norm, DType dtype);

// dtypes (all of y's), shapes (LombScargleShapes with options.row_offsets), out's
// shape (LombScargleOutShape) for a periodogram over `freqs` (M,) or, when freqs is
// null, the `grid` (CheckFrequencyGrid); normalize and amplitude not both.
// Not the values of x and freqs, which may lie on a device.
absl::StatusOr<LombScargleShape> CheckLombScargleArrays(const Array& x, const Array& y,
                                                        const Array* weights, const Array* freqs,
                                                        const Linspace& grid, const Array& out,
                                                        const LombScargleOptions& options);

}  // namespace gpucompute
