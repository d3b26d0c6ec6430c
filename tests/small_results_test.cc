// Small results over the wire: with OutputOptions.accept_complete_result a result
// of one chunk (or one kept on device) comes as a single ResultChunk.complete
// whose bytes equal those of the header/data/trailer stream; a larger result,
// or a client that does not ask, still gets the three kinds.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

class SmallResultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config = test::LoopbackConfig();
    if (test::OnCuda()) config.backend.kind = BackendKind::kCuda;
    auto server = test::TestServer::Start(config);
    if (test::OnCuda() && !server.ok()) GTEST_SKIP() << server.status().message();
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }

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

  std::unique_ptr<test::TestServer> server_;
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

TEST_F(SmallResultsTest, AnErrorIsAStatusNotAMessage) {
  v1::NormalizeRequest request;
  *request.mutable_input() = test::Operand(test::F32({0.0, 0.0, 1.0, 2.0}, {2, 2}));
  request.mutable_output()->set_accept_complete_result(true);
  grpc::Status status;
  EXPECT_TRUE(Call(request, status).empty());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

}  // namespace
}  // namespace gpucompute
