// NumPy .npy files (format versions 1.0, 2.0 and 3.0) holding float32 or float64
// arrays, rank <= 8.
//
// Hand-written: Debian 12 packages no C++ .npy library (no cnpy, no libnpy).
// Reading accepts the dtypes '<f4' and '<f8', also spelled with '|' or '=' (both
// little-endian here), and big-endian '>f4' and '>f8', in C or Fortran order,
// and always returns little-endian C order, as the Python client converts
// before sending. The cost: big-endian data takes one more pass to swap bytes in
// place; Fortran order with more than one axis longer than 1 takes a strided
// copy, so reading holds twice the array's bytes for a moment. Other dtypes are
// rejected with INVALID_ARGUMENT naming what was found. A file shorter than its
// header declares fails with DATA_LOSS naming the expected and actual byte counts.
// Writing produces version 1.0 (2.0 when the header needs more than 65535 bytes)
// with the header padded to a multiple of 64 bytes, as NumPy does.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/tensor.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

inline constexpr int kNpyMaxRank = 8;

struct NpyArray {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  Shape shape;
  std::string data;  // ByteCount(dtype, shape) bytes, little-endian, C order
};

// Parses a whole .npy file held in memory.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view file_bytes);

// The complete .npy file for the array; fails when data.size() does not match.
absl::StatusOr<std::string> SerializeNpy(v1::DType dtype, std::span<const int64_t> shape,
                                         absl::string_view data);

// Where a .npy file held in memory keeps its data, and whether that data is
// already little-endian C order (usable in place, without a copy).
struct NpyLayout {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  Shape shape;
  uint64_t data_offset = 0;
  bool in_place = false;
};
absl::StatusOr<NpyLayout> ParseNpyLayout(absl::string_view file_bytes);

// The bytes of a .npy file before the data of an array of dtype and shape.
absl::StatusOr<std::string> NpyHeader(v1::DType dtype, std::span<const int64_t> shape);

// File versions of the above; errors name the path. (client/npy_mapped.h maps
// files instead of reading them, for large arrays.)
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);
absl::Status WriteNpyFile(const std::string& path, v1::DType dtype, std::span<const int64_t> shape,
                          absl::string_view data);

}  // namespace gpucompute::client
