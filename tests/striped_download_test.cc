// Ranged and striped downloads: ranges cut at the end, stripes
// reassembled byte-exact in place over several connections, and a stripe that
// fails part-way failing the whole download with everything freed.

#include <string>

#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::TestServer;

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<TestServer> StartServer() {
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(test::LoopbackConfig());
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string Upload(client::Client& client, const std::string& data) {
  const int64_t shape[] = {static_cast<int64_t>(data.size() / 4)};
  absl::StatusOr<v1::BufferInfo> info = client.Upload("striped", v1::FLOAT32, shape, data);
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->id() : "";
}

client::Client StripedClient(const TestServer& server, int stripes, uint64_t stripe_bytes) {
  client::ClientOptions options;
  options.stripes = stripes;
  options.stripe_bytes = stripe_bytes;
  options.stripe_channels = client::MakeStripeChannels(server.target(), stripes - 1);
  return client::Client(client::MakeChannel(server.target()), options);
}

TEST(StripedDownloadTest, RangesAreCutAtTheEndAndOffsetsPastItRefused) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string data = test::DistinctBytes(kMiB + 4096);
  const std::string id = Upload(server->client(), data);
  v1::DownloadRequest request;
  request.set_buffer_id(id);
  request.set_chunk_bytes(64 << 10);
  request.set_offset(kMiB);
  request.set_length(kMiB);  // past the end: cut there
  grpc::ClientContext context;
  auto reader = server->buffers().Download(&context, request);
  uint64_t expected_offset = kMiB;
  std::string tail;
  for (v1::ResultChunk chunk; reader->Read(&chunk);) {
    if (chunk.has_header()) EXPECT_EQ(chunk.header().total_bytes(), data.size());
    if (!chunk.has_data()) continue;
    EXPECT_EQ(chunk.data().offset(), expected_offset);
    expected_offset += chunk.data().data().size();
    tail += chunk.data().data();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tail, data.substr(kMiB));

  request.set_offset(data.size() + 1);
  grpc::ClientContext past;
  auto refused = server->buffers().Download(&past, request);
  for (v1::ResultChunk chunk; refused->Read(&chunk);) {
  }
  const grpc::Status status = refused->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(status.error_message(), HasSubstr("past the buffer's"));
}

TEST(StripedDownloadTest, StripesReassembleByteExactOverSeveralConnections) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  // Not a multiple of the stripe, nor of the chunk.
  const std::string data = test::DistinctBytes(5 * kMiB + 12340);
  const std::string id = Upload(server->client(), data);
  for (int stripes : {2, 4}) {
    client::Client client = StripedClient(*server, stripes, kMiB);
    absl::StatusOr<client::Result> result = client.Download(id, 256 << 10);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->header.total_bytes(), data.size());
    EXPECT_TRUE(result->data == data) << stripes << " stripes: bytes differ";
  }
  // A result smaller than one stripe takes one stream.
  const std::string small = test::DistinctBytes(4096);
  const std::string small_id = Upload(server->client(), small);
  absl::StatusOr<client::Result> one = StripedClient(*server, 4, kMiB).Download(small_id);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->data, small);
}

TEST(StripedDownloadTest, AStripeFailingPartWayFailsTheDownloadAndFreesEverything) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string data = test::DistinctBytes(6 * kMiB);
  const std::string id = Upload(server->client(), data);
  client::Client client = StripedClient(*server, 3, kMiB);
  std::string memory(data.size(), '\0');
  // Once the first stripe has its header, the buffer goes: the stripes still to
  // start find no buffer (NOT_FOUND), which no retry hides.
  absl::StatusOr<client::Result> result = client.DownloadTo(
      id, [&](const v1::ResultHeader&) -> absl::StatusOr<char*> {
        EXPECT_TRUE(server->client().Delete(id).ok());
        return memory.data();
      });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << result.status();
  // The first stripe's stream held the deleted buffer's memory; nothing stays.
  for (int i = 0; i < 100 && server->PoolUsedBytes() != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(server->PoolUsedBytes(), 0u);
  absl::StatusOr<v1::ListResponse> list = server->client().List();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->used_bytes(), 0u);
}

}  // namespace
}  // namespace gpucompute
