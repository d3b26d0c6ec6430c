// gpucompute-server: flags are read here, once, into a ServerConfig.
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <malloc.h>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_lifetime.h"
#include "common/mutex_checks.h"
#include "common/version.h"
#include "kernels/memory/memory_budget.h"
#include "server/config.h"
#include "server/log.h"
#include "server/server.h"

ABSL_FLAG(std::string, address, "localhost:50051", "gRPC listen address, host:port (port 0 picks one)");
ABSL_FLAG(std::string, metrics_address, "localhost:9464",
          "Prometheus /metrics listen address, host:port; empty disables it");
ABSL_FLAG(std::string, backend, "auto",
          "auto (CUDA when compiled in and a GPU is usable, else CPU), cpu, or cuda");
ABSL_FLAG(std::string, devices, "", "CUDA device ordinals to use, comma-separated; empty = all");
ABSL_FLAG(int32_t, threads, 0, "executor threads running requests; 0 = hardware concurrency");
ABSL_FLAG(int32_t, small_request_threads, 1,
          "of the --threads executor threads, how many take only small requests (work up to "
          "--small_request_work) and result chunks, so long operations cannot hold them all; "
          "at least one thread stays general");
ABSL_FLAG(absl::Duration, small_lane_spin, absl::ZeroDuration(),
          "how long a small-request thread that ran out of work watches for more before it "
          "sleeps (0: it sleeps at once); a request arriving meanwhile skips a thread's wake-up "
          "at the cost of that much CPU after each burst");
ABSL_FLAG(int64_t, small_request_work, int64_t{1} << 20,
          "work units (result elements; batch x samples x frequencies for Lomb-Scargle) up to "
          "which a request counts as small");
ABSL_FLAG(int64_t, in_place_work, int64_t{1} << 14,
          "work units up to which a small request that finds nothing waiting and none of its "
          "kind running runs on the gRPC thread it arrived on instead of waking an executor "
          "thread (at most --small_request_threads at once); 0: never");
ABSL_FLAG(int64_t, max_work_per_request, int64_t{1} << 40,
          "work units one request may ask for (see --small_request_work); more get "
          "INVALID_ARGUMENT");
ABSL_FLAG(int32_t, cpu_threads, 0, "CPU backend worker threads; 0 = hardware concurrency");
ABSL_FLAG(bool, batching, true,
          "run small requests of one operation and shape that wait together as one launch");
ABSL_FLAG(int32_t, max_batch_size, 64, "most requests in one batched launch");
ABSL_FLAG(absl::Duration, batch_window, absl::ZeroDuration(),
          "how long the first request of a batch waits for others, only while another request "
          "of its kind runs (a lone request never waits; 0: a batch is the requests that "
          "queued while the executor was busy)");
ABSL_FLAG(int32_t, max_queue_depth, 256,
          "admitted requests that may wait for an executor thread; more get RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_small_queue_depth, 256,
          "small requests (see --small_request_work) that may wait for an executor thread, "
          "counted apart from --max_queue_depth; more get RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, max_metadata_bytes, 8192,
          "client metadata (header names and values) one call may send; more get "
          "RESOURCE_EXHAUSTED for that call only. Header blocks over 64 KiB are refused by "
          "gRPC itself");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Seconds(30),
          "an Upload that receives no message for this long is closed (DEADLINE_EXCEEDED) and "
          "its quota reservation freed; a result stream whose client takes no message for "
          "this long is cancelled and its result freed");
ABSL_FLAG(absl::Duration, upload_session_ttl, absl::Minutes(10),
          "an upload session (resumable, striped upload) that no stream has used this long is "
          "dropped with its partial buffer");
ABSL_FLAG(uint64_t, session_answer_bytes, 32ull << 20,
          "answers one Compute.Session may hold unwritten before it reads no more requests; "
          "past twice this, answers are RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, streaming_chunks_in_flight, 4,
          "StreamingCompute input chunks one call may hold (received, not yet answered); the "
          "server reads no further until one is written, so a call holds at most this many "
          "chunks and their results");
