#include "kernels/shape_rules.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gpucompute {

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b, absl::string_view a_name,
                                      absl::string_view b_name) {
  const size_t rank = std::max(a.size(), b.size());
  if (rank > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast rank ", rank, " exceeds the limit of ", kMaxRank));
  }
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Axis counted from the right.
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          a_name, ".shape ", ShapeToString(a), " and ", b_name, ".shape ", ShapeToString(b),
          " do not broadcast: axis -", i + 1, " has extents ", da, " and ", db));
    }
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t in_axis = in.size() - 1 - i;
    const size_t out_axis = out.size() - 1 - i;
    strides[out_axis] = in[in_axis] == 1 ? 0 : stride;
    stride *= in[in_axis];
  }
  return strides;
}

absl::Status CheckNormalizeShape(const Shape& input, absl::string_view name) {
  if (input.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is a scalar; Normalize needs rank >= 1 (rows along the last axis)"));
  }
  if (input.back() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".shape ", ShapeToString(input), " has empty rows (last axis is 0)"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckRank12(const Shape& shape, absl::string_view name) {
  if (shape.size() != 1 && shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeToString(shape),
                                                   " must be (N) or (B, N)"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

absl::StatusOr<LombScargleShape> RaggedShapes(const Shape& x, const Shape& y, const Shape* weights,
                                              int64_t frequencies,
                                              std::span<const int64_t> offsets) {
  const int64_t rows = static_cast<int64_t>(offsets.size()) - 1;
  if (rows < 1 || offsets[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_offsets has ", offsets.size(), " entries", rows >= 1 ? " and starts at " : "",
        rows >= 1 ? absl::StrCat(offsets[0]) : "", "; it must start at 0 and hold B + 1 >= 2"));
  }
  LombScargleShape result;
  for (int64_t b = 0; b < rows; ++b) {
    if (offsets[b + 1] <= offsets[b]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row_offsets[", b + 1, "] is ", offsets[b + 1], ", not above row_offsets[", b, "] = ",
          offsets[b], "; every row needs at least one sample"));
    }
    result.samples = std::max(result.samples, offsets[b + 1] - offsets[b]);
  }
  const Shape total = {offsets[rows]};
  for (const auto& [shape, name] : {std::pair{&x, "x"}, std::pair{&y, "y"}, std::pair{weights, "weights"}}) {
    if (shape != nullptr && *shape != total) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeToString(*shape),
                                                     " must be ", ShapeToString(total),
                                                     ": a ragged batch is flat, row_offsets[",
                                                     rows, "] samples"));
    }
  }
  if (frequencies <= 0) {
    return absl::InvalidArgumentError("frequencies are empty; need at least one");
  }
  result.batch = rows;
  result.frequencies = frequencies;
  result.x_batched = true;
  result.weights_batched = weights != nullptr;
  result.ragged = true;
  result.out = {rows, frequencies};
  return result;
}

}  // namespace

absl::StatusOr<LombScargleShape> LombScargleShapes(const Shape& x, const Shape& y,
                                                   const Shape* weights, int64_t frequencies,
                                                   std::span<const int64_t> row_offsets) {
  if (!row_offsets.empty()) return RaggedShapes(x, y, weights, frequencies, row_offsets);
  GC_RETURN_IF_ERROR(CheckRank12(x, "x"));
  GC_RETURN_IF_ERROR(CheckRank12(y, "y"));
  LombScargleShape result;
  result.samples = y.back();
  result.batch = y.size() == 2 ? y[0] : 1;
  if (x.back() != result.samples) {
    return absl::InvalidArgumentError(absl::StrCat("x.shape ", ShapeToString(x), " and y.shape ",
                                                   ShapeToString(y),
                                                   " differ in length (last axis)"));
  }
  if (x.size() == 2) {
    if (y.size() != 2 || x[0] != y[0]) {
      return absl::InvalidArgumentError(absl::StrCat("x.shape ", ShapeToString(x),
                                                     " is batched but y.shape ", ShapeToString(y),
                                                     " has a different batch"));
    }
    result.x_batched = true;
  }
  if (weights != nullptr) {
    if (*weights == y && y.size() == 2) {
      result.weights_batched = true;
    } else if (weights->size() != 1 || weights->back() != result.samples) {
      return absl::InvalidArgumentError(absl::StrCat("weights.shape ", ShapeToString(*weights),
                                                     " must equal y.shape ", ShapeToString(y),
                                                     " or be (N,) with N = ", result.samples));
    }
  }
  if (result.samples == 0 || result.batch == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("y.shape ", ShapeToString(y), " is empty; Lomb-Scargle needs N >= 1"));
  }
  if (frequencies <= 0) {
    return absl::InvalidArgumentError("frequencies are empty; need at least one");
  }
  result.frequencies = frequencies;
  result.out = y.size() == 2 ? Shape{result.batch, frequencies} : Shape{frequencies};
  return result;
}

Shape LombScargleOutShape(const LombScargleShape& shape, bool amplitude) {
  Shape out = shape.out;
  if (amplitude) out.push_back(2);
  return out;
}

}  // namespace gpucompute
