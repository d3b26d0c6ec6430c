// A typed, shaped block of memory owned by a backend: host memory for the CPU
// backend, device memory for the CUDA backend. Released when the last owner drops it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/dtype.h"

namespace gpucompute {

inline constexpr int kHostDevice = -1;

class Array {
 public:
  Array(DType dtype, Shape shape, int64_t element_count, int device)
      : dtype_(dtype), shape_(std::move(shape)), size_(element_count), device_(device) {}
  virtual ~Array() = default;
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return size_; }
  size_t bytes() const { return static_cast<size_t>(size_) * ElementSize(dtype_); }
  // kHostDevice for host memory, else the CUDA device ordinal.
  int device() const { return device_; }

  // Pointer in the owning backend's address space (a device pointer on CUDA).
  virtual void* data() = 0;
  const void* data() const { return const_cast<Array*>(this)->data(); }

  template <typename T>
  T* data_as() { return static_cast<T*>(data()); }
  template <typename T>
  const T* data_as() const { return static_cast<const T*>(data()); }

 private:
  DType dtype_;
  Shape shape_;
  int64_t size_;
  int device_;
};

}  // namespace gpucompute