ABSL_FLAG(int64_t, max_buffers_per_owner, 10000,
          "stored buffers one caller may hold; more get RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(int32_t, max_device_queue_depth, 64,
          "operations placed on one device at once (copying in, waiting for it or running); "
          "more get RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_message_bytes, 64ull << 20,
          "largest request message accepted, bytes (bigger inputs go through Buffers.Upload)");
ABSL_FLAG(uint32_t, min_chunk_bytes, 4096, "smallest chunk_bytes a request may ask for");
ABSL_FLAG(uint32_t, max_chunk_bytes, 4u << 20, "largest chunk_bytes a request may ask for");
ABSL_FLAG(uint32_t, default_chunk_bytes, 1u << 20, "chunk size when a request gives 0");
ABSL_FLAG(uint64_t, buffer_quota_bytes, 8ull << 30,
          "total bytes of stored buffers (uploads and keep_on_device results)");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 34, "largest element count of one tensor");
ABSL_FLAG(std::string, cuda_sync, "yield",
          "how CUDA host threads wait for the GPU: spin, yield (spin, giving the core to "
          "ready threads) or block (sleep until the GPU signals)");
ABSL_FLAG(uint64_t, pinned_staging_bytes, 64ull << 20,
          "CUDA: pinned host staging memory for host<->device copies");
ABSL_FLAG(uint64_t, pool_release_threshold_bytes, 0,
          "CUDA: memory the device pool keeps cached when idle; 0 = keep all (warm)");
ABSL_FLAG(uint64_t, principal_quota_bytes, 0,
          "stored-buffer bytes per caller (token principal or client certificate); 0 = no limit "
          "beyond --buffer_quota_bytes");
ABSL_FLAG(int32_t, max_in_flight, 1024, "requests admitted at once from all callers");
ABSL_FLAG(int32_t, max_in_flight_per_connection, 128, "requests admitted at once per connection");
ABSL_FLAG(int32_t, max_concurrent_streams, 256, "HTTP/2 streams per connection");
ABSL_FLAG(int32_t, max_open_streams, 1024,
          "Upload and StreamingCompute calls open at once, counted apart from max_in_flight");
ABSL_FLAG(int32_t, max_open_streams_per_connection, 128,
          "Upload and StreamingCompute calls open at once per connection");
ABSL_FLAG(std::vector<std::string>, grpc_channel_args, {},
          "integer gRPC channel arguments, grpc.NAME=VALUE,..., set after the server's own "
          "(transport tuning; docs/operations.md)");
ABSL_FLAG(uint64_t, resource_quota_bytes, 0,
          "memory gRPC may use for connections and calls (grpc::ResourceQuota), charged to the "
          "host memory budget; 0 = 1/8 of the host budget, within [64 MiB, 2 GiB]");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Hours(2), "server keepalive ping interval");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(20),
          "how long to wait for a keepalive ping ack before closing");
ABSL_FLAG(absl::Duration, min_client_ping_interval, absl::Seconds(60),
          "clients pinging more often than this are disconnected");
ABSL_FLAG(absl::Duration, max_connection_idle, absl::InfiniteDuration(),
          "close connections idle this long");
ABSL_FLAG(absl::Duration, max_connection_age, absl::InfiniteDuration(),
          "close connections this old (spreads load after scaling out)");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::InfiniteDuration(),
          "time given to calls on a connection closed for age");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain; set with --tls_key for TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; clients must present a certificate it signed (mutual TLS)");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "bearer tokens, one 'PRINCIPAL sha256:HEX' per line (hash of the token); needs TLS; "
          "health checks stay open");
ABSL_FLAG(std::string, metrics_basic_auth_file, "",
          "'USER sha256:HEX' lines (hash of the password): /metrics needs HTTP basic auth");
ABSL_FLAG(bool, reflection, true, "serve gRPC server reflection, v1 and v1alpha");
ABSL_FLAG(uint64_t, pool_prewarm_bytes, 1ull << 30,
          "CUDA: device memory each pool reserves at start-up so first requests allocate warm "
          "memory (capped at a quarter of the GPU)");
