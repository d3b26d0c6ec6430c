// The one place where request bytes become messages. gRPC's own parse runs
// before any handler and answers bytes that are not a valid message with
// UNIMPLEMENTED and no message (and, inside an Upload stream, as if the stream
// had ended). So every gpucompute method takes its requests as bytes
// (ParsingService) and parses them here (ParseRequest): a malformed request
// gets INVALID_ARGUMENT naming its message type, through the method's own
// error path, so that metrics count it like any other refused call.
#pragma once

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"

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

// `Generated` (v1::Compute, ...)'s Service with each method registered by name
// as a callback whose request is bytes and whose response keeps its type:
//   Unary:           grpc::ServerUnaryReactor*(context, const ByteBuffer*, Response*)
//   ServerStreaming: grpc::ServerWriteReactor<Response>*(context, const ByteBuffer*)
//   ClientStreaming: grpc::ServerReadReactor<ByteBuffer>*(context, Response*)
//   BidiStreaming:   grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>*(context)
template <typename Generated>
class ParsingService : public Generated::Service {
 protected:
  template <typename Response, typename Handler>
  void Unary(absl::string_view method, Handler handler) {
    this->MarkMethodRawCallback(
        Index(method),
        new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, Response>(std::move(handler)));
  }
  template <typename Response, typename Handler>
  void ServerStreaming(absl::string_view method, Handler handler) {
    this->MarkMethodRawCallback(
        Index(method), new grpc::internal::CallbackServerStreamingHandler<grpc::ByteBuffer, Response>(
                           std::move(handler)));
  }
  template <typename Response, typename Handler>
  void ClientStreaming(absl::string_view method, Handler handler) {
    this->MarkMethodRawCallback(
        Index(method), new grpc::internal::CallbackClientStreamingHandler<grpc::ByteBuffer, Response>(
                           std::move(handler)));
  }
  template <typename Handler>
  void BidiStreaming(absl::string_view method, Handler handler) {
    this->MarkMethodRawCallback(
        Index(method), new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                           std::move(handler)));
  }

 private:
  // The generated Service adds its methods in the order of the proto file.
  static int Index(absl::string_view method) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            Generated::service_full_name());
    return service->FindMethodByName(std::string(method))->index();
  }
};

}  // namespace gpucompute
