// Faults: device memory exhaustion and a sticky device error injected through
// the backend seam, clients vanishing mid-upload and mid-download, expired
// deadlines, draining under load; the real server process exiting 0 on SIGTERM and
// 3 when its last device fails.
#include <signal.h>

#include <atomic>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing/fault_injection.h"
#include "server/server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/faulty_server.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/server_process.h"
#include "tests/testing/tensors.h"

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
  std::vector<double> freqs(20000);
  for (size_t i = 0; i < freqs.size(); ++i) freqs[i] = 0.01 + 1e-3 * i * i / 7.0;  // uneven
  v1::LombScargleRequest request;
  *request.mutable_x() = test::Operand(test::F64(x, {4096}));
  *request.mutable_y() = test::Operand(test::F64(y, {4096}));
  *request.mutable_freqs() = test::Operand(test::F64(freqs, {static_cast<int64_t>(freqs.size())}));
  return request;
}

v1::NormalizeRequest NormalizeOf(int64_t n) {
  v1::NormalizeRequest request;
  *request.mutable_input() = test::Operand(test::F64(std::vector<double>(n, 2.0), {n}));
  return request;
}

using test::Eventually;

// Whether the server on `metrics_port` holds `n` LombScargle requests (accepted, not
// finished), by its in-flight gauge: tests that need a request in flight wait for it
// rather than sleep, which a loaded machine outruns.
bool LombScargleInFlight(int metrics_port, int n) {
  return test::MetricsShow(metrics_port, R"(gpucompute_requests_in_flight{operation="lombscargle"})", n);
}

class FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(test::LoopbackConfig()); }

  void Start(ServerConfig config) {
    config.grace_period = absl::Seconds(5);
    server_.reset();
    auto server = test::StartWithFaults(config, faults_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    client_ = &server_->client();
  }

  uint64_t PoolUsed() const { return server_->PoolUsedBytes(); }
  // For a server started with WithMetrics (as the queue gauge below).
  bool InFlight(int n) const { return LombScargleInFlight(server_->server().metrics_port(), n); }
  static ServerConfig WithMetrics(ServerConfig config) {
    config.metrics_address = "127.0.0.1:0";  // only where read: its exposer adds ~2 s to a stop
    return config;
  }

  // A real CPU backend with the faults a GPU can have, switched on by the tests.
  std::shared_ptr<InjectedFaults> faults_ = std::make_shared<InjectedFaults>();
  std::unique_ptr<test::TestServer> server_;
  client::Client* client_ = nullptr;
};

TEST_F(FaultsTest, DeviceMemoryExhaustionIsResourceExhaustedThenRecovers) {
  faults_->failing_allocations = 1;
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
  faults_->sticky_error = true;
  const absl::Status failed = client_->Normalize(NormalizeOf(16)).status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.message()), HasSubstr("sticky"));
  EXPECT_TRUE(Eventually([&] { return *client_->Health() == HealthStatus::NOT_SERVING; }));
  EXPECT_FALSE(server_->server().BackendHealthy());
}

TEST_F(FaultsTest, DisconnectMidUploadStoresNothingAndFreesMemory) {
  grpc::ClientContext context;
  v1::BufferInfo info;
  auto writer = server_->buffers().Upload(&context, &info);
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
    grpc::ClientContext context;
    v1::DownloadRequest request;
    request.set_buffer_id(stored->id());
    request.set_chunk_bytes(4096);
    auto reader = server_->buffers().Download(&context, request);
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
  ServerConfig config = WithMetrics(test::LoopbackConfig());
  config.executor_threads = 1;
  Start(config);
  auto slow = std::async(std::launch::async, [&] { return client_->LombScargle(SlowRequest()); });
  ASSERT_TRUE(Eventually([&] { return InFlight(1); }));  // ahead of the next on the one thread
  client::ClientOptions options;
  options.timeout = absl::Milliseconds(20);
  client::Client hurried(server_->channel(), options);
  EXPECT_EQ(hurried.Normalize(NormalizeOf(8)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(slow.get().ok());
  ASSERT_TRUE(client_->Normalize(NormalizeOf(8)).ok());
}

TEST_F(FaultsTest, DrainFinishesInFlightWorkAndRefusesNewWork) {
  Start(WithMetrics(test::LoopbackConfig()));
  std::vector<std::future<absl::StatusOr<client::Result>>> in_flight;
  for (int i = 0; i < 3; ++i) {
    in_flight.push_back(
        std::async(std::launch::async, [&] { return client_->LombScargle(SlowRequest()); }));
  }
  ASSERT_TRUE(Eventually([&] { return InFlight(3); }));
  auto drained = std::async(std::launch::async, [&] { server_->server().Drain(absl::Seconds(120)); });
  // A fresh channel: the draining server accepts no new connections or calls.
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<HealthStatus::ServingStatus> health = client_->Health();
    return !health.ok() || *health != HealthStatus::SERVING;
  }));
  client::ClientOptions options;
  options.timeout = absl::Seconds(2);
  client::Client late(client::MakeChannel(server_->target()), options);
  const absl::Status refused = late.Normalize(NormalizeOf(8)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused.message();
  for (auto& request : in_flight) {
    auto result = request.get();
    EXPECT_TRUE(result.ok()) << result.status().message();
  }
  drained.get();
}

