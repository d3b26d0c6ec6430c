#include "server/session_request.h"

#include <cstdlib>
#include <vector>

#include "gpucompute/v1/bulk_wire.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute {

grpc::ByteBuffer ErrorAnswer(uint64_t id, const grpc::Status& status) {
  v1::SessionResponse response;
  response.set_id(id);
  response.mutable_error()->set_code(status.error_code());
  response.mutable_error()->set_message(status.error_message());
  response.mutable_error()->set_details(status.error_details());
  return v1::wire::SerializedMessage(response);
}

void SessionRequestCall::StartWriteAndFinish(grpc::ByteBuffer* message, grpc::WriteOptions,
                                             const grpc::Status&) {
  // SessionResponse.complete has ResultChunk.complete's field number: the id,
  // then the unary call's message as it is (its slices referenced, not copied).
  v1::SessionResponse id;
  id.set_id(id_);
  std::vector<grpc::Slice> slices = {grpc::Slice(id.SerializeAsString())};
  std::vector<grpc::Slice> result;
  (void)message->Dump(&result);  // fails only for an empty buffer: then no slices
  slices.insert(slices.end(), result.begin(), result.end());
  message->Clear();
  session_->Answer(this, grpc::ByteBuffer(slices.data(), slices.size()));
}

void SessionRequestCall::Finish(const grpc::Status& status) {
  session_->Answer(this, ErrorAnswer(id_, status));
}

void SessionRequestCall::StartWrite(grpc::ByteBuffer*) { std::abort(); }

}  // namespace gpucompute
