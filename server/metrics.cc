#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "prometheus/collectable.h"
#include "server/security.h"
#include "server/status_convert.h"

namespace gpucompute {
namespace {

// CivetWeb gives each connection a thread until its request is read (30 s by
// default): two idle or half-open connections used to stall every scrape. Enough
// threads for a few such connections beside the scrapers, and a connection that
// sends no whole request in time is dropped.
constexpr int kExposerThreads = 8;
constexpr absl::Duration kExposerRequestTimeout = absl::Seconds(3);

// Connects to the listener at host:port (numeric IPv4 or [IPv6]) and hangs up.
void WakeListener(const std::string& host, int port) {
  sockaddr_storage address{};
  socklen_t length = 0;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6->sin6_addr) != 1) return;
    length = sizeof(sockaddr_in6);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) return;
    length = sizeof(sockaddr_in);
  }
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  connect(fd, reinterpret_cast<const sockaddr*>(&address), length);
  close(fd);
}

constexpr std::array<absl::string_view, kStageCount> kStageLabels = {
    "queue", "transfer_in", "compute", "transfer_out", "stream_write", "prepare"};
constexpr std::array<absl::string_view, 2> kDirectionLabels = {"host_to_device",
                                                              "device_to_host"};
constexpr std::array<absl::string_view, kRejectionCount> kRejectionLabels = {
    "queue_full", "deadline_exceeded", "quota", "unavailable", "in_flight_limit",
    "device_queue_full", "stream_idle", "buffer_count", "memory_budget", "work_limit",
    "metadata_size"};

struct RpcName {
  absl::string_view service;
  absl::string_view method;
  absl::string_view type;
};
constexpr std::array<RpcName, kRpcMethodCount> kRpcNames = {{
    {"gpucompute.v1.Compute", "DiscountProduct", "server_stream"},
    {"gpucompute.v1.Compute", "HaversineGrid", "server_stream"},
    {"gpucompute.v1.Compute", "Normalize", "server_stream"},
    {"gpucompute.v1.Compute", "LombScargle", "server_stream"},
    {"gpucompute.v1.Buffers", "Upload", "client_stream"},
    {"gpucompute.v1.Buffers", "Download", "server_stream"},
    {"gpucompute.v1.Compute", "StreamingCompute", "bidi_stream"},
    {"gpucompute.v1.Buffers", "Delete", "unary"},
    {"gpucompute.v1.Buffers", "List", "unary"},
    {"gpucompute.v1.Server", "GetInfo", "unary"},
    {"grpc.health.v1.Health", "Check", "unary"},
    {"grpc.health.v1.Health", "Watch", "server_stream"},
    {"gpucompute.v1.SharedMemory", "RegisterSystemSharedMemory", "unary"},
    {"gpucompute.v1.SharedMemory", "RegisterCudaSharedMemory", "unary"},
    {"gpucompute.v1.SharedMemory", "UnregisterSharedMemory", "unary"},
    {"gpucompute.v1.SharedMemory", "SharedMemoryStatus", "unary"},
    {"gpucompute.v1.Buffers", "UploadStatus", "unary"},
    {"gpucompute.v1.Compute", "Session", "bidi_stream"},
}};

// One health call: recorded when its status is sent, or as cancelled when it
// ends without one (a Watch the client walked away from).
class HealthRpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  HealthRpcInterceptor(Metrics& metrics, RpcMethod method, const grpc::ServerContextBase& context)
      : rpc_(metrics, method, context) {}
  ~HealthRpcInterceptor() override {
    if (!done_) rpc_.Done(grpc::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!done_ && methods->QueryInterceptionHookPoint(
                      grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      rpc_.Done(methods->GetSendStatus().error_code());
      done_ = true;
    }
    methods->Proceed();
  }

 private:
  RpcRecorder rpc_;
  bool done_ = false;
};

// 10 us to 60 s, roughly x2.5 per bucket.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
      25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
  return *buckets;
}

std::string S(absl::string_view v) { return std::string(v); }

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  return family;
}

void AddGauge(prometheus::MetricFamily& family, double value,
              std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
}

}  // namespace