// Each admission limit, hit over the wire while requests stuck on a paused (hung)
// device hold the slots: RESOURCE_EXHAUSTED naming the flag, then the server serves
// again once the device resumes.
TEST_F(FaultsTest, OverloadIsResourceExhaustedNamingTheLimit) {
  struct Case {
    const char* limit;
    void (*configure)(ServerConfig&);
    int held_requests;
  };
  const Case cases[] = {
      {"max_in_flight 1", [](ServerConfig& c) { c.max_in_flight = 1; }, 1},
      {"max_in_flight_per_connection 1", [](ServerConfig& c) { c.max_in_flight_per_connection = 1; }, 1},
      {"max_device_queue_depth 1",
       [](ServerConfig& c) {
         c.executor_threads = 4;
         c.max_device_queue_depth = 1;
       },
       1},
      {"max_queue_depth 1",
       [](ServerConfig& c) {
         c.executor_threads = 1;
         c.max_queue_depth = 1;
       },
       2},  // one on the device, one waiting for the executor thread
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.limit);
    ServerConfig config = c.held_requests > 1 ? WithMetrics(test::LoopbackConfig()) : test::LoopbackConfig();
    c.configure(config);
    Start(config);
    faults_->PauseOperations();
    std::vector<std::future<absl::StatusOr<client::Result>>> held;
    held.push_back(std::async(std::launch::async, [&] { return client_->Normalize(NormalizeOf(8)); }));
    ASSERT_TRUE(Eventually([&] { return faults_->PausedOperations() == 1; }));
    for (int i = 1; i < c.held_requests; ++i) {
      held.push_back(std::async(std::launch::async, [&] { return client_->Normalize(NormalizeOf(8)); }));
      // It is admitted: the executor's depth gauge counts it with the held ones.
      const int port = server_->server().metrics_port();
      EXPECT_TRUE(Eventually([&] {  // not ASSERT: the held requests finish once resumed
        return test::MetricsShow(port, R"(gpucompute_queue_depth{device="executor"})", i + 1);
      })) << test::ScrapeMetricsBody(port);
    }
    const absl::Status refused = client_->Normalize(NormalizeOf(8)).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused.message();
    EXPECT_THAT(std::string(refused.message()), HasSubstr(c.limit));
    faults_->ResumeOperations();
    for (auto& request : held) {
      auto result = request.get();
      EXPECT_TRUE(result.ok()) << result.status().message();
    }
    auto served = client_->Normalize(NormalizeOf(8));
    EXPECT_TRUE(served.ok()) << served.status().message();
  }
}

// SIGTERM under load finishes the in-flight request and exits 0.
TEST(ServerProcessTest, SigtermDrainsAndExitsZero) {
  // Generous grace: under sanitizers on a small machine the request takes many seconds.
  test::ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                             test::LoopbackCpuFlags({"--grace_period=120s", "--metrics_address=127.0.0.1:0"}));
  const test::ServerProcess::Ports ports = server.WaitUntilServing();
  ASSERT_GT(ports.grpc, 0) << "server did not start: " << server.output();
  ASSERT_GT(ports.metrics, 0) << server.output();
  client::Client patient(client::MakeChannel(absl::StrCat("127.0.0.1:", ports.grpc)));
  auto running = std::async(std::launch::async,
                            [&] { return patient.LombScargle(SlowRequest()); });
  // The signal once the server holds the request: a fixed sleep (200 ms) let a loaded
  // CI machine signal before the call arrived, whose connection the drain then reset.
  ASSERT_TRUE(Eventually([&] { return LombScargleInFlight(ports.metrics, 1); })) << server.output();
  server.Signal(SIGTERM);
  auto result = running.get();
  EXPECT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(server.WaitForExit(absl::Seconds(150)), 0) << server.output();
}

// The last device failing for good (an injected sticky error after one operation):
// the request that hit it fails, health stops reporting SERVING, and the process
// drains and exits with status 3 on its own so that a supervisor restarts it.
TEST(ServerProcessTest, StickyErrorDrainsAndExitsThree) {
  test::ServerProcess server(
      GPUCOMPUTE_SERVER_PATH,
      test::LoopbackCpuFlags({"--inject_sticky_error_after=1", "--grace_period=5s"}));
  const int port = server.WaitUntilServing().grpc;
  ASSERT_GT(port, 0) << "server did not start: " << server.output();
  client::ClientOptions options;
  options.timeout = absl::Seconds(2);
  client::Client c(client::MakeChannel(absl::StrCat("127.0.0.1:", port)), options);
  auto first = c.Normalize(NormalizeOf(16));
  ASSERT_TRUE(first.ok()) << first.status().message();
  const absl::Status failed = c.Normalize(NormalizeOf(16)).status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed.message();
  EXPECT_THAT(std::string(failed.message()), HasSubstr("sticky"));
  // NOT_SERVING while it drains, or no answer once it is gone: never SERVING again.
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<HealthStatus::ServingStatus> health = c.Health();
    return !health.ok() || *health != HealthStatus::SERVING;
  }));
  EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 3) << server.output();
}

}  // namespace
}  // namespace gpucompute
