// Everything the server is configured with, read once from flags in main.cc and
// passed down. Tests build one directly.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "kernels/backend.h"

namespace gpucompute {

struct ServerConfig {
  std::string address = "localhost:50051";
  // Empty: no metrics endpoint (tests that do not scrape).
  std::string metrics_address = "localhost:9464";
  BackendOptions backend;
  int executor_threads = 0;  // 0: hardware concurrency, at least 2
  int max_queue_depth = 256;  // admitted requests waiting for an executor thread
  uint64_t max_receive_message_bytes = 64ull << 20;
  uint32_t min_chunk_bytes = 4096;
  uint32_t max_chunk_bytes = 4u << 20;
  uint32_t default_chunk_bytes = 1u << 20;
  uint64_t buffer_quota_bytes = 8ull << 30;
  int64_t max_elements = int64_t{1} << 34;  // per tensor
  absl::Duration grace_period = absl::Seconds(30);
};

}  // namespace gpucompute
