// An Array over memory that no backend allocated: a slice of a shared-memory
// region (host memory) or of device memory opened from a CUDA IPC handle
// (server/shared_memory_region.h). It never frees that memory; `owner` keeps the
// mapping alive for as long as the view is used.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "kernels/array.h"

namespace gpucompute {

class ArrayView final : public Array {
 public:
  // `data` holds `element_count` elements of `dtype` on `device` (kHostDevice or
  // a CUDA ordinal).
  ArrayView(DType dtype, Shape shape, int64_t element_count, int device, void* data,
            std::shared_ptr<const void> owner)
      : Array(dtype, std::move(shape), element_count, device),
        data_(data),
        owner_(std::move(owner)) {}

  void* data() override { return data_; }

 private:
  void* const data_;
  const std::shared_ptr<const void> owner_;
};

}  // namespace gpucompute
