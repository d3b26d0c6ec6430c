// Upload sessions (UploadHeader.session_token): striped uploads stored byte-exact,
// a broken stream resumed with only the bytes the upload lacks, mismatched
// headers refused, and an abandoned upload freed after --upload_session_ttl.

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

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

std::unique_ptr<TestServer> StartServer(absl::Duration ttl = absl::Minutes(10)) {
  ServerConfig config = test::LoopbackConfig();
  config.upload_session_ttl = ttl;
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

v1::UploadRequest Header(uint64_t bytes, uint64_t offset) {
  v1::UploadRequest message;
  v1::UploadHeader* header = message.mutable_header();
  header->set_name("session");
  header->set_dtype(v1::FLOAT32);
  header->add_shape(static_cast<int64_t>(bytes / 4));
  header->set_session_token(kToken);
  header->set_offset(offset);
  return message;
}

// One resumable upload stream: the header, then `data` in 256 KiB messages; cancelled
// (as a broken connection) after `cancel_after` bytes when that is smaller.
grpc::Status SendPart(TestServer& server, uint64_t total, uint64_t offset, absl::string_view data,
                      v1::BufferInfo* info, uint64_t cancel_after = UINT64_MAX) {
  grpc::ClientContext context;
  auto writer = server.buffers().Upload(&context, info);
  writer->Write(Header(total, offset));
  v1::UploadRequest message;
  for (uint64_t at = 0; at < data.size(); at += 256 << 10) {
    if (at >= cancel_after) {
      // Let the server copy what it has, then break the stream.
      absl::SleepFor(absl::Milliseconds(200));
      context.TryCancel();
      return writer->Finish();
    }
    message.set_data(std::string(data.substr(at, 256 << 10)));
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

TEST(ResumableUploadTest, StripedUploadIsStoredByteExact) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  client::ClientOptions options;
  options.stripes = 3;
  options.stripe_bytes = kMiB;
  options.stripe_channels = client::MakeStripeChannels(server->target(), 2);
  client::Client client(client::MakeChannel(server->target()), options);
  const std::string data = test::DistinctBytes(5 * kMiB + 4096);
  const int64_t shape[] = {static_cast<int64_t>(data.size() / 4)};
  absl::StatusOr<v1::BufferInfo> info = client.Upload("striped", v1::FLOAT32, shape, data);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->bytes(), data.size());
  absl::StatusOr<client::Result> back = server->client().Download(info->id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->data == data);
}

TEST(ResumableUploadTest, ABrokenStreamResumesWithOnlyTheMissingBytes) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string data = test::DistinctBytes(4 * kMiB);
  v1::BufferInfo info;
  const grpc::Status broken = SendPart(*server, data.size(), 0, data, &info, 2 * kMiB);
  EXPECT_EQ(broken.error_code(), grpc::StatusCode::CANCELLED) << broken.error_message();
  absl::StatusOr<v1::UploadStatusResponse> status = server->client().UploadStatus(kToken);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->total_bytes(), data.size());
  ASSERT_EQ(status->received_size(), 1);
  const uint64_t arrived = status->received(0).length();
  EXPECT_EQ(status->received(0).offset(), 0u);
  EXPECT_GT(arrived, 0u);
  EXPECT_LE(arrived, 2 * kMiB);
  // The rest, from where the upload says the bytes stop.
  const grpc::Status resumed =
      SendPart(*server, data.size(), arrived, absl::string_view(data).substr(arrived), &info);
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  ASSERT_FALSE(info.id().empty());
  absl::StatusOr<client::Result> back = server->client().Download(info.id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->data == data);
  // A stored upload is gone.
  EXPECT_EQ(server->client().UploadStatus(kToken).status().code(), absl::StatusCode::kNotFound);
}

TEST(ResumableUploadTest, PartsInAnyOrderAndAMismatchedHeaderRefused) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string data = test::DistinctBytes(2 * kMiB);
  v1::BufferInfo info;
  ASSERT_TRUE(SendPart(*server, data.size(), kMiB, absl::string_view(data).substr(kMiB), &info).ok());
  EXPECT_TRUE(info.id().empty());  // not complete yet
  v1::BufferInfo other;
  const grpc::Status mismatched = SendPart(*server, data.size() / 2, 0, "", &other);
  EXPECT_EQ(mismatched.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(mismatched.error_message(), HasSubstr("differs from the upload session"));
  ASSERT_TRUE(SendPart(*server, data.size(), 0, absl::string_view(data).substr(0, kMiB), &info).ok());
  ASSERT_FALSE(info.id().empty());
  absl::StatusOr<client::Result> back = server->client().Download(info.id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->data == data);

  v1::UploadRequest short_token = Header(data.size(), 0);
  short_token.mutable_header()->set_session_token("short");
  grpc::ClientContext context;
  auto writer = server->buffers().Upload(&context, &other);
  writer->Write(short_token);
  writer->WritesDone();
  const grpc::Status refused = writer->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("session_token has 5 bytes"));
}

TEST(ResumableUploadTest, AnAbandonedSessionIsFreedAfterItsTtl) {
  auto server = StartServer(absl::Milliseconds(200));
  ASSERT_NE(server, nullptr);
  const std::string data = test::DistinctBytes(2 * kMiB);
  v1::BufferInfo info;
  ASSERT_TRUE(SendPart(*server, data.size(), 0, absl::string_view(data).substr(0, kMiB), &info).ok());
  EXPECT_GT(server->PoolUsedBytes(), 0u);
  absl::StatusOr<v1::ListResponse> list = server->client().List();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->used_bytes(), data.size());  // the upload's reservation
  for (int i = 0; i < 200 && server->PoolUsedBytes() != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(server->PoolUsedBytes(), 0u);
  EXPECT_EQ(server->client().UploadStatus(kToken).status().code(), absl::StatusCode::kNotFound);
  list = server->client().List();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->used_bytes(), 0u);
}

}  // namespace
}  // namespace gpucompute
