// gpucompute-server: flags are read here, once, into a ServerConfig.
#include <csignal>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
ABSL_FLAG(int32_t, cpu_threads, 0, "CPU backend worker threads; 0 = hardware concurrency");
ABSL_FLAG(int32_t, max_queue_depth, 256,
          "admitted requests that may wait for an executor thread; more get RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_message_bytes, 64ull << 20,
          "largest request message accepted, bytes (bigger inputs go through Buffers.Upload)");
ABSL_FLAG(uint32_t, min_chunk_bytes, 4096, "smallest chunk_bytes a request may ask for");
ABSL_FLAG(uint32_t, max_chunk_bytes, 4u << 20, "largest chunk_bytes a request may ask for");
ABSL_FLAG(uint32_t, default_chunk_bytes, 1u << 20, "chunk size when a request gives 0");
ABSL_FLAG(uint64_t, buffer_quota_bytes, 8ull << 30,
          "total bytes of stored buffers (uploads and keep_on_device results)");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 34, "largest element count of one tensor");
ABSL_FLAG(uint64_t, pinned_staging_bytes, 64ull << 20,
          "CUDA: pinned host staging memory for host<->device copies");
ABSL_FLAG(uint64_t, pool_release_threshold_bytes, 0,
          "CUDA: memory the device pool keeps cached when idle; 0 = keep all (warm)");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(30),
          "on SIGTERM/SIGINT, how long in-flight requests may run before they are cancelled");

namespace {

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
  config.backend.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  config.backend.pinned_staging_bytes = absl::GetFlag(FLAGS_pinned_staging_bytes);
  config.backend.pool_release_threshold_bytes = absl::GetFlag(FLAGS_pool_release_threshold_bytes);
  config.executor_threads = absl::GetFlag(FLAGS_threads);
  config.max_queue_depth = absl::GetFlag(FLAGS_max_queue_depth);
  config.max_receive_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.min_chunk_bytes = absl::GetFlag(FLAGS_min_chunk_bytes);
  config.max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  config.default_chunk_bytes = absl::GetFlag(FLAGS_default_chunk_bytes);
  config.buffer_quota_bytes = absl::GetFlag(FLAGS_buffer_quota_bytes);
  config.max_elements = absl::GetFlag(FLAGS_max_elements);
  config.grace_period = absl::GetFlag(FLAGS_grace_period);
  if (config.min_chunk_bytes == 0 || config.min_chunk_bytes > config.default_chunk_bytes ||
      config.default_chunk_bytes > config.max_chunk_bytes) {
    return absl::InvalidArgumentError(
        "chunk bounds must satisfy 0 < --min_chunk_bytes <= --default_chunk_bytes <= "
        "--max_chunk_bytes");
  }
  if (config.max_queue_depth < 1 || config.max_elements < 1) {
    return absl::InvalidArgumentError("--max_queue_depth and --max_elements must be >= 1");
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpucompute-server: GPU (or CPU) numeric operations over gRPC.\n"
      "  gpucompute-server --address=localhost:50051 --metrics_address=localhost:9464");
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
                                                      (*server)->metrics_port(), ")")));

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  gpucompute::LogLine(absl::StrCat("received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"));
  (*server)->Drain(config->grace_period);
  const bool healthy = (*server)->BackendHealthy();
  server->reset();
  gpucompute::LogLine("stopped");
  // Non-zero when no healthy device is left, so a supervisor restarts us.
  return healthy ? 0 : 3;
}
