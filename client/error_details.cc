#include "client/error_details.h"

#include "common/error_reason.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace gpucompute {

absl::Status WithErrorDetails(absl::Status status, const std::string& details) {
  google::rpc::Status parsed;
  if (status.ok() || details.empty() || !parsed.ParseFromString(details)) return status;
  for (const google::protobuf::Any& detail : parsed.details()) {
    google::rpc::ErrorInfo info;
    if (!detail.UnpackTo(&info)) continue;
    status = WithReason(std::move(status), info.reason());
    for (const auto& [key, value] : info.metadata()) AddReasonMetadata(status, key, value);
    break;
  }
  return status;
}

}  // namespace gpucompute
