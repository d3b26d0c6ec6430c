// Hostile neighbours, over the wire: silent streams, readers that
// outlive Delete, many tiny buffers, huge List replies and oversized metadata
// must not take from the other callers of the same server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "server/buffers_service.h"
#include "tests/testing/eventually.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::TestServer;

std::unique_ptr<TestServer> StartServer(const ServerConfig& config) {
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config);
  EXPECT_TRUE(server.ok()) << server.status().message();
  return server.ok() ? *std::move(server) : nullptr;
}

v1::UploadRequest Header(int64_t elements, const std::string& name = "") {
  v1::UploadRequest message;
  message.mutable_header()->set_dtype(v1::FLOAT64);
  message.mutable_header()->add_shape(elements);
  message.mutable_header()->set_name(name);
  return message;
}

// An Upload that has sent `messages` and then stays silent.
struct SilentUpload {
  grpc::ClientContext context;
  v1::BufferInfo info;
  std::unique_ptr<grpc::ClientWriter<v1::UploadRequest>> writer;

  SilentUpload(v1::Buffers::Stub& stub, const std::vector<v1::UploadRequest>& messages) {
    writer = stub.Upload(&context, &info);
    for (const v1::UploadRequest& message : messages) writer->Write(message);
  }
};

// The body of GET /metrics on 127.0.0.1:port.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    send(fd, request.data(), request.size(), 0);
    char buffer[65536];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  }
  close(fd);
  return response;
}

// Polls List until the caller's used_bytes reads `bytes`, within 10 s.
uint64_t AwaitUsedBytes(client::Client& client, uint64_t bytes) {
  return test::EventuallyEquals([&] { return client.List()->used_bytes(); }, bytes);
}

TEST(HostileStreamsTest, SilentUploadsHoldNoInFlightPlace) {
  ServerConfig config = test::LoopbackConfig();
  config.max_in_flight = 4;
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<SilentUpload>> silent;
  for (int i = 0; i < 8; ++i) {
    silent.push_back(std::make_unique<SilentUpload>(server->buffers(),
                                                    std::vector<v1::UploadRequest>{}));
  }
  absl::SleepFor(absl::Milliseconds(300));  // every stream has reached the server
  auto stored = server->client().Upload("x", test::F64({1, 2, 3}, {3}));
  EXPECT_TRUE(stored.ok()) << stored.status().message();
  for (auto& upload : silent) upload->context.TryCancel();
}

TEST(HostileStreamsTest, HeaderOnlyUploadIsClosedAfterTheIdleTimeoutAndFreesItsQuota) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.buffer_quota_bytes = 10 << 20;
  config.stream_idle_timeout = absl::Milliseconds(300);
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  SilentUpload header_only(server->buffers(), {Header(1 << 20, "held")});  // 8 MiB
  SilentUpload nothing(server->buffers(), {});
  absl::SleepFor(absl::Seconds(1));
  for (SilentUpload* upload : {&header_only, &nothing}) {
    const grpc::Status status = upload->writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_THAT(status.error_message(), HasSubstr("(stream_idle_timeout)"));
  }
  std::vector<double> values(1 << 20, 1.0);
  auto stored = server->client().Upload("next", test::F64(values, {1 << 20}));
  EXPECT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_THAT(Scrape(server->server().metrics_port()),
              HasSubstr("gpucompute_rejections_total{reason=\"stream_idle\"} 2"));
}

TEST(HostileStreamsTest, DeletedBufferCountsUntilItsLastReaderLetsGo) {
  ServerConfig config = test::LoopbackConfig();
  config.buffer_quota_bytes = 12 << 20;
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  const std::vector<double> values(1 << 20, 2.0);  // 8 MiB
  auto stored = server->client().Upload("big", test::F64(values, {1 << 20}));
  ASSERT_TRUE(stored.ok()) << stored.status().message();

  grpc::ClientContext context;
  v1::DownloadRequest request;
  request.set_buffer_id(stored->id());
  request.set_chunk_bytes(4096);
  auto unread = server->buffers().Download(&context, request);
  v1::ResultChunk header;
  ASSERT_TRUE(unread->Read(&header));  // the stream holds the data now
  ASSERT_TRUE(server->client().Delete(stored->id()).ok());
  EXPECT_EQ(server->client().List()->buffers_size(), 0);  // the id is gone at once

  auto refused = server->client().Upload("again", test::F64(values, {1 << 20}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("buffer_quota_bytes"));

  context.TryCancel();
  unread.reset();
  EXPECT_EQ(AwaitUsedBytes(server->client(), 0), 0u);
  auto accepted = server->client().Upload("again", test::F64(values, {1 << 20}));
  EXPECT_TRUE(accepted.ok()) << accepted.status().message();
}

TEST(HostileStreamsTest, BufferMetadataCountsAgainstTheQuota) {
  ServerConfig config = test::LoopbackConfig();
  config.buffer_quota_bytes = 64 << 10;
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  const std::string name(kMaxBufferNameBytes, 'n');
  int stored = 0;
  absl::Status refused;
  for (; stored < 400 && refused.ok(); ++stored) {
    refused = server->client().Upload(name, test::F64({1}, {1})).status();
  }
  // 8 data bytes each would let 8192 in; with the metadata about 167 fit.
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << stored << " stored";
  EXPECT_THAT(refused.message(), HasSubstr("bytes of metadata plus its name"));
  const auto listed = server->client().List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->used_bytes(), static_cast<uint64_t>(listed->buffers_size()) * 8);
  EXPECT_EQ(listed->metadata_bytes(), static_cast<uint64_t>(listed->buffers_size()) *
                                          (kBufferOverheadBytes + kMaxBufferNameBytes));
}

