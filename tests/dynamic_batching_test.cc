// Dynamic batching over the wire: small requests of one operation and shape
// that arrive within --batch_window while another of their kind runs make one
// launch (the trailer and the gpucompute_batch_size metric say how many) and
// give byte for byte the results they give alone; a bad request in a batch
// fails alone with its own message; a request cancelled while it waits leaves
// the batch, the others intact; a lone request is never held for the window.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing/fault_injection.h"
#include "tests/testing/eventually.h"
#include "tests/testing/faulty_server.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

// One call of any compute RPC, read on a thread of its own.
struct Call {
  grpc::ClientContext context;
  std::vector<v1::ResultChunk> messages;
  grpc::Status status;
  std::thread reader;

  // The one-message result's data and trailer.
  const v1::ResultComplete& complete() const { return messages.at(0).complete(); }
};

template <typename Request>
using Rpc = std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> (v1::Compute::Stub::*)(
    grpc::ClientContext*, const Request&);

class DynamicBatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig alone = test::LoopbackConfig();
    alone.batching = false;
    if (test::OnCuda()) alone.backend.kind = BackendKind::kCuda;
    auto reference = test::TestServer::Start(alone);
    if (test::OnCuda() && !reference.ok()) GTEST_SKIP() << reference.status().message();
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    alone_ = *std::move(reference);

    ServerConfig config = test::LoopbackConfigWithMetrics();
    // Every call a test starts while its opener runs joins one batch.
    config.batch_window = absl::Milliseconds(700);
    if (test::OnCuda()) config.backend.kind = BackendKind::kCuda;
    // Paused operations hold an opener running for as long as a test needs.
    absl::StatusOr<BackendSelection> backend = CreateBackend(config.backend);
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    auto batched =
        test::StartWithFaults(config, faults_, std::move(backend->backend), backend->note);
    ASSERT_TRUE(batched.ok()) << batched.status().message();
    batched_ = *std::move(batched);
  }

  void TearDown() override { faults_->ResumeOperations(); }

  // Starts `opener` on the batched server and holds it running (the device
  // paused): requests of its kind started now wait for the window and make one
  // batch, which runs once Release() lets the device go on.
  template <typename Request>
  std::unique_ptr<Call> Open(Rpc<Request> rpc, const Request& opener) {
    faults_->PauseOperations();
    auto call = Start(*batched_, rpc, opener);
    EXPECT_EQ(test::EventuallyEquals([&] { return faults_->PausedOperations(); }, 1, std::chrono::seconds(20)), 1)
        << "the opener did not start";
    return call;
  }
  // Lets the calls started after Open reach the batcher, then the device go on;
  // the opener ran alone.
  void Release(Call& opener) {
    absl::SleepFor(absl::Milliseconds(200));  // well within the window
    faults_->ResumeOperations();
    opener.reader.join();
    ASSERT_TRUE(opener.status.ok()) << opener.status.error_message();
    EXPECT_EQ(opener.complete().trailer().batch_size(), 1u);
  }

  // Starts `request` on `server`, one-message results asked for.
  template <typename Request>
  std::unique_ptr<Call> Start(test::TestServer& server, Rpc<Request> rpc, Request request) {
    request.mutable_output()->set_accept_complete_result(true);
    auto call = std::make_unique<Call>();
    call->reader = std::thread([&server, rpc, request, raw = call.get()] {
      auto reader = (server.compute().*rpc)(&raw->context, request);
      v1::ResultChunk chunk;
      while (reader->Read(&chunk)) raw->messages.push_back(chunk);
      raw->status = reader->Finish();
    });
    return call;
  }

  // Runs each of `requests` alone on the unbatched server, then all at once on
  // the batched one; expects one batch of them all, with identical bytes.
  template <typename Request>
  void ExpectBatchEqualsAlone(Rpc<Request> rpc, const std::vector<Request>& requests) {
    std::vector<std::string> expected;
    for (const Request& request : requests) {
      auto call = Start(*alone_, rpc, request);
      call->reader.join();
      ASSERT_TRUE(call->status.ok()) << call->status.error_message();
      EXPECT_EQ(call->complete().trailer().batch_size(), 1u);
      expected.push_back(call->complete().data());
    }
    std::unique_ptr<Call> opener = Open(rpc, requests.front());
    std::vector<std::unique_ptr<Call>> calls;
    for (const Request& request : requests) calls.push_back(Start(*batched_, rpc, request));
    Release(*opener);
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i]->reader.join();
      ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
      EXPECT_EQ(calls[i]->complete().trailer().batch_size(), requests.size()) << "request " << i;
      EXPECT_EQ(calls[i]->complete().data(), expected[i]) << "request " << i;
    }
  }

  static v1::NormalizeRequest Rows(int64_t rows, int64_t cols, uint64_t seed) {
    v1::NormalizeRequest request;
    *request.mutable_input() =
        test::Operand(test::F32(test::Uniform<double>(rows * cols, 0.5, 1.5, seed), {rows, cols}));
    request.set_norm(v1::NORM_L2);
    return request;
  }

  std::shared_ptr<InjectedFaults> faults_ = std::make_shared<InjectedFaults>();
  std::unique_ptr<test::TestServer> alone_;
  std::unique_ptr<test::TestServer> batched_;
};