// Gauges of live state, computed at each scrape from a snapshot callback.
class Metrics::LiveStateCollector final : public prometheus::Collectable {
 public:
  explicit LiveStateCollector(std::function<LiveState()> snapshot)
      : snapshot_(std::move(snapshot)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const LiveState state = snapshot_();
    auto reserved = GaugeFamily("gpucompute_device_pool_reserved_bytes",
                                "Bytes held by the device memory pool.");
    auto used = GaugeFamily("gpucompute_device_pool_used_bytes",
                            "Bytes of the device memory pool in live arrays.");
    auto queue = GaugeFamily("gpucompute_queue_depth",
                             "Operations running or waiting, per device; device=\"executor\" "
                             "counts admitted requests waiting for a thread.");
    for (const DeviceMemoryStats& device : state.backend.devices) {
      AddGauge(reserved, device.pool_reserved_bytes, {{"device", device.device}});
      AddGauge(used, device.pool_used_bytes, {{"device", device.device}});
      AddGauge(queue, device.queued_ops, {{"device", device.device}});
    }
    AddGauge(queue, state.queued_requests, {{"device", "executor"}});
    auto busy = GaugeFamily("gpucompute_executor_busy_threads",
                            "Executor threads running a task, per lane (lane=\"small\" are the "
                            "threads reserved for small requests).");
    AddGauge(busy, state.busy_general_threads, {{"lane", "general"}});
    AddGauge(busy, state.busy_small_lane_threads, {{"lane", "small"}});
    auto info = GaugeFamily("gpucompute_device_info", "Devices in use (value 1).");
    auto healthy = GaugeFamily("gpucompute_device_healthy", "1 when the device can serve.");
    for (const DeviceDescription& device : state.devices) {
      AddGauge(info, 1, {{"device", device.name}, {"name", device.description}});
      AddGauge(healthy, device.healthy ? 1 : 0, {{"device", device.name}});
    }
    auto buffers = GaugeFamily("gpucompute_stored_buffers", "Stored buffers.");
    AddGauge(buffers, state.stored_buffers);
    auto buffer_bytes =
        GaugeFamily("gpucompute_stored_buffer_bytes", "Bytes in stored buffers and reservations.");
    AddGauge(buffer_bytes, state.stored_buffer_bytes);
    auto regions = GaugeFamily("gpucompute_shared_memory_regions",
                               "Shared-memory regions registered by same-host clients.");
    AddGauge(regions, state.shared_memory_regions);
    auto region_bytes = GaugeFamily("gpucompute_shared_memory_bytes",
                                    "Bytes of the registered shared-memory regions.");
    AddGauge(region_bytes, state.shared_memory_bytes);
    auto pinned = GaugeFamily("gpucompute_pinned_pool_bytes", "Pinned host staging bytes.");
    AddGauge(pinned, state.backend.pinned_staging_bytes);
    auto kernels = GaugeFamily("gpucompute_kernels_loaded",
                               "Kernels loaded and run once before serving.");
    AddGauge(kernels, state.backend.kernels_loaded);
    auto warmup = GaugeFamily("gpucompute_warmup_duration_seconds",
                              "Time spent warming the backend at start-up.");
    AddGauge(warmup, absl::ToDoubleSeconds(state.backend.warmup_time));
    auto budget_used = GaugeFamily("gpucompute_memory_budget_used_bytes",
                                   "Bytes charged to the memory budget, per memory.");
    auto budget_capacity = GaugeFamily("gpucompute_memory_budget_capacity_bytes",
                                       "Capacity of the memory budget, per memory.");
    for (const MemoryBudgetStats& budget : state.backend.memory_budgets) {
      AddGauge(budget_used, budget.used_bytes, {{"memory", budget.memory}});
      AddGauge(budget_capacity, budget.capacity_bytes, {{"memory", budget.memory}});
    }
    return {std::move(reserved), std::move(used), std::move(queue), std::move(busy), std::move(info),
            std::move(healthy), std::move(buffers), std::move(buffer_bytes), std::move(regions),
            std::move(region_bytes), std::move(pinned),
            std::move(kernels), std::move(warmup), std::move(budget_used),
            std::move(budget_capacity)};
  }

 private:
  std::function<LiveState()> snapshot_;
};

