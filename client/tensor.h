// Element types, shapes and the Tensor/Operand messages of API v1, built from
// plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

using Shape = std::vector<int64_t>;

// 4 for FLOAT32, 8 for FLOAT64, 0 for anything else.
size_t DTypeSize(v1::DType dtype);
// "float32", "float64"; "unspecified" otherwise.
absl::string_view DTypeName(v1::DType dtype);
// Accepts "float32"/"f4" and "float64"/"f8".
absl::StatusOr<v1::DType> ParseDTypeName(absl::string_view name);

// "(2, 3)"; "(3,)" for rank 1 and "()" for a scalar, as NumPy prints them.
std::string ShapeToString(std::span<const int64_t> shape);

// Copies a repeated shape field (e.g. ResultHeader.shape) into a Shape.
Shape ShapeOf(const google::protobuf::RepeatedField<int64_t>& field);

// product(shape) * DTypeSize(dtype), rejecting an unknown dtype, negative extents
// and products that overflow.
absl::StatusOr<uint64_t> ByteCount(v1::DType dtype, std::span<const int64_t> shape);

// A Tensor of `dtype` and `shape` holding `data` (little-endian, C order); fails
// when data.size() is not the byte count of that shape.
absl::StatusOr<v1::Tensor> MakeTensor(v1::DType dtype, std::span<const int64_t> shape,
                                      std::string data);
absl::StatusOr<v1::Tensor> MakeTensor(std::span<const float> values,
                                      std::span<const int64_t> shape);
absl::StatusOr<v1::Tensor> MakeTensor(std::span<const double> values,
                                      std::span<const int64_t> shape);

v1::Operand TensorOperand(v1::Tensor tensor);
v1::Operand BufferOperand(std::string buffer_id);

// Elements of FLOAT32/FLOAT64 `data` widened to double (for checks and printing).
// Fails when the dtype is unknown or data.size() is not a whole number of elements.
absl::StatusOr<std::vector<double>> DecodeAsDoubles(v1::DType dtype, absl::string_view data);

}  // namespace gpucompute::client