ABSL_FLAG(uint64_t, host_memory_budget_bytes, 0,
          "host memory all arrays (results, staging, stored buffers) may take; 0 = half of "
          "physical RAM or of the container's cgroup memory limit, whichever is lower");
ABSL_FLAG(std::string, cgroup_root, "/sys/fs/cgroup",
          "where the cgroup filesystem is mounted (v2, or v1 with memory/), read for the "
          "container's memory limit");
ABSL_FLAG(uint64_t, device_memory_budget_bytes, 0,
          "device memory all arrays may take on each GPU; 0 = 7/8 of the GPU's memory");
ABSL_FLAG(absl::Duration, memory_budget_wait, absl::Seconds(1),
          "how long an allocation over a memory budget waits for memory before "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, inject_sticky_error_after, -1,
          "TESTING ONLY, for restart drills: after this many operations the backend fails as "
          "after a sticky device error (health NOT_SERVING, drain, exit status 3); -1 = off");
ABSL_FLAG(bool, allow_shared_memory, false,
          "serve the SharedMemory service: clients on this host (loopback or Unix-socket "
          "connections only) register POSIX shared memory or CUDA IPC memory and pass operands "
          "and results through it without a copy over gRPC");
ABSL_FLAG(uint64_t, shared_memory_quota_bytes, 64ull << 30,
          "bytes of shared memory all callers together may register (the server maps and pins "
          "them); more get RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, shared_memory_principal_quota_bytes, 0,
          "bytes of shared memory one caller may register; 0 = only --shared_memory_quota_bytes");
ABSL_FLAG(int64_t, max_shared_memory_regions_per_owner, 64,
          "shared-memory regions one caller may have registered; 0 = no limit");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(30),
          "on SIGTERM/SIGINT, how long in-flight requests may run before they are cancelled");
ABSL_FLAG(absl::Duration, drain_delay, absl::ZeroDuration(),
          "on SIGTERM/SIGINT, how long health reports NOT_SERVING (new requests UNAVAILABLE) "
          "while the port still accepts, before it closes and --grace_period starts; a second "
          "signal ends it early");

