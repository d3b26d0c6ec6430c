// Element types, shapes and their checked arithmetic. Shared by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace gpucompute {

enum class DType { kFloat32, kFloat64 };

using Shape = std::vector<int64_t>;

inline constexpr int kMaxRank = 8;

constexpr size_t ElementSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 8; }
// The DType of a C++ element type (float or double).
template <typename T>
inline constexpr DType kDType = sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;

constexpr absl::string_view DTypeName(DType dtype) {
  return dtype == DType::kFloat32 ? "float32" : "float64";
}

// "(2, 3, 4)"; "()" for a scalar.
std::string ShapeToString(const Shape& shape);

// Product of the extents, rejecting negative extents, rank > kMaxRank and counts
// over `max_elements` (which also guards the byte count against overflow).
// `field` names the request field in the error message.
absl::StatusOr<int64_t> CheckedElementCount(const Shape& shape, int64_t max_elements,
                                            absl::string_view field);

}  // namespace gpucompute
