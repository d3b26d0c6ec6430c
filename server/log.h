// Start-up and shutdown messages on stderr with a UTC timestamp. (This Abseil,
// 20220623, predates absl/log; request paths report through statuses and metrics.)
#pragma once

#include <iostream>
#include "absl/strings/string_view.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpucompute {

inline void LogLine(absl::string_view message) {
  std::cerr << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone())
            << "gpucompute-server: " << message << std::endl;
}

}  // namespace gpucompute