TEST(HostileStreamsTest, BuffersPerOwnerAreCapped) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  config.max_buffers_per_owner = 3;
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto stored = server->client().Upload("b", test::F64({1}, {1}));
    ASSERT_TRUE(stored.ok()) << stored.status().message();
    ids.push_back(stored->id());
  }
  auto refused = server->client().Upload("b", test::F64({1}, {1}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("(max_buffers_per_owner 3)"));
  EXPECT_THAT(Scrape(server->server().metrics_port()),
              HasSubstr("gpucompute_rejections_total{reason=\"buffer_count\"} 1"));
  ASSERT_TRUE(server->client().Delete(ids[0]).ok());
  EXPECT_TRUE(server->client().Upload("b", test::F64({1}, {1})).ok());
}

TEST(HostileStreamsTest, OversizedMetadataIsRefusedOnComputeCallsNamingTheFlag) {
  ServerConfig config = test::LoopbackConfig();
  config.max_metadata_bytes = 2048;
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  auto normalize = [&server](const std::string& padding) {
    grpc::ClientContext context;
    if (!padding.empty()) context.AddMetadata("x-padding", padding);
    v1::NormalizeRequest request;
    *request.mutable_input() = test::Operand(test::F64({1.0, 3.0}, {1, 2}));
    auto reader = server->compute().Normalize(&context, request);
    v1::ResultChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  };
  const grpc::Status refused = normalize(std::string(4096, 'p'));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("the limit is 2048 (max_metadata_bytes)"));
  const grpc::Status within = normalize(std::string(1024, 'p'));
  EXPECT_TRUE(within.ok()) << within.error_message();
}

TEST(HostileStreamsTest, ListComesInPagesInCreationOrder) {
  auto server = StartServer(test::LoopbackConfig());
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(server->client().Upload(absl::StrCat("b", i), test::F64({1}, {1})).ok());
  }
  v1::ListRequest request;
  request.set_page_size(3);
  std::vector<std::string> names;
  int pages = 0;
  do {
    grpc::ClientContext context;
    v1::ListResponse page;
    const grpc::Status status = server->buffers().List(&context, request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(page.buffers_size(), 3);
    for (const v1::BufferInfo& buffer : page.buffers()) names.push_back(buffer.name());
    request.set_page_token(page.next_page_token());
    ++pages;
  } while (!request.page_token().empty());
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(names, ::testing::ElementsAre("b0", "b1", "b2", "b3", "b4", "b5", "b6"));

  grpc::ClientContext context;
  v1::ListResponse page;
  request.set_page_token("not-a-token");
  EXPECT_EQ(server->buffers().List(&context, request, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(HostileStreamsTest, ClientListFollowsEveryPage) {
  auto server = StartServer(test::LoopbackConfig());
  ASSERT_NE(server, nullptr);
  const int count = static_cast<int>(kMaxListPageSize) + 5;
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(server->client().Upload("b", test::F64({1}, {1})).ok());
  }
  grpc::ClientContext context;
  v1::ListResponse first_page;
  ASSERT_TRUE(server->buffers().List(&context, v1::ListRequest(), &first_page).ok());
  EXPECT_EQ(first_page.buffers_size(), static_cast<int>(kMaxListPageSize));
  EXPECT_LT(first_page.ByteSizeLong(), 1u << 20);
  auto listed = server->client().List();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(listed->buffers_size(), count);
}

// Metadata over GRPC_ARG_MAX_METADATA_SIZE (8 KiB, gRPC 1.51 has no soft/hard
// pair). One large value fails only its own call. Many values that enter the
// HPACK table can leave the decoder out of step, and the server then closes that
// connection, failing the calls in flight on it: the exposure is one connection,
// that is the client that sent them, never another client's connection.
// Over --max_metadata_bytes a call fails alone, on a connection that lives on;
// over gRPC's hard 64 KiB header-block bound gRPC fails it (and may close that
// connection), and still no other connection.
TEST(HostileStreamsTest, OversizedMetadataFailsNoOtherConnection) {
  ServerConfig config = test::LoopbackConfigWithMetrics();
  auto server = StartServer(config);
  ASSERT_NE(server, nullptr);
  auto list = [](v1::Buffers::Stub& stub,
                 const std::vector<std::pair<std::string, std::string>>& metadata) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
    v1::ListResponse reply;
    return stub.List(&context, v1::ListRequest(), &reply);
  };
  v1::Buffers::Stub& hostile = server->buffers();
  const grpc::Status large = list(hostile, {{"x-padding", std::string(16 << 10, 'p')}});
  EXPECT_EQ(large.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(large.error_message(), HasSubstr("the limit is 8192 (max_metadata_bytes)"));
  const grpc::Status after_large = list(hostile, {});
  EXPECT_TRUE(after_large.ok()) << after_large.error_message();

  // Its own connection: channels share the global subchannel pool otherwise.
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const auto neighbour = v1::Buffers::NewStub(grpc::CreateCustomChannel(
      server->target(), grpc::InsecureChannelCredentials(), own_connection));
  ASSERT_TRUE(list(*neighbour, {}).ok());
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 16; ++i) many.emplace_back(absl::StrCat("x-pad-", i), std::string(1024, 'q'));
  EXPECT_FALSE(list(hostile, many).ok());
  EXPECT_THAT(Scrape(server->server().metrics_port()),
              HasSubstr("gpucompute_rejections_total{reason=\"metadata_size\"} 2"));
  EXPECT_FALSE(list(hostile, {{"x-padding", std::string(80 << 10, 'p')}}).ok());
  for (int i = 0; i < 3; ++i) {
    const grpc::Status status = list(*neighbour, {{"x-pad-0", std::string(1024, 'q')}});
    EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  }
}

}  // namespace
}  // namespace gpucompute
