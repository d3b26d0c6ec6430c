// The tests' main: gtest's, with gRPC kept initialized for the whole process, so that
// the servers and channels of one test never race gRPC's shutdown after the last
// (common/grpc_lifetime.h).
#include "common/grpc_lifetime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  gpucompute::KeepGrpcInitializedUntilExit();
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
