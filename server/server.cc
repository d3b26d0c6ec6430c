#include "server/server.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/channel_args.h"
#include "common/status_macros.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "kernels/backend.h"
#include "kernels/memory/memory_budget.h"
#include "kernels/testing/fault_injection.h"
#include "server/admission.h"
#include "server/buffer_store.h"
#include "server/buffers_service.h"
#include "server/chunk_memory.h"
#include "server/compute_service.h"
#include "server/executor.h"
#include "server/grpc_log_watch.h"
#include "server/info_service.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/recovery_listener.h"
#include "server/reflection.h"
#include "server/security.h"
#include "server/service_context.h"
#include "server/shared_memory_registry.h"
#include "server/shared_memory_service.h"

#ifndef GPUCOMPUTE_GIT_COMMIT
#define GPUCOMPUTE_GIT_COMMIT "unknown"
#endif
#ifndef GPUCOMPUTE_CUDA_VERSION
#define GPUCOMPUTE_CUDA_VERSION "none"
#endif

namespace gpucompute {
namespace {

// Pings that break --min_client_ping_interval before the connection is closed
// (ENHANCE_YOUR_CALM "too_many_pings").
constexpr int kMaxPingStrikes = 2;
// gRPC's hard bound on one header block. Over it, gRPC 1.51 cannot keep the
// connection's HPACK state and may close the whole connection, so it sits far
// above --max_metadata_bytes, which admission enforces per call.
constexpr int kMaxHeaderBlockBytes = 64 << 10;
// A connection that has not finished its (TLS) handshake by then is closed.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
// Drain: how often it looks whether the admitted requests are done, and how long the
// port stays open after them for their statuses to reach the clients.
constexpr absl::Duration kDrainPoll = absl::Milliseconds(5);
constexpr absl::Duration kCloseLinger = absl::Milliseconds(100);
// Once no admitted work is left, how long the drain still waits for calls that
// need no admission (a List, a health check) and for clients to close their
// connections after the GOAWAY; then it closes those that stay open, so that an
// idle connection cannot hold the drain for the whole grace period.
constexpr absl::Duration kUnadmittedGrace = absl::Milliseconds(500);

// gRPC channel arguments take int milliseconds; INT_MAX means "never".
int Millis(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return INT32_MAX;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(d), INT32_MAX));
}