Metrics::Metrics(const BuildInfo& build) : registry_(std::make_shared<prometheus::Registry>()) {
  auto& started = prometheus::BuildCounter()
                      .Name("grpc_server_started_total")
                      .Help("RPCs started on the server.")
                      .Register(*registry_);
  auto& handled = prometheus::BuildCounter()
                      .Name("grpc_server_handled_total")
                      .Help("RPCs completed on the server, by status code.")
                      .Register(*registry_);
  auto& handling = prometheus::BuildHistogram()
                       .Name("grpc_server_handling_seconds")
                       .Help("RPC handling time until the status is sent.")
                       .Register(*registry_);
  for (int m = 0; m < kRpcMethodCount; ++m) {
    const RpcName& rpc = kRpcNames[m];
    const prometheus::Labels labels = {
        {"grpc_service", S(rpc.service)}, {"grpc_method", S(rpc.method)}, {"grpc_type", S(rpc.type)}};
    rpc_started_[m] = &started.Add(labels);
    rpc_seconds_[m] = &handling.Add(labels, LatencyBuckets());
    rpc_handled_[m] = std::make_unique<CodeCounters>(handled, labels);
  }

  auto& requests = prometheus::BuildCounter()
                       .Name("gpucompute_requests_total")
                       .Help("Operation requests completed, by status code.")
                       .Register(*registry_);
  auto& request_seconds = prometheus::BuildHistogram()
                              .Name("gpucompute_request_duration_seconds")
                              .Help("Operation latency from acceptance to the last message.")
                              .Register(*registry_);
  auto& stage_seconds = prometheus::BuildHistogram()
                            .Name("gpucompute_stage_duration_seconds")
                            .Help("Time per stage of an operation.")
                            .Register(*registry_);
  auto& batch_size = prometheus::BuildHistogram()
                        .Name("gpucompute_batch_size")
                        .Help("Requests per launch of the dynamic batcher (1: alone).")
                        .Register(*registry_);
  auto& in_place = prometheus::BuildCounter()
                      .Name("gpucompute_in_place_requests_total")
                      .Help("Small requests run on the gRPC thread they came on, with no "
                            "executor hop (--in_place_work).")
                      .Register(*registry_);
  auto& in_flight = prometheus::BuildGauge()
                        .Name("gpucompute_requests_in_flight")
                        .Help("Operation requests accepted and not yet finished.")
                        .Register(*registry_);
  auto& first_request = prometheus::BuildGauge()
                            .Name("gpucompute_first_request_duration_seconds")
                            .Help("Latency of the first successful request of each operation.")
                            .Register(*registry_);
  for (int op = 0; op < kOperationCount; ++op) {
    const std::string label = S(OperationLabel(static_cast<Operation>(op)));
    requests_[op] = std::make_unique<CodeCounters>(requests, prometheus::Labels{{"operation", label}});
    request_seconds_[op] = &request_seconds.Add({{"operation", label}}, LatencyBuckets());
    for (int stage = 0; stage < kStageCount; ++stage) {
      stage_seconds_[op][stage] = &stage_seconds.Add(
          {{"operation", label}, {"stage", S(kStageLabels[stage])}}, LatencyBuckets());
    }
    batch_size_[op] = &batch_size.Add({{"operation", label}},
                                      prometheus::Histogram::BucketBoundaries{
                                          1, 2, 4, 8, 16, 32, 64, 128, 256});
    in_place_[op] = &in_place.Add({{"operation", label}});
    in_flight_[op] = &in_flight.Add({{"operation", label}});
    first_request_seconds_[op] = &first_request.Add({{"operation", label}});
  }

  auto& rejections = prometheus::BuildCounter()
                         .Name("gpucompute_rejections_total")
                         .Help("Requests refused before running, by reason.")
                         .Register(*registry_);
  for (int r = 0; r < kRejectionCount; ++r) {
    rejections_[r] = &rejections.Add({{"reason", S(kRejectionLabels[r])}});
  }

  auto& transfer_bytes = prometheus::BuildCounter()
                             .Name("gpucompute_transfer_bytes_total")
                             .Help("Bytes copied between host and backend memory.")
                             .Register(*registry_);
  auto& transfer_seconds = prometheus::BuildHistogram()
                               .Name("gpucompute_transfer_duration_seconds")
                               .Help("Duration of host<->backend copies.")
                               .Register(*registry_);
  // Bandwidth is rate(gpucompute_transfer_bytes_total) /
  // rate(gpucompute_transfer_duration_seconds_sum): over any window, from counters.
  for (int d = 0; d < 2; ++d) {
    const prometheus::Labels labels = {{"direction", S(kDirectionLabels[d])}};
    transfer_bytes_[d] = &transfer_bytes.Add(labels);
    transfer_seconds_[d] = &transfer_seconds.Add(labels, LatencyBuckets());
  }

  network_received_ = &prometheus::BuildCounter()
                           .Name("gpucompute_network_received_bytes_total")
                           .Help("Tensor bytes received from clients.")
                           .Register(*registry_)
                           .Add({});
  network_sent_ = &prometheus::BuildCounter()
                       .Name("gpucompute_network_sent_bytes_total")
                       .Help("Result bytes sent to clients.")
                       .Register(*registry_)
                       .Add({});

  prometheus::BuildGauge()
      .Name("gpucompute_build_info")
      .Help("Build and backend of this server (value 1).")
      .Register(*registry_)
      .Add({{"version", build.version},
            {"git_commit", build.git_commit},
            {"cuda_version", build.cuda_version},
            {"backend", build.backend}})
      .Set(1);
}

