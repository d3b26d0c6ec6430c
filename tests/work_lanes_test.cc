// Head-of-line blocking and oversized work, over the wire: long Lomb-Scargle
// calls holding every general executor thread (and one more waiting) do not
// delay a tiny Normalize, which takes the reserved small-request lane; a full
// general queue (long calls, an Upload's allocation) does not refuse it either;
// a request over --max_work_per_request is refused naming it, and counted.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

// samples x frequencies pairs of work on a frequency grid.
v1::LombScargleRequest Periodogram(int samples, uint64_t frequencies) {
  std::vector<double> x(samples), y(samples);
  for (int i = 0; i < samples; ++i) {
    x[i] = 0.37 * i;
    y[i] = (i % 7) * 0.5;
  }
  v1::LombScargleRequest request;
  *request.mutable_x() = test::Operand(test::F64(x, {samples}));
  *request.mutable_y() = test::Operand(test::F64(y, {samples}));
  request.mutable_freq_grid()->set_start(0.01);
  request.mutable_freq_grid()->set_stop(3.0);
  request.mutable_freq_grid()->set_count(frequencies);
  return request;
}

// A streaming call that runs until it ends or is cancelled; `finished` is set then.
// Going away cancels it, so that a failed assertion does not leave it running.
struct LongCall {
  ~LongCall() {
    context.TryCancel();
    if (reader.joinable()) reader.join();
  }
  grpc::ClientContext context;
  std::atomic<bool> finished{false};
  std::thread reader;
};

class WorkLanesTest : public ::testing::Test {
 protected:
  void Start(const ServerConfig& config) {
    auto server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }
  std::string Scrape() { return test::ScrapeMetrics(server_->server().metrics_port()); }

  // A call of `request`, read on a thread of its own until it ends.
  std::unique_ptr<LongCall> StartLongCall(const v1::LombScargleRequest& request) {
    auto call = std::make_unique<LongCall>();
    LongCall* raw = call.get();
    call->reader = std::thread([this, raw, &request] {
      auto reader = server_->compute().LombScargle(&raw->context, request);
      v1::ResultChunk chunk;
      while (reader->Read(&chunk)) {
      }
      reader->Finish();
      raw->finished = true;
    });
    return call;
  }
  std::vector<std::unique_ptr<LongCall>> StartLongCalls(const v1::LombScargleRequest& request,
                                                        int count) {
    std::vector<std::unique_ptr<LongCall>> calls;
    for (int i = 0; i < count; ++i) calls.push_back(StartLongCall(request));
    return calls;
  }

  // Whether the metrics read `value` for `series` within 30 s.
  bool AwaitMetric(const std::string& series, int value) {
    return test::Eventually(
        [&] { return test::MetricsShow(server_->server().metrics_port(), series, value); },
        std::chrono::seconds(30));
  }
  bool AwaitExecutorQueueDepth(int depth) {
    return AwaitMetric(R"(gpucompute_queue_depth{device="executor"})", depth);
  }

  std::unique_ptr<test::TestServer> server_;
};

TEST_F(WorkLanesTest, ASmallRequestRunsWhileLongOnesHoldEveryGeneralThread) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.executor_threads = 3;
  config.small_request_threads = 1;
  Start(config);

  // 10^11 pairs each: minutes on a CPU. As many as there are executor threads,
  // so that without a reserved lane no thread would be left for the Normalize.
  const v1::LombScargleRequest long_request = Periodogram(100000, 1000000);
  const auto long_calls = StartLongCalls(long_request, config.executor_threads);
  // Two run on the general threads, the third waits for one of them.
  ASSERT_TRUE(AwaitExecutorQueueDepth(1));

  client::ClientOptions options;
  options.timeout = absl::Seconds(30);
  client::Client small(server_->channel(), options);
  const absl::Time asked = absl::Now();
  v1::NormalizeRequest tiny;
  *tiny.mutable_input() = test::Operand(test::F64({3.0, 4.0, 6.0, 8.0}, {2, 2}));
  auto normalized = small.Normalize(tiny);
  const absl::Duration took = absl::Now() - asked;
  ASSERT_TRUE(normalized.ok()) << normalized.status().message();
  test::ExpectNear(test::Values(*normalized), {3.0 / 7, 4.0 / 7, 3.0 / 7, 4.0 / 7}, 1e-12, 0);  // L1 rows
  for (const auto& call : long_calls) EXPECT_FALSE(call->finished.load());
  EXPECT_LT(took, absl::Seconds(10));

  for (const auto& call : long_calls) call->context.TryCancel();
}