// `requested`, or 1/8 of the host budget within [64 MiB, 2 GiB]: room for
// gRPC's buffers of a few hundred busy streams that leaves arrays the most.
uint64_t ResourceQuotaBytes(uint64_t requested, const MemoryBudget* host_budget) {
  if (requested != 0) return requested;
  const uint64_t capacity =
      host_budget != nullptr ? host_budget->capacity_bytes() : std::numeric_limits<uint64_t>::max();
  return std::clamp<uint64_t>(capacity / 8, uint64_t{64} << 20, uint64_t{2} << 30);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuComputeServer>> GpuComputeServer::Start(
    const ServerConfig& config) {
  GC_ASSIGN_OR_RETURN(BackendSelection selection, CreateBackend(config.backend));
  if (config.inject_sticky_error_after_operations >= 0) {
    selection =
        WithStickyErrorAfter(std::move(selection), config.inject_sticky_error_after_operations);
  }
  return Start(config, std::move(selection));
}

absl::StatusOr<std::unique_ptr<GpuComputeServer>> GpuComputeServer::Start(
    const ServerConfig& config, BackendSelection selection) {
  std::unique_ptr<GpuComputeServer> server(new GpuComputeServer());
  server->config_ = config;
  server->backend_ = std::move(selection.backend);
  server->backend_note_ = std::move(selection.note);
  const std::shared_ptr<MemoryBudget> host_budget = HostMemoryBudget(*server->backend_);
  server->config_.resource_quota_bytes =
      ResourceQuotaBytes(config.resource_quota_bytes, host_budget.get());
  if (config.charge_process_memory && host_budget != nullptr) {
    // The resident set the budget does not count yet (it counts pinned staging),
    // what gRPC may take, the recycled result-chunk memory kept for reuse and what the
    // backend keeps for reuse (the CPU backend's freed arrays, the CUDA backend's
    // RunFromHost result blocks).
    const uint64_t resident = ResidentSetBytes();
    server->process_memory_ = host_budget->ChargeFixed(
        resident - std::min(resident, host_budget->used_bytes()) + server->config_.resource_quota_bytes +
        ChunkMemory::kMaxCachedBytes + server->backend_->max_kept_host_bytes());
  }

  // Result chunks copied off a device land in recycled blocks: these ones are resident
  // before the first result needs them (host arrays stream as they are).
  if (!server->backend_->arrays_on_host()) {
    ChunkMemory::Shared().Prefill(config.default_chunk_bytes, *server->backend_);
  }

  server->metrics_ = std::make_unique<Metrics>(BuildInfo{kVersion, GPUCOMPUTE_GIT_COMMIT,
                                                         GPUCOMPUTE_CUDA_VERSION,
                                                         std::string(server->backend_->name())});
  server->store_ =
      std::make_unique<BufferStore>(config.buffer_quota_bytes, config.principal_quota_bytes,
                                    config.max_buffers_per_owner, kBufferOverheadBytes);
  server->admission_ = std::make_unique<Admission>(config.max_in_flight,
                                                   config.max_in_flight_per_connection);
  server->stream_admission_ = std::make_unique<Admission>(
      config.max_open_streams, config.max_open_streams_per_connection,
      "Upload and StreamingCompute calls open", "max_open_streams",
      "max_open_streams_per_connection");
  const int threads = config.executor_threads > 0
                          ? config.executor_threads
                          : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  server->device_queues_ = std::make_unique<DeviceQueues>(config.max_device_queue_depth);
  server->shared_memory_ = std::make_unique<SharedMemoryRegistry>(SharedMemoryLimits{
      config.shared_memory_quota_bytes, config.shared_memory_principal_quota_bytes,
      config.max_shared_memory_regions_per_owner}, server->store_->instance_id());
  server->executor_ =
      std::make_unique<Executor>(threads, config.max_queue_depth, config.small_request_threads,
                                 config.max_small_queue_depth, config.small_lane_spin,
                                 [backend = server->backend_.get()] { backend->PrepareThread(); });
  server->context_ = std::unique_ptr<ServiceContext>(new ServiceContext{
      server->config_, *server->backend_, *server->store_, *server->executor_, *server->metrics_,
      *server->admission_, *server->stream_admission_, *server->device_queues_,
      *server->shared_memory_, server->draining_});
  server->compute_service_ = std::make_unique<ComputeService>(*server->context_);
  server->buffers_service_ = std::make_unique<BuffersService>(*server->context_);
  server->info_service_ = std::make_unique<InfoService>(*server->context_, server->backend_note_);
  server->shared_memory_service_ = std::make_unique<SharedMemoryService>(*server->context_);

  GpuComputeServer* self = server.get();
  auto live_state = [self] {
    LiveState state;
    state.backend = self->backend_->Stats();
    state.devices = self->backend_->Devices();
    state.stored_buffers = self->store_->count();
    state.stored_buffer_bytes = self->store_->used_bytes();
    state.shared_memory_regions = self->shared_memory_->count();
    state.shared_memory_bytes = self->shared_memory_->used_bytes();
    state.queued_requests =
        self->executor_->queued_requests() + self->compute_service_->batching();
    state.busy_general_threads = self->executor_->busy_threads(Executor::Lane::kGeneral);
    state.busy_small_lane_threads = self->executor_->busy_threads(Executor::Lane::kSmall);
    return state;
  };
  GC_RETURN_IF_ERROR(server->metrics_->StartExposer(
      config.metrics_address, config.metrics_basic_auth_file, std::move(live_state)));

  GC_ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ServerCredentials> credentials,
                      MakeServerCredentials(config.security));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.address, credentials, &server->port_);
  // gRPC binds with SO_REUSEPORT by default: a second server on a busy port
  // would start and silently split the traffic with the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<uint64_t>(config.max_receive_message_bytes, INT32_MAX)));
  grpc::ResourceQuota quota("gpucompute");
  quota.Resize(server->config_.resource_quota_bytes);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kMaxSocketReadBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxHttp2FrameBytes);
  // gRPC 1.51 predates the HTTP/2 rapid-reset (CVE-2023-44487) mitigations; these
  // bound what a hostile client can make the transport hold (README, exposure).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, kMaxPingStrikes);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxHeaderBlockBytes);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, Millis(kHandshakeTimeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(config.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(config.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Millis(config.min_client_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, Millis(config.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, Millis(config.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Millis(config.max_connection_age_grace));
  // Last, so that they override the settings above (gRPC keeps the last of a name).
  for (const auto& [name, value] : config.grpc_channel_args) builder.AddChannelArgument(name, value);
  builder.RegisterService(server->compute_service_.get());
  builder.RegisterService(server->buffers_service_.get());
  builder.RegisterService(server->info_service_.get());
  builder.RegisterService(server->shared_memory_service_.get());
  if (config.enable_reflection) {
    GC_ASSIGN_OR_RETURN(std::vector<std::string> services,
                        ReflectedServices({v1::Compute::service_full_name(),
                                           v1::Buffers::service_full_name(),
                                           v1::Server::service_full_name(),
                                           v1::SharedMemory::service_full_name()}));
    server->reflection_v1_ = std::make_unique<ReflectionV1>(services);
    server->reflection_v1alpha_ = std::make_unique<ReflectionV1Alpha>(std::move(services));
    builder.RegisterService(server->reflection_v1_.get());
    builder.RegisterService(server->reflection_v1alpha_.get());
  }
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<HealthRpcCounter>(*server->metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on address ", config.address, " (in use or invalid)"));
  }
  WatchGrpcLog();
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  server->health_watcher_ = std::thread([self] { self->WatchBackendHealth(); });
  return server;
}

