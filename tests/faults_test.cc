// Faults: device memory exhaustion and a sticky device error injected through
// the backend seam, clients vanishing mid-upload and mid-download, expired
// deadlines, draining under load, and SIGTERM to the real server process.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/server.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using HealthStatus = grpc::health::v1::HealthCheckResponse;

// A Lomb-Scargle request that keeps a CPU thread busy for a while.
v1::LombScargleRequest SlowRequest() {
  std::vector<double> x(4096), y(4096);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.37 * i;
    y[i] = std::sin(x[i]);
  }
  const std::vector<int64_t> shape = {4096};
  v1::LombScargleRequest request;
  *request.mutable_x()->mutable_tensor() = *client::MakeTensor(std::span<const double>(x), shape);
  *request.mutable_y()->mutable_tensor() = *client::MakeTensor(std::span<const double>(y), shape);
  std::vector<double> freqs(20000);
  for (size_t i = 0; i < freqs.size(); ++i) freqs[i] = 0.01 + 1e-3 * i * i / 7.0;  // uneven
  const std::vector<int64_t> fshape = {static_cast<int64_t>(freqs.size())};
  *request.mutable_freqs()->mutable_tensor() =
      *client::MakeTensor(std::span<const double>(freqs), fshape);
  return request;
}

// A real CPU backend with switches for the faults a GPU can have.
class FaultInjectingBackend final : public Backend {
 public:
  explicit FaultInjectingBackend(std::atomic<int>* failing_allocations,
                                 std::atomic<bool>* sticky_error)
      : inner_(CreateCpuBackend(2)),
        failing_allocations_(failing_allocations),
        sticky_error_(sticky_error) {}

  absl::string_view name() const override { return inner_->name(); }
  std::vector<DeviceDescription> Devices() const override {
    std::vector<DeviceDescription> devices = inner_->Devices();
    for (DeviceDescription& d : devices) d.healthy = Healthy();
    return devices;
  }
  bool Healthy() const override { return !sticky_error_->load(); }
  int PickDevice() override { return inner_->PickDevice(); }
  BackendStats Stats() const override { return inner_->Stats(); }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    if (failing_allocations_->fetch_sub(1) > 0) {
      return absl::ResourceExhaustedError("injected: device cpu has no room for the array");
    }
    failing_allocations_->store(0);
    return inner_->Allocate(dtype, std::move(shape), device);
  }
  absl::Status CopyToArray(const void* src, size_t offset, size_t bytes, Array& dst) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->CopyToArray(src, offset, bytes, dst);
  }
  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes, void* dst) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->CopyFromArray(src, offset, bytes, dst);
  }
  absl::Status CopyArray(const Array& src, Array& dst) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->CopyArray(src, dst);
  }
  absl::Status DiscountProduct(const Array& f, const Array& v, Array& out, OpContext& ctx) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->DiscountProduct(f, v, out, ctx);
  }
  absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs, double radius,
                             Array& out, OpContext& ctx) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->HaversineMesh(mesh, refs, radius, out, ctx);
  }
  absl::Status HaversinePoints(const Array& lat, const Array& lon, std::span<const GeoPoint> refs,
                               double radius, Array& out, OpContext& ctx) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->HaversinePoints(lat, lon, refs, radius, out, ctx);
  }
  absl::Status Normalize(const Array& in, NormKind norm, Array& out, OpContext& ctx) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->Normalize(in, norm, out, ctx);
  }
  absl::Status LombScargle(const Array& x, const Array& y, const Array* weights,
                           const Array* freqs, const Linspace& grid,
                           const LombScargleOptions& options, Array& out,
                           OpContext& ctx) override {
    if (absl::Status s = Sticky(); !s.ok()) return s;
    return inner_->LombScargle(x, y, weights, freqs, grid, options, out, ctx);
  }

 private:
  absl::Status Sticky() const {
    if (sticky_error_->load()) {
      return absl::InternalError("injected: an illegal memory access was encountered (sticky)");
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Backend> inner_;
  std::atomic<int>* failing_allocations_;
  std::atomic<bool>* sticky_error_;
};

class FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ServerConfig{}); }

  void Start(ServerConfig config) {
    config.address = "127.0.0.1:0";
    config.metrics_address = "";
    config.grace_period = absl::Seconds(5);
    server_.reset();
    auto server = GpuComputeServer::Start(
        config, BackendSelection{std::make_unique<FaultInjectingBackend>(&failing_allocations_,
                                                                         &sticky_error_),
                                 "cpu: fault injection"});
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    channel_ = client::MakeChannel(absl::StrCat("127.0.0.1:", server_->port()));
    client_ = std::make_unique<client::Client>(channel_);
  }

  static v1::NormalizeRequest NormalizeOf(int64_t n) {
    std::vector<double> values(n, 2.0);
    const std::vector<int64_t> shape = {n};
    v1::NormalizeRequest request;
    *request.mutable_input()->mutable_tensor() =
        *client::MakeTensor(std::span<const double>(values), shape);
    return request;
  }

  uint64_t PoolUsed() const { return server_->backend_stats().devices.at(0).pool_used_bytes; }

  // Polls until `condition` holds or 10 s pass.
  template <typename Condition>
  static bool Eventually(Condition condition) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  std::atomic<int> failing_allocations_{0};
  std::atomic<bool> sticky_error_{false};
  std::unique_ptr<GpuComputeServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<client::Client> client_;
};