namespace {

// Result chunks (1-4 MiB) and request messages are large, short-lived blocks.
// glibc serves blocks over M_MMAP_THRESHOLD with mmap and returns them on free,
// but by default raises that threshold after each large free, after which such
// blocks come from arenas that keep the memory: RSS then grows past the memory
// budget and is never given back. A fixed threshold (which also turns the
// raising off) sends them to mmap for good; few arenas bound the memory that
// freed small blocks can strand across threads.
constexpr int kMmapThresholdBytes = 256 << 10;
constexpr int kMaxMallocArenas = 4;

void ConfigureMalloc() {
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  mallopt(M_ARENA_MAX, kMaxMallocArenas);
}

// This file's flags, not those of the libraries linked in. (Abseil's default
// looks for files named like the program, so plain --help found none.)
bool IsServerFlagFile(absl::string_view file) { return absl::EndsWith(file, "server/main.cc"); }

// Whether the command line asks for plain --help, which this Abseil answers
// with exit status 1; we answer it ourselves with 0.
bool AsksForHelp(int argc, char** argv) {
  return std::any_of(argv + 1, argv + argc, [](absl::string_view arg) {
    return arg == "--help" || arg == "-help";
  });
}

void PrintHelp() {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsServerFlagFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::cout << "gpucompute-server: " << absl::ProgramUsageMessage() << "\n\nFlags:\n";
  for (const absl::CommandLineFlag* flag : flags) {
    const std::string value = flag->DefaultValue();
    std::cout << "  --" << flag->Name() << " (" << flag->Help() << ");\n      default: "
              << (flag->IsOfType<std::string>() ? absl::StrCat("\"", value, "\"") : value)
              << ";\n";
  }
  std::cout << "\nTry --helpfull for the flags of the libraries too.\n";
}

absl::StatusOr<gpucompute::ServerConfig> ConfigFromFlags() {
  gpucompute::ServerConfig config;
  config.address = absl::GetFlag(FLAGS_address);
  config.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend == "auto") {
    config.backend.kind = gpucompute::BackendKind::kAuto;
  } else if (backend == "cpu") {
    config.backend.kind = gpucompute::BackendKind::kCpu;
  } else if (backend == "cuda") {
    config.backend.kind = gpucompute::BackendKind::kCuda;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", backend, " is not one of auto, cpu, cuda"));
  }
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_devices), ',', absl::SkipEmpty())) {
    int device = 0;
    if (!absl::SimpleAtoi(item, &device) || device < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--devices has '", item,
                                                     "'; give device ordinals like 0,1"));
    }
    config.backend.cuda_devices.push_back(device);
  }
  const std::string cuda_sync = absl::GetFlag(FLAGS_cuda_sync);
  if (cuda_sync == "spin") {
    config.backend.cuda_sync = gpucompute::CudaSync::kSpin;
  } else if (cuda_sync == "yield") {
    config.backend.cuda_sync = gpucompute::CudaSync::kYield;
  } else if (cuda_sync == "block") {
    config.backend.cuda_sync = gpucompute::CudaSync::kBlock;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_sync=", cuda_sync, " is not one of spin, yield, block"));
  }
  config.backend.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  config.backend.pinned_staging_bytes = absl::GetFlag(FLAGS_pinned_staging_bytes);
  config.backend.pool_release_threshold_bytes = absl::GetFlag(FLAGS_pool_release_threshold_bytes);
  config.backend.pool_prewarm_bytes = absl::GetFlag(FLAGS_pool_prewarm_bytes);
  config.backend.host_memory_budget_bytes = absl::GetFlag(FLAGS_host_memory_budget_bytes);
  config.backend.cgroup_root = absl::GetFlag(FLAGS_cgroup_root);
  config.backend.device_memory_budget_bytes = absl::GetFlag(FLAGS_device_memory_budget_bytes);
  config.backend.memory_budget_wait = absl::GetFlag(FLAGS_memory_budget_wait);
  config.inject_sticky_error_after_operations =
      absl::GetFlag(FLAGS_inject_sticky_error_after);
  config.executor_threads = absl::GetFlag(FLAGS_threads);
  config.batching = absl::GetFlag(FLAGS_batching);
  config.max_batch_size = std::max(1, absl::GetFlag(FLAGS_max_batch_size));
  config.batch_window = absl::GetFlag(FLAGS_batch_window);
  config.small_request_threads = absl::GetFlag(FLAGS_small_request_threads);
  config.small_lane_spin = absl::GetFlag(FLAGS_small_lane_spin);
  config.small_request_work = absl::GetFlag(FLAGS_small_request_work);
  config.in_place_work = absl::GetFlag(FLAGS_in_place_work);
  config.max_work_per_request = absl::GetFlag(FLAGS_max_work_per_request);
  config.drain_delay = absl::GetFlag(FLAGS_drain_delay);
  config.max_queue_depth = absl::GetFlag(FLAGS_max_queue_depth);
  config.max_small_queue_depth = absl::GetFlag(FLAGS_max_small_queue_depth);
  config.max_metadata_bytes = absl::GetFlag(FLAGS_max_metadata_bytes);
  config.max_device_queue_depth = absl::GetFlag(FLAGS_max_device_queue_depth);
  config.stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout);
  config.upload_session_ttl = absl::GetFlag(FLAGS_upload_session_ttl);
  config.streaming_chunks_in_flight = absl::GetFlag(FLAGS_streaming_chunks_in_flight);
  config.session_answer_bytes = absl::GetFlag(FLAGS_session_answer_bytes);
  if (config.session_answer_bytes < 1) {
    return absl::InvalidArgumentError("--session_answer_bytes must be >= 1");
  }
  config.max_buffers_per_owner = absl::GetFlag(FLAGS_max_buffers_per_owner);
  config.max_receive_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.min_chunk_bytes = absl::GetFlag(FLAGS_min_chunk_bytes);
  config.max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  config.default_chunk_bytes = absl::GetFlag(FLAGS_default_chunk_bytes);
  config.buffer_quota_bytes = absl::GetFlag(FLAGS_buffer_quota_bytes);
  config.max_elements = absl::GetFlag(FLAGS_max_elements);
  config.grace_period = absl::GetFlag(FLAGS_grace_period);
  config.principal_quota_bytes = absl::GetFlag(FLAGS_principal_quota_bytes);
  config.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  config.max_in_flight_per_connection = absl::GetFlag(FLAGS_max_in_flight_per_connection);
  config.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  config.max_open_streams = absl::GetFlag(FLAGS_max_open_streams);
  config.max_open_streams_per_connection = absl::GetFlag(FLAGS_max_open_streams_per_connection);
  absl::StatusOr<gpucompute::IntChannelArgs> channel_args = gpucompute::ParseIntChannelArgs(
      absl::GetFlag(FLAGS_grpc_channel_args), "--grpc_channel_args");
  if (!channel_args.ok()) return channel_args.status();
  config.grpc_channel_args = *std::move(channel_args);
  config.resource_quota_bytes = absl::GetFlag(FLAGS_resource_quota_bytes);
  config.charge_process_memory = true;
  config.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  config.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  config.min_client_ping_interval = absl::GetFlag(FLAGS_min_client_ping_interval);
  config.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  config.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  config.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  config.security.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  config.security.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  config.security.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  config.security.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  config.metrics_basic_auth_file = absl::GetFlag(FLAGS_metrics_basic_auth_file);
  config.enable_reflection = absl::GetFlag(FLAGS_reflection);
  config.allow_shared_memory = absl::GetFlag(FLAGS_allow_shared_memory);
  config.shared_memory_quota_bytes = absl::GetFlag(FLAGS_shared_memory_quota_bytes);
  config.shared_memory_principal_quota_bytes =
      absl::GetFlag(FLAGS_shared_memory_principal_quota_bytes);
  config.max_shared_memory_regions_per_owner =
      absl::GetFlag(FLAGS_max_shared_memory_regions_per_owner);
  if (config.max_shared_memory_regions_per_owner < 0) {
    return absl::InvalidArgumentError("--max_shared_memory_regions_per_owner must be >= 0");
  }
  if (config.min_chunk_bytes == 0 || config.min_chunk_bytes > config.default_chunk_bytes ||
      config.default_chunk_bytes > config.max_chunk_bytes) {
    return absl::InvalidArgumentError(
        "chunk bounds must satisfy 0 < --min_chunk_bytes <= --default_chunk_bytes <= "
        "--max_chunk_bytes");
  }
  if (config.max_queue_depth < 1 || config.max_small_queue_depth < 1 ||
      config.max_device_queue_depth < 1 || config.max_metadata_bytes < 1 ||
      config.max_elements < 1 || config.max_in_flight < 1 ||
      config.max_in_flight_per_connection < 1 || config.max_concurrent_streams < 1 ||
      config.max_open_streams < 1 || config.max_open_streams_per_connection < 1) {
    return absl::InvalidArgumentError(
        "--max_queue_depth, --max_small_queue_depth, --max_device_queue_depth, "
        "--max_metadata_bytes, --max_elements, --max_in_flight, "
        "--max_in_flight_per_connection, --max_concurrent_streams, --max_open_streams and "
        "--max_open_streams_per_connection must be >= 1");
  }
  if (config.upload_session_ttl < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("--upload_session_ttl must be >= 1ms");
  }
  if (config.streaming_chunks_in_flight < 1 || config.streaming_chunks_in_flight > 64) {
    return absl::InvalidArgumentError("--streaming_chunks_in_flight must lie in [1, 64]");
  }
  if (config.stream_idle_timeout < absl::Milliseconds(1) || config.max_buffers_per_owner < 0) {
    return absl::InvalidArgumentError(
        "--stream_idle_timeout must be >= 1ms and --max_buffers_per_owner >= 0");
  }
  if (config.small_request_threads < 0 || config.small_request_work < 0 ||
      config.in_place_work < 0 || config.max_work_per_request < 1 ||
      config.drain_delay < absl::ZeroDuration() ||
      config.small_lane_spin < absl::ZeroDuration() || config.small_lane_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "--small_request_threads, --small_request_work and --in_place_work must be >= 0, "
        "--max_work_per_request >= 1, --drain_delay >= 0 and --small_lane_spin in [0, 1s]");
  }
  return config;
}