TEST_F(DynamicBatchingTest, NormalizeBatchEqualsEachAlone) {
  const uint64_t seed = test::FreshSeed();
  ExpectBatchEqualsAlone<v1::NormalizeRequest>(
      &v1::Compute::Stub::Normalize,
      {Rows(1, 64, seed), Rows(3, 64, seed + 1), Rows(2, 64, seed + 2), Rows(5, 64, seed + 3)});
}

TEST_F(DynamicBatchingTest, DiscountProductBatchEqualsEachAlone) {
  const uint64_t seed = test::FreshSeed();
  std::vector<v1::DiscountProductRequest> requests(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    *requests[i].mutable_factors() =
        test::Operand(test::F64(test::Uniform<double>(8 * 5, 0.9, 1.0, seed + i), {8, 5}));
    *requests[i].mutable_values() =
        test::Operand(test::F64(test::Uniform<double>(3 * 8 * 5, 0, 100, seed + 10 + i), {3, 8, 5}));
  }
  ExpectBatchEqualsAlone(&v1::Compute::Stub::DiscountProduct, requests);
}

// Series (40), (2, 40), (3, 40) of one sampling x.
std::vector<v1::LombScargleRequest> SeriesOfOneSampling(uint64_t seed) {
  std::vector<double> x(40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.37 * static_cast<double>(i) + 0.01 * (i % 3);
  std::vector<v1::LombScargleRequest> requests(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    const int64_t series = static_cast<int64_t>(i) + 1;  // (40), (2, 40), (3, 40)
    *requests[i].mutable_x() = test::Operand(test::F64(x, {40}));
    const std::vector<double> y = test::Uniform<double>(series * 40, -1, 1, seed + i);
    *requests[i].mutable_y() =
        test::Operand(series == 1 ? test::F64(y, {40}) : test::F64(y, {series, 40}));
    requests[i].mutable_freq_grid()->set_start(0.1);
    requests[i].mutable_freq_grid()->set_stop(3.0);
    requests[i].mutable_freq_grid()->set_count(32);
    requests[i].set_precenter(true);
  }
  return requests;
}

TEST_F(DynamicBatchingTest, LombScargleSeriesOfOneSamplingBatch) {
  ExpectBatchEqualsAlone(&v1::Compute::Stub::LombScargle, SeriesOfOneSampling(test::FreshSeed()));
}

// Amplitudes batch too, their (real, imaginary) pairs stacked whole.
TEST_F(DynamicBatchingTest, LombScargleAmplitudesBatch) {
  std::vector<v1::LombScargleRequest> requests = SeriesOfOneSampling(test::FreshSeed());
  for (v1::LombScargleRequest& request : requests) {
    request.set_normalization(v1::LOMB_SCARGLE_NORMALIZATION_AMPLITUDE);
  }
  ExpectBatchEqualsAlone(&v1::Compute::Stub::LombScargle, requests);
}

TEST_F(DynamicBatchingTest, ABadRequestInABatchFailsAlone) {
  const uint64_t seed = test::FreshSeed();
  v1::NormalizeRequest bad = Rows(3, 4, seed);
  // Row 1 of this request is all zeros: no L2 norm to divide by.
  *bad.mutable_input() = test::Operand(
      test::F32({1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8}, {3, 4}));
  std::unique_ptr<Call> opener = Open(&v1::Compute::Stub::Normalize, Rows(1, 4, seed + 3));
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Start(*batched_, &v1::Compute::Stub::Normalize, Rows(2, 4, seed + 1)));
  calls.push_back(Start(*batched_, &v1::Compute::Stub::Normalize, bad));
  calls.push_back(Start(*batched_, &v1::Compute::Stub::Normalize, Rows(4, 4, seed + 2)));
  Release(*opener);
  for (auto& call : calls) call->reader.join();
  EXPECT_EQ(calls[1]->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(calls[1]->status.error_message(), HasSubstr("row 1"));
  for (int i : {0, 2}) {
    ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
    auto alone = Start(*alone_, &v1::Compute::Stub::Normalize, i == 0 ? Rows(2, 4, seed + 1)
                                                                       : Rows(4, 4, seed + 2));
    alone->reader.join();
    EXPECT_EQ(calls[i]->complete().data(), alone->complete().data());
  }
}

TEST_F(DynamicBatchingTest, CancellingOneLeavesTheOthersIntact) {
  const uint64_t seed = test::FreshSeed();
  std::unique_ptr<Call> opener = Open(&v1::Compute::Stub::Normalize, Rows(1, 32, seed + 4));
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(Start(*batched_, &v1::Compute::Stub::Normalize, Rows(2, 32, seed + i)));
  }
  absl::SleepFor(absl::Milliseconds(200));  // all four wait in the window
  calls[2]->context.TryCancel();
  Release(*opener);
  for (auto& call : calls) call->reader.join();
  EXPECT_EQ(calls[2]->status.error_code(), grpc::StatusCode::CANCELLED);
  for (int i : {0, 1, 3}) {
    ASSERT_TRUE(calls[i]->status.ok()) << calls[i]->status.error_message();
    EXPECT_EQ(calls[i]->complete().trailer().batch_size(), 3u);
  }
  const std::string metrics = test::ScrapeMetrics(batched_->server().metrics_port());
  // The opener alone (1), then the three left of the four (3).
  EXPECT_THAT(metrics,
              HasSubstr("gpucompute_batch_size_bucket{operation=\"normalize\",le=\"2\"} 1"));
  EXPECT_THAT(metrics,
              HasSubstr("gpucompute_batch_size_bucket{operation=\"normalize\",le=\"4\"} 2"));
}