TEST_F(WorkLanesTest, AFullGeneralQueueDoesNotRefuseSmallRequests) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.executor_threads = 2;
  config.small_request_threads = 1;
  config.max_queue_depth = 2;
  config.max_small_queue_depth = 2;
  Start(config);

  // One long call runs on the general thread, two wait: the general queue is full.
  // Started one at a time, each seen in place before the next: calls arriving
  // together could all be queued before the thread takes the first, and the
  // third would rightly be refused.
  const v1::LombScargleRequest long_request = Periodogram(100000, 1000000);
  std::vector<std::unique_ptr<LongCall>> long_calls;
  long_calls.push_back(StartLongCall(long_request));
  ASSERT_TRUE(AwaitMetric(R"(gpucompute_executor_busy_threads{lane="general"})", 1));
  for (int waiting = 1; waiting <= 2; ++waiting) {
    long_calls.push_back(StartLongCall(long_request));
    ASSERT_TRUE(AwaitExecutorQueueDepth(waiting));
  }

  // Another long call and an Upload's allocation are refused by the general queue...
  grpc::ClientContext refused_context;
  auto refused_reader = server_->compute().LombScargle(&refused_context, long_request);
  v1::ResultChunk chunk;
  while (refused_reader->Read(&chunk)) {
  }
  const grpc::Status refused = refused_reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("(max_queue_depth 2)"));
  grpc::ClientContext upload_context;
  v1::BufferInfo uploaded;
  auto upload = server_->buffers().Upload(&upload_context, &uploaded);
  v1::UploadRequest header;
  header.mutable_header()->set_dtype(v1::FLOAT64);
  header.mutable_header()->add_shape(4);
  upload->Write(header);
  upload->WritesDone();
  const grpc::Status upload_status = upload->Finish();
  EXPECT_EQ(upload_status.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_THAT(upload_status.error_message(), HasSubstr("(max_queue_depth 2)"));

  // ...while small requests, queued apart, are admitted and served.
  for (int i = 0; i < 3; ++i) {
    v1::NormalizeRequest tiny;
    *tiny.mutable_input() = test::Operand(test::F64({3.0, 4.0, 6.0, 8.0}, {2, 2}));
    auto normalized = server_->client().Normalize(tiny);
    ASSERT_TRUE(normalized.ok()) << normalized.status().message();
    test::ExpectNear(test::Values(*normalized), {3.0 / 7, 4.0 / 7, 3.0 / 7, 4.0 / 7}, 1e-12, 0);
  }
  for (const auto& call : long_calls) EXPECT_FALSE(call->finished.load());

  for (const auto& call : long_calls) call->context.TryCancel();
}

TEST_F(WorkLanesTest, WorkOverTheLimitIsRefusedNamingTheFlagAndCounted) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.max_work_per_request = 1000;
  Start(config);
  grpc::ClientContext context;
  auto reader = server_->compute().LombScargle(&context, Periodogram(100, 100));
  v1::ResultChunk chunk;
  while (reader->Read(&chunk)) {
  }
  const grpc::Status refused = reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("needs 10000 work units"));
  EXPECT_THAT(refused.error_message(), HasSubstr("(max_work_per_request)"));
  EXPECT_THAT(Scrape(), HasSubstr("gpucompute_rejections_total{reason=\"work_limit\"} 1"));
  // Within the limit it runs.
  EXPECT_TRUE(server_->client().LombScargle(Periodogram(10, 100)).ok());
}

}  // namespace
}  // namespace gpucompute