// Raises the soft limit on open files to the hard one: every connection and
// every listener takes a descriptor, and gRPC's listener stops accepting for
// good once accept4 fails with EMFILE.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

int main(int argc, char** argv) {
  ConfigureMalloc();
  RaiseOpenFileLimit();
  gpucompute::DisableMutexDeadlockDetection();
  absl::SetProgramUsageMessage(
      "GPU (or CPU) numeric operations over gRPC.\n"
      "  gpucompute-server --address=localhost:50051 --metrics_address=localhost:9464");
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = IsServerFlagFile;
  usage_config.contains_helpshort_flags = IsServerFlagFile;
  // absl::ParseCommandLine answers --version with this and exits.
  usage_config.version_string = [] { return gpucompute::VersionText("gpucompute-server"); };
  absl::SetFlagsUsageConfig(usage_config);
  if (AsksForHelp(argc, argv)) {
    PrintHelp();
    return 0;
  }
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<gpucompute::ServerConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::cerr << "gpucompute-server: " << config.status().message() << "\n";
    return 2;
  }

  // Block the stop signals before any thread starts, then wait for them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // gRPC's initialization starts its threads: after the signals are blocked, so that
  // none of them takes a stop signal's default action.
  gpucompute::KeepGrpcInitializedUntilExit();

  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<gpucompute::GpuComputeServer>> server =
      gpucompute::GpuComputeServer::Start(*config);
  if (!server.ok()) {
    gpucompute::LogLine(absl::StrCat("failed to start: ", server.status().ToString()));
    return 1;
  }
  gpucompute::LogLine(absl::StrCat("backend ", (*server)->backend_name(), " (",
                                   (*server)->backend_note(), "), ready in ",
                                   absl::FormatDuration(absl::Now() - start)));
  gpucompute::LogLine(absl::StrCat("serving gRPC on ", config->address, " (port ",
                                   (*server)->port(), "), metrics on ",
                                   config->metrics_address.empty()
                                       ? std::string("(disabled)")
                                       : absl::StrCat("http://", config->metrics_address,
                                                      "/metrics (port ",
                                                      (*server)->metrics_port(), ")"),
                                   ", instance ", (*server)->instance_id()));
  for (const gpucompute::MemoryBudgetStats& budget : (*server)->backend_stats().memory_budgets) {
    if (budget.memory != "host") continue;
    gpucompute::LogLine(absl::StrCat(
        "host memory budget ", budget.capacity_bytes, " bytes: ",
        config->backend.host_memory_budget_bytes > 0
            ? std::string("--host_memory_budget_bytes")
            : gpucompute::DefaultHostBudget(config->backend).source));
  }

  // Serve until a stop signal, or until no healthy device is left (then drain
  // and exit non-zero so that a supervisor restarts the process).
  const timespec poll = {0, absl::ToInt64Nanoseconds(gpucompute::GpuComputeServer::kHealthPollInterval)};
  while (true) {
    const int signal_number = sigtimedwait(&stop_signals, nullptr, &poll);
    if (signal_number > 0) {
      gpucompute::LogLine(absl::StrCat("received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"));
      break;
    }
    if (!(*server)->BackendHealthy()) {
      gpucompute::LogLine("no healthy device left: draining, then exiting with status 3");
      break;
    }
  }
  if (config->drain_delay > absl::ZeroDuration()) {
    // Probes on new connections read NOT_SERVING (not "connection refused")
    // while load balancers take this replica out; a second signal cuts it short.
    (*server)->StopServing();
    const timespec delay = absl::ToTimespec(config->drain_delay);
    if (sigtimedwait(&stop_signals, nullptr, &delay) > 0) {
      gpucompute::LogLine("second stop signal: drain delay cut short");
    }
  }
  (*server)->Drain(config->grace_period);
  const bool healthy = (*server)->BackendHealthy();
  server->reset();
  gpucompute::LogLine("stopped");
  // Non-zero when no healthy device is left, so a supervisor restarts us.
  return healthy ? 0 : 3;
}
