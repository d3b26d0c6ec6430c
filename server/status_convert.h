// The one place where internal absl::Status becomes a grpc::Status (at the RPC edge).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gpucompute {

// Code and message as they are, and the details (grpc-status-details-bin) a
// serialized google.rpc.Status with a google.rpc.ErrorInfo: the status's reason
// (common/error_reason.h), else its code's name, domain kErrorDomain and the
// metadata attached; for INVALID_ARGUMENT and OUT_OF_RANGE also a
// google.rpc.BadRequest naming the field.
grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ... as used in metric labels and logs.
absl::string_view GrpcCodeName(grpc::StatusCode code);

// The field a message names by the project's convention "field.path: why", or "".
std::string FieldNamedBy(absl::string_view message);

}  // namespace gpucompute