TEST_F(DynamicBatchingTest, LoneRequestsAreNotHeldForTheWindow) {
  // Each call waits for the last: none has another of its kind in flight, so
  // each runs at once, alone, instead of waiting out the window.
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.batch_window = absl::Seconds(30);
  if (test::OnCuda()) config.backend.kind = BackendKind::kCuda;
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint64_t seed = test::FreshSeed();
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    auto call = Start(**server, &v1::Compute::Stub::Normalize, Rows(2, 16, seed + i));
    call->reader.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "call " << i << " waited for the window";
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    EXPECT_EQ(call->complete().trailer().batch_size(), 1u);
  }
  EXPECT_THAT(test::ScrapeMetrics((*server)->server().metrics_port()),
              HasSubstr("gpucompute_batch_size_bucket{operation=\"normalize\",le=\"1\"} 3"));
}

TEST_F(DynamicBatchingTest, TinyLoneRequestsRunInPlaceWithTheQueuedResults) {
  // One request at a time, so each finds nothing waiting and none of its kind
  // running: the tiny ones run in place, the one past in_place_work is queued.
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.in_place_work = 64;
  if (test::OnCuda()) config.backend.kind = BackendKind::kCuda;
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint64_t seed = test::FreshSeed();
  const std::vector<v1::NormalizeRequest> requests = {Rows(2, 16, seed), Rows(4, 16, seed + 1),
                                                      Rows(2, 32, seed + 2),
                                                      Rows(8, 16, seed + 3)};  // 128 > 64
  for (size_t i = 0; i < requests.size(); ++i) {
    auto in_place = Start(**server, &v1::Compute::Stub::Normalize, requests[i]);
    in_place->reader.join();
    auto alone = Start(*alone_, &v1::Compute::Stub::Normalize, requests[i]);
    alone->reader.join();
    ASSERT_TRUE(in_place->status.ok()) << in_place->status.error_message();
    ASSERT_TRUE(alone->status.ok()) << alone->status.error_message();
    EXPECT_EQ(in_place->complete().data(), alone->complete().data()) << "request " << i;
    EXPECT_EQ(in_place->complete().trailer().batch_size(), 1u);
  }
  EXPECT_THAT(test::ScrapeMetrics((*server)->server().metrics_port()),
              HasSubstr("gpucompute_in_place_requests_total{operation=\"normalize\"} 3"));
}

TEST_F(DynamicBatchingTest, KeptResultsRunAlone) {
  v1::NormalizeRequest kept = Rows(2, 16, test::FreshSeed());
  kept.mutable_output()->set_keep_on_device(true);
  auto call = Start(*batched_, &v1::Compute::Stub::Normalize, kept);
  call->reader.join();
  ASSERT_TRUE(call->status.ok()) << call->status.error_message();
  EXPECT_EQ(call->complete().trailer().batch_size(), 1u);
  EXPECT_FALSE(call->complete().trailer().stored_buffer().id().empty());
}

}  // namespace
}  // namespace gpucompute
