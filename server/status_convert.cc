#include "server/status_convert.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "common/error_reason.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace gpucompute {
namespace {

google::rpc::ErrorInfo ErrorInfoOf(const absl::Status& status, grpc::StatusCode code) {
  google::rpc::ErrorInfo info;
  const std::string reason = ReasonOf(status);
  info.set_reason(reason.empty() ? std::string(GrpcCodeName(code)) : reason);
  info.set_domain(std::string(kErrorDomain));
  auto& metadata = *info.mutable_metadata();
  status.ForEachPayload([&metadata](absl::string_view key, const absl::Cord& value) {
    if (absl::ConsumePrefix(&key, kMetadataPayloadPrefix)) {
      metadata[std::string(key)] = std::string(value);
    }
  });
  if (metadata.find("field") == metadata.end()) {
    const std::string field = FieldNamedBy(status.message());
    if (!field.empty()) metadata["field"] = field;
  }
  return info;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numbering (0..16), by design
  // of both libraries; anything else is reported as UNKNOWN.
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code = (code >= 0 && code <= grpc::UNAUTHENTICATED)
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::UNKNOWN;
  google::rpc::Status details;
  details.set_code(grpc_code);
  details.set_message(std::string(status.message()));
  const google::rpc::ErrorInfo info = ErrorInfoOf(status, grpc_code);
  details.add_details()->PackFrom(info);
  const auto field = info.metadata().find("field");
  if ((grpc_code == grpc::INVALID_ARGUMENT || grpc_code == grpc::OUT_OF_RANGE) &&
      field != info.metadata().end()) {
    google::rpc::BadRequest bad_request;
    google::rpc::BadRequest::FieldViolation* violation = bad_request.add_field_violations();
    violation->set_field(field->second);
    violation->set_description(std::string(status.message()));
    violation->set_reason(info.reason());
    details.add_details()->PackFrom(bad_request);
  }
  return grpc::Status(grpc_code, std::string(status.message()), details.SerializeAsString());
}

std::string FieldNamedBy(absl::string_view message) {
  // Field paths are lower snake case with dots and indices ("factors.dtype",
  // "series[2].x"), followed by ':' ("input: ..."), or by a space when the path
  // cannot be a word ("buffer_id 'x' is not ..."); "Session: ..." or a sentence
  // ("memory budget ...") is not one.
  const size_t end = message.find_first_of(": ");
  if (end == 0 || end == absl::string_view::npos) return "";
  const absl::string_view field = message.substr(0, end);
  if (!absl::ascii_islower(field[0])) return "";
  bool word = true;
  for (const char c : field) {
    if (absl::ascii_islower(c) || absl::ascii_isdigit(c)) continue;
    if (c != '_' && c != '.' && c != '[' && c != ']') return "";
    word = false;
  }
  if (message[end] == ' ' && word) return "";
  return std::string(field);
}

absl::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "CANCELLED";
    case grpc::UNKNOWN: return "UNKNOWN";
    case grpc::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND: return "NOT_FOUND";
    case grpc::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::ABORTED: return "ABORTED";
    case grpc::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::INTERNAL: return "INTERNAL";
    case grpc::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::DATA_LOSS: return "DATA_LOSS";
    case grpc::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // namespace gpucompute
