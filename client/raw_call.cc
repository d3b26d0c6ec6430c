#include "client/raw_call.h"

#include <utility>

namespace gpucompute::client {

grpc::Status RawUnaryCall(grpc::Channel& channel, grpc::ClientContext& context,
                          const std::string& method, const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* reply) {
  grpc::CompletionQueue queue;
  grpc::GenericStub stub(channel.shared_from_this());
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, method, request, &queue);
  call->StartCall();
  grpc::Status status;
  call->Finish(reply, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);  // the one tag: Finish's, which always completes
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

RawCall::RawCall(grpc::Channel& channel, grpc::ClientContext& context, const std::string& method,
                 Start start)
    : context_(context) {
  if (start == Start::kWithFirstMessage) context_.set_initial_metadata_corked(true);
  grpc::GenericStub stub(channel.shared_from_this());
  call_ = stub.PrepareCall(&context_, method, &queue_);
  if (start == Start::kWithFirstMessage) {
    call_->StartCall(nullptr);  // corked: nothing is sent, nothing completes
    return;
  }
  Step started;
  call_->StartCall(&started);
  Await(started);  // a failed start shows in the first step and in Finish
}

RawCall::~RawCall() {
  if (!finished_) {
    context_.TryCancel();
    Finish();
  }
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

bool RawCall::Write(const grpc::ByteBuffer& message) {
  Step step;
  call_->Write(message, &step);
  return Await(step);
}

bool RawCall::WriteLast(const grpc::ByteBuffer& message) {
  Step step;
  call_->WriteLast(message, grpc::WriteOptions(), &step);
  return Await(step);
}

bool RawCall::WritesDone() {
  Step step;
  call_->WritesDone(&step);
  return Await(step);
}

bool RawCall::Read(grpc::ByteBuffer* message) {
  Step step;
  call_->Read(message, &step);
  return Await(step);
}

grpc::Status RawCall::Finish() {
  finished_ = true;
  grpc::Status status;
  Step step;
  call_->Finish(&status, &step);
  Await(step);
  return status;
}

bool RawCall::Await(Step& step) {
  absl::MutexLock lock(&mu_);
  while (!step.done) {
    if (polling_) {
      completed_.Wait(&mu_);
      continue;
    }
    polling_ = true;
    void* tag = nullptr;
    bool ok = false;
    mu_.Unlock();
    const bool got = queue_.Next(&tag, &ok);
    mu_.Lock();
    polling_ = false;
    completed_.SignalAll();
    if (!got) return false;  // shut down: nothing more completes
    Step* completed = static_cast<Step*>(tag);
    completed->ok = ok;
    completed->done = true;
  }
  return step.ok;
}

}  // namespace gpucompute::client
