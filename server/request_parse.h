// The one place where request bytes become messages. gRPC's own parse runs
// before any handler and answers bytes that are not a valid message with
// UNIMPLEMENTED and no message (and, inside an Upload stream, as if the stream
// had ended). So every gpucompute method is the generated service's raw
// callback method (WithRawCallbackMethod_*: requests and responses are bytes)
// and parses its requests here (ParseRequest): a malformed request gets
// INVALID_ARGUMENT naming its message type, through the method's own error
// path, so that metrics count it like any other refused call. Results go out as
// bytes framed without a protobuf copy (gpucompute/v1/bulk_wire.h).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/grpcpp.h"

namespace gpucompute {

// Parses `bytes` into `message`; `what` names them in the error ("request",
// "upload message 2"): "request is not a valid gpucompute.v1.NormalizeRequest: ...".
absl::Status ParseMessage(const grpc::ByteBuffer& bytes, absl::string_view what,
                          google::protobuf::MessageLite& message);

template <typename Message>
absl::StatusOr<Message> ParseRequest(const grpc::ByteBuffer& bytes,
                                     absl::string_view what = "request") {
  Message message;
  if (absl::Status parsed = ParseMessage(bytes, what, message); !parsed.ok()) return parsed;
  return message;
}

// A unary call's answer: `response` serialized into the call's response bytes
// when `status` is OK (a raw method's response is bytes). Call it just before
// Finish, which sends the bytes.
grpc::Status AnswerWith(const grpc::Status& status, const google::protobuf::MessageLite& response,
                        grpc::ByteBuffer* bytes);

}  // namespace gpucompute
