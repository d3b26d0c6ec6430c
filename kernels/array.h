// A typed, shaped block of memory owned by a backend: host memory for the CPU
// backend, device memory for the CUDA backend. Released when the last owner drops it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

// Elements [offset, offset + count of `shape`) of `parent`, contiguous, seen as
// an array of `shape`: one request's part of a batch's result. Keeps the parent.
class ArraySlice final : public Array {
 public:
  ArraySlice(std::shared_ptr<Array> parent, int64_t offset, Shape shape, int64_t count)
      : Array(parent->dtype(), std::move(shape), count, parent->device()),
        parent_(std::move(parent)),
        byte_offset_(static_cast<size_t>(offset) * ElementSize(dtype())) {}
  void* data() override { return static_cast<std::byte*>(parent_->data()) + byte_offset_; }

 private:
  std::shared_ptr<Array> parent_;
  size_t byte_offset_;
};

}  // namespace gpucompute
