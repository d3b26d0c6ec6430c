// Checks every backend runs on its arrays before launching work. The server has
// validated the request already; these keep a backend safe on its own (tests,
// benchmarks, future callers) and give both backends the same messages.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/array.h"
#include "kernels/backend.h"
#include "kernels/shape_rules.h"

namespace gpucompute {

absl::Status CheckDType(const Array& array, absl::string_view name, DType expected);
absl::Status CheckShape(const Array& array, absl::string_view name, const Shape& expected);
// Finite and > 0.
absl::Status CheckRadius(double radius);
// A host copy of `bytes` at `offset` stays inside `array` and has a host pointer
// (null only for an empty copy).
absl::Status CheckCopyBounds(const Array& array, size_t offset, size_t bytes, const void* host);

// One row of Lomb-Scargle weights: every weight >= 0 and a finite sum > 0. Returns
// the sum, or INVALID_ARGUMENT naming the row and the first negative weight or the sum
// (WeightsSumError).
template <typename T>
absl::StatusOr<double> CheckWeightsRow(const T* weights, int64_t row, int64_t samples);
absl::Status WeightsSumError(int64_t row, double sum);

// dtypes (all of y's), shapes (LombScargleShapes) and out's shape for a
// periodogram over `freqs` (M,) or, when freqs is null, the `grid`.
absl::StatusOr<LombScargleShape> CheckLombScargleArrays(const Array& x, const Array& y,
                                                        const Array* weights, const Array* freqs,
                                                        const Linspace& grid, const Array& out);

}  // namespace gpucompute
