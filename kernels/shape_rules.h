// Shape rules of the four operations: the output shape for valid operands, and
// INVALID_ARGUMENT naming the operand and the rule otherwise. Used by the server
// to validate requests before any work is queued, and by backends for strides.
#pragma once

#include <cstdint>
#include <span>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace gpucompute {

// NumPy broadcasting of two shapes (rank <= kMaxRank).
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b, absl::string_view a_name,
                                      absl::string_view b_name);

// Element strides of an operand of shape `in` read as the broadcast shape `out`
// (right-aligned; 0 on broadcast axes). Result has out.size() entries.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);

// Normalize: rank >= 1 with a non-empty last axis. Output shape == input shape.
absl::Status CheckNormalizeShape(const Shape& input, absl::string_view name);

struct LombScargleShape {
  int64_t batch = 1;        // B (1 when y is 1-D)
  int64_t samples = 0;      // N
  int64_t frequencies = 0;  // M
  bool x_batched = false;   // x is (B, N) rather than (N)
  bool weights_batched = false;
  bool ragged = false;      // rows of their own lengths (row_offsets); samples is the longest
  Shape out;                // (M) or (B, M)
};

// x: (N) or (B, N); y: (N) or (B, N); weights: empty optional or like y or (N);
// M frequencies >= 1. N >= 1. With row_offsets (B + 1 of them), a ragged batch:
// x, y (and weights) (T), row b their elements [row_offsets[b], row_offsets[b + 1]),
// 0 = row_offsets[0] < row_offsets[1] < ... < row_offsets[B] = T; out (B, M).
absl::StatusOr<LombScargleShape> LombScargleShapes(const Shape& x, const Shape& y,
                                                   const Shape* weights, int64_t frequencies,
                                                   std::span<const int64_t> row_offsets = {});

// The output: shape.out, with a trailing axis of 2 (real, imaginary) for an amplitude.
Shape LombScargleOutShape(const LombScargleShape& shape, bool amplitude);

}  // namespace gpucompute
