// Small results over the wire: with OutputOptions.accept_complete_result a result
// of one chunk (or one kept on device) comes as a single ResultChunk.complete
// whose bytes equal those of the header/data/trailer stream; a larger result,
// or a client that does not ask, still gets the three kinds. A complete result
// goes out with the call's status, in one step: one its client does not read
// holds nothing on the server (or is cancelled after stream_idle_timeout).
// OutputOptions.single_message makes one message a promise: a larger streamed
// result is refused before it runs, so that a client may read the call as unary.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/scrape.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

class SmallResultsTest : public test::ServerOnTestBackendTest {
 protected:
  // Every message of one Normalize call, and its status.
  std::vector<v1::ResultChunk> Call(const v1::NormalizeRequest& request, grpc::Status& status) {
    grpc::ClientContext context;
    auto reader = server_->compute().Normalize(&context, request);
    std::vector<v1::ResultChunk> messages;
    v1::ResultChunk chunk;
    while (reader->Read(&chunk)) messages.push_back(chunk);
    status = reader->Finish();
    return messages;
  }

  static v1::NormalizeRequest Rows(int64_t rows, int64_t cols) {
    v1::NormalizeRequest request;
    *request.mutable_input() = test::Operand(
        test::F32(test::Uniform<double>(rows * cols, 0.5, 1.5, test::FreshSeed()), {rows, cols}));
    request.set_norm(v1::NORM_L2);
    return request;
  }
};

TEST_F(SmallResultsTest, OneChunkResultComesAsOneCompleteMessage) {
  v1::NormalizeRequest request = Rows(4, 256);
  grpc::Status three_status;
  const std::vector<v1::ResultChunk> three = Call(request, three_status);
  ASSERT_TRUE(three_status.ok()) << three_status.error_message();
  ASSERT_EQ(three.size(), 3u);

  request.mutable_output()->set_accept_complete_result(true);
  grpc::Status status;
  const std::vector<v1::ResultChunk> one = Call(request, status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(one.size(), 1u);
  ASSERT_TRUE(one[0].has_complete());
  const v1::ResultComplete& complete = one[0].complete();
  EXPECT_EQ(complete.header().SerializeAsString(), three[0].header().SerializeAsString());
  EXPECT_EQ(complete.data(), three[1].data().data());
  EXPECT_EQ(complete.trailer().backend(), three[2].trailer().backend());
  EXPECT_GT(complete.trailer().timing().total_us(), 0u);
}

TEST_F(SmallResultsTest, KeptResultComesAsOneMessageNamingTheBuffer) {
  v1::NormalizeRequest request = Rows(2, 8);
  request.mutable_output()->set_accept_complete_result(true);
  request.mutable_output()->set_keep_on_device(true);
  grpc::Status status;
  const std::vector<v1::ResultChunk> one = Call(request, status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].complete().data().empty());
  EXPECT_FALSE(one[0].complete().trailer().stored_buffer().id().empty());
}

TEST_F(SmallResultsTest, ResultOfSeveralChunksStillStreams) {
  v1::NormalizeRequest request = Rows(8, 1024);  // 32 KiB in 4 KiB chunks
  request.mutable_output()->set_accept_complete_result(true);
  request.mutable_output()->set_chunk_bytes(4096);
  grpc::Status status;
  const std::vector<v1::ResultChunk> messages = Call(request, status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(messages.size(), 10u);
  EXPECT_TRUE(messages.front().has_header());
  EXPECT_TRUE(messages.back().has_trailer());
}

TEST_F(SmallResultsTest, SingleMessageIsOneMessageOrARefusalBeforeTheRun) {
  v1::NormalizeRequest request = Rows(4, 256);
  request.mutable_output()->set_single_message(true);  // no accept_complete_result: implied
  grpc::Status status;
  std::vector<v1::ResultChunk> messages = Call(request, status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].complete().data().size(), 4u * 256 * sizeof(float));

  request.mutable_output()->set_chunk_bytes(4096);  // the 4 KiB result still fits one chunk
  messages = Call(request, status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(messages.size(), 1u);

  v1::NormalizeRequest large = Rows(8, 1024);  // 32 KiB in 4 KiB chunks
  large.mutable_output()->set_single_message(true);
  large.mutable_output()->set_chunk_bytes(4096);
  EXPECT_TRUE(Call(large, status).empty());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(),
              ::testing::StartsWith("output.single_message: the result is 32768 bytes"));

  large.mutable_output()->set_keep_on_device(true);  // kept: one message whatever its size
  messages = Call(large, status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_FALSE(messages[0].complete().trailer().stored_buffer().id().empty());
}

TEST_F(SmallResultsTest, TheClientReadsSingleMessagesAsUnaryAndStreamsWhatIsRefused) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4, 256}, {8, 1024}}) {
    v1::NormalizeRequest request = Rows(rows, cols);
    request.mutable_output()->set_chunk_bytes(4096);  // the 32 KiB result is refused as one
    absl::StatusOr<client::Result> streamed = server_->client().Normalize(request);
    ASSERT_TRUE(streamed.ok()) << streamed.status().message();
    request.mutable_output()->set_single_message(true);
    absl::StatusOr<client::Result> single = server_->client().Normalize(request);
    ASSERT_TRUE(single.ok()) << single.status().message();
    EXPECT_EQ(single->data.size(), static_cast<size_t>(rows * cols) * sizeof(float));
    EXPECT_EQ(single->data, streamed->data) << rows << " x " << cols;
  }
}

TEST_F(SmallResultsTest, AnErrorIsAStatusNotAMessage) {
  v1::NormalizeRequest request;
  *request.mutable_input() = test::Operand(test::F32({0.0, 0.0, 1.0, 2.0}, {2, 2}));
  request.mutable_output()->set_accept_complete_result(true);
  grpc::Status status;
  EXPECT_TRUE(Call(request, status).empty());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

TEST(SmallResultsStallTest, UnreadCompleteResultsHoldNothingOnTheServer) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.stream_idle_timeout = absl::Milliseconds(300);
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  // 4,000,000-byte results in one message each, 32 MB that the client never reads.
  v1::HaversineGridRequest request;
  v1::LatLonMesh& mesh = *request.mutable_mesh();
  mesh.set_lat_start(-60);
  mesh.set_lat_stop(60);
  mesh.set_n_lat(1000);
  mesh.set_lon_start(-180);
  mesh.set_lon_stop(180);
  mesh.set_n_lon(1000);
  mesh.set_dtype(v1::FLOAT32);
  request.add_references()->set_lat(10);
  request.mutable_output()->set_chunk_bytes(4u << 20);
  request.mutable_output()->set_accept_complete_result(true);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::ResultChunk>>> unread;
  for (int i = 0; i < 8; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    unread.push_back((*server)->compute().HaversineGrid(contexts.back().get(), request));
  }
  // Each call ended on the server, written out or cancelled by the stall limit:
  // none holds its result or its place.
  const int port = (*server)->server().metrics_port();
  EXPECT_TRUE(test::Eventually([&] {
    return test::MetricsShow(port, R"(gpucompute_requests_in_flight{operation="haversine_grid"})", 0) &&
           test::MetricsShow(port, R"(gpucompute_memory_budget_used_bytes{memory="host"})", 0);
  })) << test::ScrapeMetricsBody(port);
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : unread) reader->Finish();
  auto next = (*server)->client().HaversineGrid(request);
  EXPECT_TRUE(next.ok()) << next.status().message();
}

}  // namespace
}  // namespace gpucompute