TEST_F(FaultsTest, DeviceMemoryExhaustionIsResourceExhaustedThenRecovers) {
  failing_allocations_ = 1;
  const absl::Status full = client_->Normalize(NormalizeOf(16)).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("no room"));
  auto recovered = client_->Normalize(NormalizeOf(16));
  ASSERT_TRUE(recovered.ok()) << recovered.status().message();
  EXPECT_EQ(*client_->Health(), HealthStatus::SERVING);
  EXPECT_EQ(PoolUsed(), 0u);
}

TEST_F(FaultsTest, StickyErrorTurnsHealthNotServing) {
  ASSERT_TRUE(client_->Normalize(NormalizeOf(16)).ok());
  sticky_error_ = true;
  const absl::Status failed = client_->Normalize(NormalizeOf(16)).status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.message()), HasSubstr("sticky"));
  EXPECT_TRUE(Eventually([&] { return *client_->Health() == HealthStatus::NOT_SERVING; }));
  EXPECT_FALSE(server_->BackendHealthy());
}

TEST_F(FaultsTest, DisconnectMidUploadStoresNothingAndFreesMemory) {
  auto stub = v1::Buffers::NewStub(channel_);
  grpc::ClientContext context;
  v1::BufferInfo info;
  auto writer = stub->Upload(&context, &info);
  v1::UploadRequest header;
  header.mutable_header()->set_name("half");
  header.mutable_header()->set_dtype(v1::FLOAT64);
  header.mutable_header()->add_shape(1 << 20);
  ASSERT_TRUE(writer->Write(header));
  v1::UploadRequest data;
  data.set_data(std::string(1 << 20, 'x'));
  ASSERT_TRUE(writer->Write(data));
  ASSERT_TRUE(Eventually([&] { return PoolUsed() > 0; }));
  context.TryCancel();
  EXPECT_EQ(writer->Finish().error_code(), grpc::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return PoolUsed() == 0; }));
  auto listed = client_->List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->buffers_size(), 0);
  EXPECT_EQ(listed->used_bytes(), 0u);
}

TEST_F(FaultsTest, DisconnectMidDownloadKeepsTheBufferIntact) {
  const std::string payload = [] {
    std::string s(1 << 21, '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 31 + 7);
    return s;
  }();
  const std::vector<int64_t> shape = {static_cast<int64_t>(payload.size() / 8)};
  auto stored = client_->Upload("keep", v1::FLOAT64, shape, payload);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  {
    auto stub = v1::Buffers::NewStub(channel_);
    grpc::ClientContext context;
    v1::DownloadRequest request;
    request.set_buffer_id(stored->id());
    request.set_chunk_bytes(4096);
    auto reader = stub->Download(&context, request);
    v1::ResultChunk chunk;
    ASSERT_TRUE(reader->Read(&chunk));
    ASSERT_TRUE(reader->Read(&chunk));
    context.TryCancel();
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
  }
  auto again = client_->Download(stored->id());
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->data, payload);
}

TEST_F(FaultsTest, ExpiredDeadlinesAreDroppedAndTheServerKeepsServing) {
  ServerConfig config;
  config.executor_threads = 1;
  Start(config);
  auto slow = std::async(std::launch::async, [&] { return client_->LombScargle(SlowRequest()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the one thread is now busy
  client::ClientOptions options;
  options.timeout = absl::Milliseconds(20);
  client::Client hurried(channel_, options);
  EXPECT_EQ(hurried.Normalize(NormalizeOf(8)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(slow.get().ok());
  ASSERT_TRUE(client_->Normalize(NormalizeOf(8)).ok());
}

TEST_F(FaultsTest, DrainFinishesInFlightWorkAndRefusesNewWork) {
  std::vector<std::future<absl::StatusOr<client::Result>>> in_flight;
  for (int i = 0; i < 3; ++i) {
    in_flight.push_back(
        std::async(std::launch::async, [&] { return client_->LombScargle(SlowRequest()); }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto drained = std::async(std::launch::async, [&] { server_->Drain(absl::Seconds(30)); });
  // A fresh channel: the draining server accepts no new connections or calls.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  client::ClientOptions options;
  options.timeout = absl::Seconds(2);
  client::Client late(client::MakeChannel(absl::StrCat("127.0.0.1:", server_->port())), options);
  const absl::Status refused = late.Normalize(NormalizeOf(8)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused.message();
  for (auto& request : in_flight) {
    auto result = request.get();
    EXPECT_TRUE(result.ok()) << result.status().message();
  }
  drained.get();
}

// The real binary: SIGTERM under load finishes the in-flight request and exits 0.
TEST(ServerProcessTest, SigtermDrainsAndExitsZero) {
  const int port = 20000 + getpid() % 20000;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string address = absl::StrCat("--address=127.0.0.1:", port);
    execl(GPUCOMPUTE_SERVER_PATH, GPUCOMPUTE_SERVER_PATH, address.c_str(), "--metrics_address=",
          "--backend=cpu", "--grace_period=20s", static_cast<char*>(nullptr));
    _exit(127);
  }
  client::ClientOptions options;
  options.timeout = absl::Seconds(1);
  client::Client c(client::MakeChannel(absl::StrCat("127.0.0.1:", port)), options);
  const auto start = std::chrono::steady_clock::now();
  while (!c.Health().ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(c.Health().ok()) << "server did not start";
  client::Client patient(client::MakeChannel(absl::StrCat("127.0.0.1:", port)));
  auto running = std::async(std::launch::async,
                            [&] { return patient.LombScargle(SlowRequest()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pid, SIGTERM);
  auto result = running.get();
  EXPECT_TRUE(result.ok()) << result.status().message();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace gpucompute
