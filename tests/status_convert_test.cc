#include "server/status_convert.h"

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

}  // namespace
}  // namespace gpucompute