void GpuComputeServer::WatchBackendHealth() {
  while (!stop_watching_.WaitForNotificationWithTimeout(kHealthPollInterval)) {
    if (!backend_->Healthy()) {
      server_->GetHealthCheckService()->SetServingStatus(false);
      LogLine("no healthy device left: health NOT_SERVING");
      return;
    }
    if (GrpcListenerFailed() && !WatchRecoveryListener()) return;
  }
}

bool GpuComputeServer::WatchRecoveryListener() {
  if (!config_.security.tls_cert_file.empty()) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    LogLine("the gRPC listener failed to accept a connection and accepts no more (out of file "
            "descriptors?); with TLS the server cannot accept in its place: health "
            "NOT_SERVING; restart the server");
    return false;
  }
  if (recovery_listener_ == nullptr) {
    // Out of descriptors, taking over fails too: tried again at the next tick.
    absl::StatusOr<std::unique_ptr<RecoveryListener>> listener =
        RecoveryListener::TakeOver(server_.get(), port_);
    if (!listener.ok()) {
      if (serving_) {
        serving_ = false;
        server_->GetHealthCheckService()->SetServingStatus(false);
        LogLine(absl::StrCat("the gRPC listener failed to accept a connection and accepts no "
                             "more (out of file descriptors?): health NOT_SERVING until the "
                             "server can accept in its place (",
                             listener.status().message(), ")"));
      }
      return true;
    }
    recovery_listener_ = *std::move(listener);
    LogLine("the server accepts connections on its port itself from now on (gRPC's listener "
            "failed)");
  }
  const bool accepting = recovery_listener_->accepting();
  if (accepting != serving_) {
    serving_ = accepting;
    server_->GetHealthCheckService()->SetServingStatus(accepting);
    LogLine(accepting ? "accepting connections again: health SERVING"
                      : "out of file descriptors, new connections wait: health NOT_SERVING");
  }
  return true;
}

void GpuComputeServer::StopHealthWatcher() {
  if (!stop_watching_.HasBeenNotified()) stop_watching_.Notify();
  if (health_watcher_.joinable()) health_watcher_.join();
}

GpuComputeServer::~GpuComputeServer() {
  StopHealthWatcher();
  recovery_listener_.reset();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
}

int GpuComputeServer::metrics_port() const { return metrics_->port(); }

const std::string& GpuComputeServer::instance_id() const { return store_->instance_id(); }

std::string GpuComputeServer::backend_name() const { return std::string(backend_->name()); }

bool GpuComputeServer::BackendHealthy() const { return backend_->Healthy(); }

BackendStats GpuComputeServer::backend_stats() const { return backend_->Stats(); }

void GpuComputeServer::StopServing() {
  StopHealthWatcher();
  server_->GetHealthCheckService()->SetServingStatus(false);
  if (!draining_.exchange(true)) {
    LogLine("draining: health NOT_SERVING, new requests UNAVAILABLE");
    compute_service_->EndSessions();
  }
}

void GpuComputeServer::Drain(absl::Duration grace) {
  StopServing();
  LogLine(absl::StrCat("draining: in-flight requests get a grace of ", absl::FormatDuration(grace),
                       ", then the port closes"));
  const absl::Time deadline = absl::Now() + grace;
  // The admitted requests finish before the port closes. Shutdown sends each
  // connection a GOAWAY, after which gRPC closes it as its last stream ends; a close
  // with the client's last frames (window updates for the result) still unread
  // resets the connection, and the client loses the end of a response it has not
  // read yet ("Connection reset by peer", which ServerProcessTest.SigtermDrainsAndExitsZero
  // caught on a loaded machine). A request's ticket
  // goes just before its status is sent, so the port stays open kCloseLinger more.
  bool waited = false;
  while (admission_->in_flight() + stream_admission_->in_flight() > 0 && absl::Now() < deadline) {
    waited = true;
    absl::SleepFor(kDrainPoll);
  }
  if (waited) absl::SleepFor(std::min(kCloseLinger, std::max(deadline - absl::Now(), absl::ZeroDuration())));
  recovery_listener_.reset();
  server_->Shutdown(absl::ToChronoTime(std::min(deadline, absl::Now() + kUnadmittedGrace)));
  server_->Wait();
}

}  // namespace gpucompute
