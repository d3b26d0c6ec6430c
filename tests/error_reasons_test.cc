// Every error carries a google.rpc.Status with an ErrorInfo (grpc-status-details-bin):
// read off the wire with the raw stubs, and as the C++ client sees it (ReasonOf).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/buffer_id.h"
#include "common/error_reason.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "server/status_convert.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute::test {
namespace {

struct Details {
  google::rpc::ErrorInfo info;
  std::vector<google::rpc::BadRequest::FieldViolation> violations;
};

Details DetailsOf(const grpc::Status& status) {
  google::rpc::Status parsed;
  EXPECT_TRUE(parsed.ParseFromString(status.error_details())) << status.error_message();
  EXPECT_EQ(parsed.code(), status.error_code());
  EXPECT_EQ(parsed.message(), status.error_message());
  Details details;
  int infos = 0;
  for (const google::protobuf::Any& any : parsed.details()) {
    google::rpc::BadRequest bad_request;
    if (any.UnpackTo(&details.info)) ++infos;
    if (any.UnpackTo(&bad_request)) {
      details.violations.assign(bad_request.field_violations().begin(),
                                bad_request.field_violations().end());
    }
  }
  EXPECT_EQ(infos, 1) << status.error_message();
  EXPECT_EQ(details.info.domain(), kErrorDomain);
  return details;
}

// A well-formed buffer id of an instance that is not `instance`.
std::string IdOfAnotherInstance(const std::string& instance) {
  const std::string other = instance == "0badcafe" ? "1badcafe" : "0badcafe";
  return other + std::string(kBufferIdLength - kInstanceIdLength, 'a');
}

grpc::Status Download(TestServer& server, const std::string& id) {
  grpc::ClientContext context;
  v1::DownloadRequest request;
  request.set_buffer_id(id);
  std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> reader =
      server.buffers().Download(&context, request);
  v1::ResultChunk chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

class ErrorReasonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config = LoopbackConfig();
    config.buffer_quota_bytes = 64 << 10;
    absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }
  std::unique_ptr<TestServer> server_;
};

TEST_F(ErrorReasonsTest, MissingBufferIsBufferNotFound) {
  const std::string id = server_->server().instance_id() + std::string(24, '0');
  const grpc::Status status = Download(*server_, id);
  ASSERT_EQ(status.error_code(), grpc::NOT_FOUND);
  const Details details = DetailsOf(status);
  EXPECT_EQ(details.info.reason(), reason::kBufferNotFound);
  EXPECT_EQ(details.info.metadata().at("field"), "buffer_id");
  EXPECT_EQ(ReasonOf(server_->client().Download(id).status()), reason::kBufferNotFound);
}

TEST_F(ErrorReasonsTest, BufferOfAnotherInstanceIsBufferOnOtherReplica) {
  const std::string id = IdOfAnotherInstance(server_->server().instance_id());
  const grpc::Status status = Download(*server_, id);
  ASSERT_EQ(status.error_code(), grpc::FAILED_PRECONDITION);
  const Details details = DetailsOf(status);
  EXPECT_EQ(details.info.reason(), reason::kBufferOnOtherReplica);
  EXPECT_EQ(details.info.metadata().at("owner_instance"), id.substr(0, kInstanceIdLength));
  EXPECT_EQ(details.info.metadata().at("instance"), server_->server().instance_id());
  // A single server names the likelier case: it restarted.
  EXPECT_NE(status.error_message().find("restarted"), std::string::npos) << status.error_message();
  const absl::Status seen = server_->client().Delete(id).status();
  EXPECT_EQ(ReasonOf(seen), reason::kBufferOnOtherReplica);
  EXPECT_EQ(ReasonMetadata(seen, "owner_instance"), id.substr(0, kInstanceIdLength));
}

TEST_F(ErrorReasonsTest, OverQuotaUploadIsQuotaExceeded) {
  const std::vector<double> values(16 << 10, 1.0);  // 128 KiB, the quota is 64 KiB
  const int64_t shape[] = {static_cast<int64_t>(values.size())};
  const absl::Status status =
      server_->client().Upload("big", *client::MakeTensor(values, shape)).status();
  ASSERT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_EQ(ReasonOf(status), reason::kQuotaExceeded);
  EXPECT_EQ(ReasonMetadata(status, "limit_name"), "buffer_quota_bytes");
  EXPECT_EQ(ReasonMetadata(status, "limit"), absl::StrCat(64 << 10));
}

TEST_F(ErrorReasonsTest, LargeSingleMessageResultIsResultTooLargeForOneMessage) {
  const std::vector<double> values(2048, 1.0);  // 16 KiB of result, one chunk of 4 KiB
  const int64_t shape[] = {1, static_cast<int64_t>(values.size())};
  v1::NormalizeRequest request;
  *request.mutable_input()->mutable_tensor() = *client::MakeTensor(values, shape);
  request.mutable_output()->set_single_message(true);
  request.mutable_output()->set_chunk_bytes(4096);
  grpc::ClientContext context;
  auto reader = server_->compute().Normalize(&context, request);
  v1::ResultChunk chunk;
  while (reader->Read(&chunk)) {
  }
  const grpc::Status status = reader->Finish();
  ASSERT_EQ(status.error_code(), grpc::FAILED_PRECONDITION) << status.error_message();
  const Details details = DetailsOf(status);
  EXPECT_EQ(details.info.reason(), reason::kResultTooLargeForOneMessage);
  EXPECT_EQ(details.info.metadata().at("field"), "output.single_message");
  EXPECT_EQ(details.info.metadata().at("limit"), "4096");
}

TEST_F(ErrorReasonsTest, BadArgumentNamesTheFieldAsAViolation) {
  v1::NormalizeRequest request;
  v1::Tensor* tensor = request.mutable_input()->mutable_tensor();
  tensor->set_dtype(v1::FLOAT64);
  tensor->add_shape(1);
  tensor->add_shape(4);
  tensor->set_data(std::string(8, '\0'));  // 4 values declared, 1 given
  grpc::ClientContext context;
  auto reader = server_->compute().Normalize(&context, request);
  v1::ResultChunk chunk;
  while (reader->Read(&chunk)) {
  }
  const grpc::Status status = reader->Finish();
  ASSERT_EQ(status.error_code(), grpc::INVALID_ARGUMENT) << status.error_message();
  const Details details = DetailsOf(status);
  EXPECT_EQ(details.info.reason(), "INVALID_ARGUMENT");
  const std::string field = FieldNamedBy(status.error_message());
  ASSERT_FALSE(field.empty()) << status.error_message();
  EXPECT_EQ(details.info.metadata().at("field"), field);
  ASSERT_EQ(details.violations.size(), 1u);
  EXPECT_EQ(details.violations[0].field(), field);
}

}  // namespace
}  // namespace gpucompute::test