// CivetWeb's listening thread polls in 2 s quanta, and stopping it waits until it
// looks again: connections made meanwhile wake it, so that a server exits at once
// rather than up to 2 s later.
Metrics::~Metrics() {
  if (exposer_ == nullptr) return;
  const int port = this->port();
  const std::string host = exposer_host_ == "0.0.0.0" ? "127.0.0.1"
                           : exposer_host_ == "[::]" ? "[::1]"
                                                     : exposer_host_;
  absl::Notification stopped;
  std::thread waker([&] {
    do {
      WakeListener(host, port);
    } while (!stopped.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  });
  exposer_.reset();
  stopped.Notify();
  waker.join();
}

absl::Status Metrics::StartExposer(const std::string& address,
                                   const std::string& basic_auth_file,
                                   std::function<LiveState()> live_state) {
  if (address.empty()) return absl::OkStatus();
  absl::flat_hash_map<std::string, std::string> users;
  if (!basic_auth_file.empty()) {
    GC_ASSIGN_OR_RETURN(users, ReadHashFile(basic_auth_file, "--metrics_basic_auth_file"));
  }
  // CivetWeb binds numeric addresses only.
  std::string bind = absl::StrReplaceAll(address, {{"localhost:", "127.0.0.1:"}});
  exposer_host_ = bind.substr(0, bind.rfind(':'));
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", bind, "num_threads", absl::StrCat(kExposerThreads),
        "request_timeout_ms", absl::StrCat(absl::ToInt64Milliseconds(kExposerRequestTimeout)),
        "enable_keep_alive", "no"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics_address ", address, " cannot be served: ", e.what()));
  }
  live_collector_ = std::make_shared<LiveStateCollector>(std::move(live_state));
  if (!users.empty()) {
    exposer_->RegisterAuth(
        [users = std::move(users)](const std::string& user, const std::string& password) {
          auto it = users.find(user);
          return it != users.end() && it->second == Sha256Hex(password);
        },
        "gpucompute metrics");
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(live_collector_);
  return absl::OkStatus();
}

int Metrics::port() const {
  if (exposer_ == nullptr) return 0;
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

grpc::StatusCode OutcomeCode(grpc::StatusCode code, absl::Time start, absl::Time deadline) {
  if (code != grpc::CANCELLED || deadline == absl::InfiniteFuture()) return code;
  // The server's deadline is the client's plus the time the request headers took to
  // arrive, and the client cancels at its own deadline: that cancellation reaches us
  // before our deadline. Count a cancellation as the deadline when it comes in the last
  // quarter of the call's time (at least the last 100 ms).
  const absl::Duration slack = std::max(absl::Milliseconds(100), (deadline - start) / 4);
  return absl::Now() >= deadline - slack ? grpc::DEADLINE_EXCEEDED : code;
}

grpc::experimental::Interceptor* HealthRpcCounter::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const absl::string_view method = info->method();
  RpcMethod rpc;
  if (method == "/grpc.health.v1.Health/Check") {
    rpc = RpcMethod::kHealthCheck;
  } else if (method == "/grpc.health.v1.Health/Watch") {
    rpc = RpcMethod::kHealthWatch;
  } else {
    return nullptr;
  }
  return new HealthRpcInterceptor(metrics_, rpc, *info->server_context());
}

void Metrics::RpcStarted(RpcMethod method) { rpc_started_[static_cast<int>(method)]->Increment(); }

void Metrics::RpcHandled(RpcMethod method, grpc::StatusCode code, absl::Duration elapsed) {
  const int m = static_cast<int>(method);
  rpc_handled_[m]->Increment(code);
  rpc_seconds_[m]->Observe(absl::ToDoubleSeconds(elapsed));
}

void Metrics::RequestDone(Operation op, grpc::StatusCode code, absl::Duration total) {
  const int o = static_cast<int>(op);
  requests_[o]->Increment(code);
  request_seconds_[o]->Observe(absl::ToDoubleSeconds(total));
  if (code == grpc::OK && !first_request_seen_[o].exchange(true)) {
    first_request_seconds_[o]->Set(absl::ToDoubleSeconds(total));
  }
}

void Metrics::ObserveStage(Operation op, Stage stage, absl::Duration elapsed) {
  stage_seconds_[static_cast<int>(op)][static_cast<int>(stage)]->Observe(
      absl::ToDoubleSeconds(elapsed));
}

void Metrics::ObserveBatch(Operation op, int size) {
  batch_size_[static_cast<int>(op)]->Observe(size);
}

void Metrics::RanInPlace(Operation op) { in_place_[static_cast<int>(op)]->Increment(); }

void Metrics::AddInFlight(Operation op, double delta) {
  in_flight_[static_cast<int>(op)]->Increment(delta);
}

void Metrics::Rejected(Rejection reason) { rejections_[static_cast<int>(reason)]->Increment(); }

void Metrics::Transferred(Direction direction, uint64_t bytes, absl::Duration elapsed) {
  const int d = static_cast<int>(direction);
  transfer_bytes_[d]->Increment(static_cast<double>(bytes));
  const double seconds = absl::ToDoubleSeconds(elapsed);
  transfer_seconds_[d]->Observe(seconds);
}

CodeCounters::CodeCounters(prometheus::Family<prometheus::Counter>& family,
                           prometheus::Labels labels)
    : family_(family), labels_(std::move(labels)) {
  // The codes any call can end with are series from the start: rate() misses a
  // counter's first increment when its series appears already at 1. Codes only a few
  // calls can return appear on first use.
  for (grpc::StatusCode code : {grpc::OK, grpc::CANCELLED, grpc::INVALID_ARGUMENT,
                                grpc::DEADLINE_EXCEEDED, grpc::NOT_FOUND,
                                grpc::RESOURCE_EXHAUSTED, grpc::FAILED_PRECONDITION,
                                grpc::INTERNAL, grpc::UNAVAILABLE}) {
    Get(code);
  }
}

void CodeCounters::Increment(grpc::StatusCode code) { Get(code).Increment(); }

prometheus::Counter& CodeCounters::Get(grpc::StatusCode code) {
  const int c = (code >= 0 && code < kCodes) ? code : grpc::UNKNOWN;
  prometheus::Counter* counter = counters_[c].load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add is thread-safe and returns the child its labels already have,
    // so two threads racing here store the same pointer.
    prometheus::Labels labels = labels_;
    labels["grpc_code"] = S(GrpcCodeName(static_cast<grpc::StatusCode>(c)));
    counter = &family_.Add(labels);
    counters_[c].store(counter, std::memory_order_release);
  }
  return *counter;
}

void Metrics::NetworkReceived(uint64_t bytes) { network_received_->Increment(bytes); }
void Metrics::NetworkSent(uint64_t bytes) { network_sent_->Increment(bytes); }

}  // namespace gpucompute
