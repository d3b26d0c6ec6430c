// The norms Normalize divides each row by: one enum for the server, the CPU and the CUDA
// backends (device code includes this header too, so it stays plain C++).
#pragma once

#include "absl/strings/string_view.h"

namespace gpucompute {

enum class NormKind : int { kSum = 0, kL1 = 1, kL2 = 2, kMaxAbs = 3 };

// The norm's name in error messages ("input row 3 has sum 0").
inline absl::string_view NormName(NormKind norm) {
  switch (norm) {
    case NormKind::kSum: return "sum";
    case NormKind::kL1: return "L1";
    case NormKind::kL2: return "L2";
    case NormKind::kMaxAbs: return "max-abs";
  }
  return "unknown";
}

}  // namespace gpucompute
