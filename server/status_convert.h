// The one place where internal absl::Status becomes a grpc::Status (at the RPC edge).
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gpucompute {

grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ... as used in metric labels and logs.
absl::string_view GrpcCodeName(grpc::StatusCode code);

}  // namespace gpucompute
