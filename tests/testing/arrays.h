// Arrays on a backend for the backend tests: upload, NaN-poisoned outputs (an
// element the backend never writes shows up), and reading back.
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/dtype.h"

namespace gpucompute::test {

template <typename T>
constexpr DType DTypeOf() {
  return std::is_same_v<T, float> ? DType::kFloat32 : DType::kFloat64;
}

// The device every array of one test lives on, as the server places all operands
// of an operation on one device: the first listed ("cpu" or "cuda:N").
int HomeDevice(const Backend& backend);

// An array of `shape` on the home device holding `host` (bytes as laid out), or
// uninitialized when `host` is null.
std::shared_ptr<Array> Make(Backend& backend, DType dtype, const Shape& shape, const void* host);

// An output array filled with NaN (all bits set).
std::shared_ptr<Array> Poisoned(Backend& backend, DType dtype, const Shape& shape);

template <typename T>
std::shared_ptr<Array> Put(Backend& backend, const Shape& shape, const std::vector<T>& values) {
  return Make(backend, DTypeOf<T>(), shape, values.data());
}

// The array's bytes read back as T.
template <typename T>
std::vector<T> Read(Backend& backend, const Array& array);

}  // namespace gpucompute::test
