// Everything the server is configured with, read once from flags in main.cc and
// passed down. Tests build one directly.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/channel_args.h"
#include "kernels/backend.h"
#include "server/security.h"

namespace gpucompute {

struct ServerConfig {
  std::string address = "localhost:50051";
  // Empty: no metrics endpoint (tests that do not scrape).
  std::string metrics_address = "localhost:9464";
  BackendOptions backend;
  // Testing only (restart drills, --inject_sticky_error_after): >= 0 makes the
  // backend fail as after a sticky device error once this many operations have
  // run (kernels/testing/fault_injection.h).
  int64_t inject_sticky_error_after_operations = -1;
  int executor_threads = 0;  // 0: hardware concurrency, at least 2
  // Of those, the threads that take only small requests (work up to
  // small_request_work) and continuations; at least one thread stays general.
  int small_request_threads = 1;
  // How long a small-lane thread out of work watches for more before it sleeps.
  absl::Duration small_lane_spin = absl::ZeroDuration();
  int64_t small_request_work = int64_t{1} << 20;
  // A batchable request of at most this much work that finds no request
  // waiting and none of its kind running runs in place, on the gRPC thread it
  // arrived on, instead of waking an executor thread (Executor::BeginInPlace);
  // 0: never.
  int64_t in_place_work = int64_t{1} << 14;
  // Work units (result elements; batch x samples x frequencies for Lomb-Scargle)
  // one request may ask for; more get INVALID_ARGUMENT.
  int64_t max_work_per_request = int64_t{1} << 40;
  int max_queue_depth = 256;  // admitted requests waiting for an executor thread
  // Small requests waiting, counted apart so that general work cannot fill their queue.
  int max_small_queue_depth = 256;
  // Dynamic batching of small requests (server/dynamic_batcher.h): at most
  // max_batch_size in one launch, gathered for batch_window after the first
  // while another of its kind runs (0: the requests that queued while the
  // executor was busy).
  bool batching = true;
  int max_batch_size = 64;
  absl::Duration batch_window = absl::ZeroDuration();
  // Client metadata (header names and values) one call may send; more get
  // RESOURCE_EXHAUSTED. gRPC's own, connection-level limit is set higher
  // (server.cc) so that an oversized header fails its call, not the connection.
  uint32_t max_metadata_bytes = 8192;
  int max_device_queue_depth = 64;  // operations placed on one device at once
  uint64_t max_receive_message_bytes = 64ull << 20;
  uint32_t min_chunk_bytes = 4096;
  uint32_t max_chunk_bytes = 4u << 20;
  uint32_t default_chunk_bytes = 1u << 20;
  uint64_t buffer_quota_bytes = 8ull << 30;
  uint64_t principal_quota_bytes = 0;  // per caller; 0: only the global quota
  int64_t max_buffers_per_owner = 10000;  // stored buffers per caller; 0: no limit
  int64_t max_elements = int64_t{1} << 34;  // per tensor
  absl::Duration grace_period = absl::Seconds(30);
  // On SIGTERM, how long health reports NOT_SERVING while the port still
  // accepts (so probes and load balancers see it) before the drain closes it.
  absl::Duration drain_delay = absl::ZeroDuration();

  // Admission and transport limits (each reported in ServerInfo.limits).
  int max_in_flight = 1024;                 // requests admitted at once, all callers
  int max_in_flight_per_connection = 128;   // per client connection
  int max_concurrent_streams = 256;         // HTTP/2 streams per connection
  // Integer gRPC channel arguments set after the server's own (transport tuning).
  IntChannelArgs grpc_channel_args;
  // An Upload silent this long is closed; a result stream unread this long is cancelled.
  absl::Duration stream_idle_timeout = absl::Seconds(30);
  // How long a resumable upload no stream uses keeps its partial buffer
  // (--upload_session_ttl).
  absl::Duration upload_session_ttl = absl::Minutes(10);
  // StreamingCompute: input chunks one call may hold, received and not yet answered.
  int streaming_chunks_in_flight = 4;
  // gRPC's memory for connections and calls; 0: derived (DefaultResourceQuotaBytes).
  uint64_t resource_quota_bytes = 0;
  // The server binary sets this: at start its own memory outside arrays (the
  // resident set so far, the resource quota gRPC may still take, the cap of
  // recycled result-chunk memory, ChunkMemory::kMaxCachedBytes, and what the backend
  // keeps for reuse, Backend::max_kept_host_bytes) is charged
  // to the host memory budget, so that the whole process stays within it.
  // An embedding process (tests) owns its memory and leaves it unset.
  bool charge_process_memory = false;
  absl::Duration keepalive_time = absl::Hours(2);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  absl::Duration min_client_ping_interval = absl::Seconds(60);
  absl::Duration max_connection_idle = absl::InfiniteDuration();
  absl::Duration max_connection_age = absl::InfiniteDuration();
  absl::Duration max_connection_age_grace = absl::InfiniteDuration();

  // Same-host zero copy (the SharedMemory service): off unless set, and only ever
  // for local connections.
  bool allow_shared_memory = false;
  uint64_t shared_memory_quota_bytes = 64ull << 30;     // all registered regions
  uint64_t shared_memory_principal_quota_bytes = 0;     // per caller; 0: only the global quota
  int64_t max_shared_memory_regions_per_owner = 64;     // 0: no limit

  SecurityConfig security;
  bool enable_reflection = true;
  std::string metrics_basic_auth_file;  // "USER sha256:HEX" per line; empty: open
};

}  // namespace gpucompute
