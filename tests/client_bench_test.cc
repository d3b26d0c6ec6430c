// gpucompute-cli bench's load loop against an in-process server (CPU backend): a
// count of requests in flight as threads on the blocking API, as slots on the
// callback API (BenchConfig::callbacks) and as those slots' requests on one
// Compute.Session per connection (BenchConfig::session) all come back, counted once
// each, with their bytes, also spread over several connections; refused requests are
// counted by code; the callback forms refuse what they cannot read (streamed results,
// health checks).
#include <memory>
#include <vector>

#include "client/bench.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute {
namespace {

using client::BenchConfig;
using client::BenchOp;
using client::BenchReport;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

enum class Form { kThreads, kCallbacks, kSession };

class BenchTest : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override {
    auto server = test::TestServer::Start(test::LoopbackConfig());
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }

  // 64 requests of three operations, 8 in flight, in the form the test names.
  BenchConfig Counted() const {
    BenchConfig config;
    config.concurrency = 8;
    config.duration = absl::InfiniteDuration();
    config.count = 64;
    config.size = 1024;
    config.mix = {{BenchOp::kNormalize, 1}, {BenchOp::kDiscount, 1}, {BenchOp::kHaversine, 1}};
    config.callbacks = GetParam() != Form::kThreads;
    config.session = GetParam() == Form::kSession;
    config.sessions_per_connection = 2;  // the slots spread over two sessions a connection
    return config;
  }

  std::unique_ptr<test::TestServer> server_;
};

TEST_P(BenchTest, EveryCountedRequestComesBackOnce) {
  absl::StatusOr<BenchReport> report = client::RunBench(server_->client(), Counted());
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->requests, 64u);
  EXPECT_EQ(report->succeeded, 64u);
  EXPECT_THAT(report->errors_by_code, IsEmpty());
  EXPECT_EQ(report->result_bytes, 64u * 1024 * sizeof(float));
  EXPECT_EQ(report->latency.count, 64u);
  uint64_t by_op = 0;
  for (const auto& [op, summary] : report->latency_by_op) by_op += summary.count;
  EXPECT_EQ(by_op, 64u);
}

TEST_P(BenchTest, RequestsSpreadOverMoreConnectionsAllComeBack) {
  std::vector<std::unique_ptr<client::Client>> owned;
  std::vector<client::Client*> more;
  for (const auto& channel : client::MakeStripeChannels(server_->target(), 2)) {
    owned.push_back(std::make_unique<client::Client>(channel));
    more.push_back(owned.back().get());
  }
  absl::StatusOr<BenchReport> report = client::RunBench(server_->client(), Counted(), more);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->requests, 64u);
  EXPECT_EQ(report->succeeded, 64u);
  EXPECT_THAT(report->errors_by_code, IsEmpty());
}

TEST_P(BenchTest, RefusedRequestsAreCountedByCode) {
  BenchConfig config = Counted();
  config.count = 16;
  config.mix = {{BenchOp::kNormalize, 1}};
  config.size = 1 << 20;  // 4 MiB: more than one chunk, so no single message
  config.chunk_bytes = 64 << 10;
  absl::StatusOr<BenchReport> report = client::RunBench(server_->client(), config);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->requests, 16u);
  if (GetParam() != Form::kThreads) {  // no stream to fall back to
    EXPECT_EQ(report->succeeded, 0u);
    EXPECT_THAT(report->errors_by_code, ElementsAre(Pair("FAILED_PRECONDITION", 16u)));
  } else {  // refused as one message, then streamed
    EXPECT_EQ(report->succeeded, 16u);
  }
}

TEST(BenchCallbacksTest, RefusesWhatItCannotRead) {
  auto server = test::TestServer::Start(test::LoopbackConfig());
  ASSERT_TRUE(server.ok()) << server.status().message();
  BenchConfig config;
  config.count = 4;
  config.callbacks = true;
  config.mix = {{BenchOp::kHealth, 1}};
  absl::Status health = client::RunBench((*server)->client(), config).status();
  EXPECT_EQ(health.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(health.message()), HasSubstr("not health"));
  config.mix = {{BenchOp::kNormalize, 1}};
  config.complete_results = false;
  absl::Status streamed = client::RunBench((*server)->client(), config).status();
  EXPECT_EQ(streamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(streamed.message()), HasSubstr("--complete_results"));
  config.complete_results = true;
  config.callbacks = false;
  config.session = true;
  absl::Status threads = client::RunBench((*server)->client(), config).status();
  EXPECT_EQ(threads.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(threads.message()), HasSubstr("--callbacks"));
}

INSTANTIATE_TEST_SUITE_P(Forms, BenchTest, ::testing::Values(Form::kThreads, Form::kCallbacks, Form::kSession),
                         [](const ::testing::TestParamInfo<Form>& info) {
                           switch (info.param) {
                             case Form::kThreads: return "Threads";
                             case Form::kCallbacks: return "Callbacks";
                             case Form::kSession: return "Session";
                           }
                           return "";
                         });

}  // namespace
}  // namespace gpucompute
