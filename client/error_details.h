// The reason and metadata of a server error, read from the google.rpc.Status the
// server sends as the status details (grpc-status-details-bin): clients decide by
// the reason (common/error_reason.h), never by the message.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gpucompute {

// `status` with the google.rpc.ErrorInfo in `details` (a serialized
// google.rpc.Status; empty or unreadable: none) attached as its reason and metadata.
absl::Status WithErrorDetails(absl::Status status, const std::string& details);

}  // namespace gpucompute
