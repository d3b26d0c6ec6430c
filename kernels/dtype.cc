#include "kernels/dtype.h"

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpucompute {

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

absl::StatusOr<int64_t> CheckedElementCount(const Shape& shape, int64_t max_elements,
                                            absl::string_view field) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".shape has rank ", shape.size(),
                                                   "; the limit is ", kMaxRank));
  }
  // An extent of 0 makes the shape empty however large the others are.
  const bool empty = absl::c_linear_search(shape, 0);
  int64_t count = 1;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    const int64_t extent = shape[axis];
    if (extent < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".shape[", axis, "] is ", extent,
                                                     "; extents must be >= 0"));
    }
    if (empty) continue;
    // count * extent > max_elements, tested without overflowing.
    if (count > max_elements / extent) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".shape ", ShapeToString(shape),
                                                     " has more than ", max_elements,
                                                     " elements (the server's max_elements)"));
    }
    count *= extent;
  }
  return empty ? 0 : count;
}

}  // namespace gpucompute
