#include "client/tensor.h"

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace gpucompute::client {

// The wire format and .npy data are little-endian; values are copied as they lie
// in memory.
static_assert(std::endian::native == std::endian::little,
              "gpucompute client assumes a little-endian host");

size_t DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return 4;
    case v1::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

absl::string_view DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return "float32";
    case v1::FLOAT64:
      return "float64";
    default:
      return "unspecified";
  }
}

absl::StatusOr<v1::DType> ParseDTypeName(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "float32" || lower == "f4") return v1::FLOAT32;
  if (lower == "float64" || lower == "f8") return v1::FLOAT64;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected float32 or float64)"));
}

std::string ShapeToString(std::span<const int64_t> shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

Shape ShapeOf(const google::protobuf::RepeatedField<int64_t>& field) {
  return Shape(field.begin(), field.end());
}

absl::StatusOr<uint64_t> ByteCount(v1::DType dtype, std::span<const int64_t> shape) {
  const uint64_t element_size = DTypeSize(dtype);
  if (element_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", v1::DType_Name(dtype)));
  }
  bool has_zero_extent = false;
  for (const int64_t extent : shape) {
    if (extent < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative extent in shape ", ShapeToString(shape)));
    }
    has_zero_extent |= extent == 0;
  }
  // An empty array is fine however large its other extents are.
  if (has_zero_extent) return 0;
  uint64_t bytes = element_size;
  for (const int64_t extent : shape) {
    const uint64_t e = static_cast<uint64_t>(extent);
    if (bytes > std::numeric_limits<uint64_t>::max() / e) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " is too large to address"));
    }
    bytes *= e;
  }
  return bytes;
}

absl::StatusOr<v1::Tensor> MakeTensor(v1::DType dtype, std::span<const int64_t> shape,
                                      std::string data) {
  GC_ASSIGN_OR_RETURN(const uint64_t bytes, ByteCount(dtype, shape));
  if (bytes != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(DTypeName(dtype), " ", ShapeToString(shape),
                                                   " needs ", bytes, " bytes, got ", data.size()));
  }
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_data(std::move(data));
  return tensor;
}

namespace {

template <typename T>
absl::StatusOr<v1::Tensor> MakeTypedTensor(v1::DType dtype, std::span<const T> values,
                                           std::span<const int64_t> shape) {
  std::string data(values.size_bytes(), '\0');
  if (!values.empty()) std::memcpy(data.data(), values.data(), values.size_bytes());
  return MakeTensor(dtype, shape, std::move(data));
}

}  // namespace

absl::StatusOr<v1::Tensor> MakeTensor(std::span<const float> values,
                                      std::span<const int64_t> shape) {
  return MakeTypedTensor(v1::FLOAT32, values, shape);
}

absl::StatusOr<v1::Tensor> MakeTensor(std::span<const double> values,
                                      std::span<const int64_t> shape) {
  return MakeTypedTensor(v1::FLOAT64, values, shape);
}

v1::Operand TensorOperand(v1::Tensor tensor) {
  v1::Operand operand;
  *operand.mutable_tensor() = std::move(tensor);
  return operand;
}

v1::Operand BufferOperand(std::string buffer_id) {
  v1::Operand operand;
  operand.set_buffer_id(std::move(buffer_id));
  return operand;
}

absl::StatusOr<std::vector<double>> DecodeAsDoubles(v1::DType dtype, absl::string_view data) {
  const size_t element_size = DTypeSize(dtype);
  if (element_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", v1::DType_Name(dtype)));
  }
  if (data.size() % element_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(data.size(), " bytes is not a whole number of ",
                                                   DTypeName(dtype), " elements"));
  }
  std::vector<double> values(data.size() / element_size);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == v1::FLOAT32) {
      float value;
      std::memcpy(&value, data.data() + i * element_size, sizeof value);
      values[i] = value;
    } else {
      std::memcpy(&values[i], data.data() + i * element_size, sizeof(double));
    }
  }
  return values;
}

}  // namespace gpucompute::client
