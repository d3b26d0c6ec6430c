#include "server/status_convert.h"

#include "common/error_reason.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

TEST(StatusConvertTest, KeepsEveryCodeAndTheMessage) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), code == 0 ? "" : "why");
    const grpc::Status converted = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(converted.error_code()), code) << status;
    EXPECT_EQ(converted.error_message(), code == 0 ? "" : "why");
  }
}

TEST(StatusConvertTest, MapsCommonCodesByName) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(), grpc::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(), grpc::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::FAILED_PRECONDITION);
}

TEST(StatusConvertTest, UnknownCodesBecomeUnknown) {
  const absl::Status odd(static_cast<absl::StatusCode>(42), "odd");
  EXPECT_EQ(ToGrpcStatus(odd).error_code(), grpc::UNKNOWN);
  EXPECT_EQ(ToGrpcStatus(odd).error_message(), "odd");
}

TEST(StatusConvertTest, CodeNames) {
  EXPECT_EQ(GrpcCodeName(grpc::OK), "OK");
  EXPECT_EQ(GrpcCodeName(grpc::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(GrpcCodeName(grpc::UNAUTHENTICATED), "UNAUTHENTICATED");
}

google::rpc::ErrorInfo ErrorInfoOf(const grpc::Status& status) {
  google::rpc::Status details;
  EXPECT_TRUE(details.ParseFromString(status.error_details()));
  google::rpc::ErrorInfo info;
  for (const auto& any : details.details()) {
    if (any.UnpackTo(&info)) return info;
  }
  ADD_FAILURE() << "no ErrorInfo";
  return info;
}

TEST(StatusConvertTest, ReasonAndMetadataBecomeErrorInfo) {
  const grpc::Status converted = ToGrpcStatus(WithReason(
      absl::ResourceExhaustedError("full"), reason::kQuotaExceeded, {{"limit", "10"}}));
  EXPECT_EQ(converted.error_message(), "full");
  const google::rpc::ErrorInfo info = ErrorInfoOf(converted);
  EXPECT_EQ(info.reason(), "QUOTA_EXCEEDED");
  EXPECT_EQ(info.domain(), "gpucompute.dev");
  EXPECT_EQ(info.metadata().at("limit"), "10");
}

TEST(StatusConvertTest, EveryErrorHasAReasonAtLeastItsCode) {
  const google::rpc::ErrorInfo info =
      ErrorInfoOf(ToGrpcStatus(absl::InvalidArgumentError("factors.dtype: FLOAT16 is not one")));
  EXPECT_EQ(info.reason(), "INVALID_ARGUMENT");
  EXPECT_EQ(info.metadata().at("field"), "factors.dtype");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).error_details().empty());
}

TEST(StatusConvertTest, FieldNamedByTheMessage) {
  EXPECT_EQ(FieldNamedBy("series[2].x: 3 values"), "series[2].x");
  EXPECT_EQ(FieldNamedBy("Session: too large"), "");
  EXPECT_EQ(FieldNamedBy("memory budget of host exhausted: 3 bytes"), "");
  EXPECT_EQ(FieldNamedBy("no colon"), "");
  EXPECT_EQ(FieldNamedBy("buffer_id 'x' is not a stored buffer"), "buffer_id");
  EXPECT_EQ(FieldNamedBy("input is not set"), "");
}

TEST(StatusConvertTest, ContextKeepsCodeReasonAndMetadata) {
  const absl::Status wrapped =
      WithContext(WithReason(absl::NotFoundError("no such buffer"), reason::kBufferNotFound,
                             {{"field", "input.buffer_id"}}),
                  "chunk 3");
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(wrapped.message(), "chunk 3: no such buffer");
  EXPECT_EQ(ReasonOf(wrapped), reason::kBufferNotFound);
  EXPECT_EQ(ReasonMetadata(wrapped, "field"), "input.buffer_id");
}

}  // namespace
}  // namespace gpucompute
