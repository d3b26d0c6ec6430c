// The multi-threaded CPU backend: host memory and the four operations on a
// shared thread pool. Serves the same API as the CUDA backend on machines
// without a GPU.
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/backend.h"

namespace gpucompute {

// Freed arrays' memory the backend keeps for the next arrays (HostBlockPool), at
// most: outside the arrays' live bytes, so the server charges it to the host budget.
inline constexpr size_t kCpuCachedArrayBytes = size_t{64} << 20;

// `threads` = 0: one per hardware thread.
std::unique_ptr<Backend> CreateCpuBackend(int threads);

}  // namespace gpucompute
