// Calls of gpucompute methods on raw messages (proto/gpucompute/v1/bulk_wire.h
// frames them, so that bulk data goes from and to memory without a protobuf
// copy), through gRPC's public generic stub. Each step blocks until it is done,
// as the synchronous API's do, on a completion queue of the call's own.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace gpucompute::client {

// One unary call of `method` ("/gpucompute.v1.Compute/Normalize"): the request
// out, the reply or the status back, in one wait.
grpc::Status RawUnaryCall(grpc::Channel& channel, grpc::ClientContext& context,
                          const std::string& method, const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* reply);

// One streaming call of `method`. One thread may read while another writes;
// Finish ends it (the destructor cancels a call not finished).
class RawCall {
 public:
  // When the call's metadata goes out: at once, or with the first message (one
  // batch, for a caller that writes before it reads).
  enum class Start { kNow, kWithFirstMessage };

  RawCall(grpc::Channel& channel, grpc::ClientContext& context, const std::string& method,
          Start start);
  ~RawCall();
  RawCall(const RawCall&) = delete;
  RawCall& operator=(const RawCall&) = delete;

  // False once the call has ended: Finish says why.
  bool Write(const grpc::ByteBuffer& message);
  // The message and the half-close in one step.
  bool WriteLast(const grpc::ByteBuffer& message);
  bool WritesDone();
  // False at the end of the stream (or of the call).
  bool Read(grpc::ByteBuffer* message);
  grpc::Status Finish();

 private:
  // A step in flight; its address is its completion-queue tag.
  struct Step {
    bool done = false;
    bool ok = false;
  };
  // Blocks until `step` completes and returns its outcome. The one thread that
  // polls the queue hands a completion that is not its own to the thread that
  // waits for it.
  bool Await(Step& step);

  grpc::ClientContext& context_;
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool finished_ = false;
  absl::Mutex mu_;
  absl::CondVar completed_;
  bool polling_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpucompute::client
