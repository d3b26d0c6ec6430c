// The multi-threaded CPU backend: host memory and the four operations on a
// shared thread pool. Serves the same API as the CUDA backend on machines
// without a GPU.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace gpucompute {

// `threads` = 0: one per hardware thread.
std::unique_ptr<Backend> CreateCpuBackend(int threads);

}  // namespace gpucompute
