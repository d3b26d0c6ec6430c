// One request of a Compute.Session as the call its ResultStream
// (server/result_stream.h) writes to. A session's result is one message or a
// status (AcceptCompute holds its requests to one message), so the stream's
// only writes are StartWriteAndFinish (the complete result) and Finish (the
// status): each becomes the request's SessionResponse, handed to the session,
// which writes it in turn with the other requests' answers and then ends the
// request (OnDone, which deletes it).
#pragma once

#include <cstdint>

#include "grpcpp/grpcpp.h"

namespace gpucompute {

class SessionRequestCall;

// SessionResponse{id, error: status}.
grpc::ByteBuffer ErrorAnswer(uint64_t id, const grpc::Status& status);

// Where a session's answers go (its reactor, server/session.h).
class SessionAnswers {
 public:
  // `answer` is `request`'s whole SessionResponse. The session calls
  // request->OnDone() once it is written or dropped.
  virtual void Answer(SessionRequestCall* request, grpc::ByteBuffer answer) = 0;

 protected:
  ~SessionAnswers() = default;
};

class SessionRequestCall {
 public:
  SessionRequestCall() = default;
  SessionRequestCall(const SessionRequestCall&) = delete;
  SessionRequestCall& operator=(const SessionRequestCall&) = delete;
  virtual ~SessionRequestCall() = default;

  // Right after construction, before the request starts.
  void Bind(SessionAnswers* session, uint64_t id) {
    session_ = session;
    id_ = id;
  }
  uint64_t id() const { return id_; }

  // The reactions ResultStream implements, as a gRPC call's. OnWriteDone never
  // comes (no StartWrite); the session calls OnCancel when the request or the
  // whole session is cancelled, and OnDone last.
  virtual void OnWriteDone(bool ok) = 0;
  virtual void OnCancel() = 0;
  virtual void OnDone() = 0;

 protected:
  // The complete result (ResultChunk.complete) with its status, OK.
  void StartWriteAndFinish(grpc::ByteBuffer* message, grpc::WriteOptions options,
                           const grpc::Status& status);
  // The request's failure.
  void Finish(const grpc::Status& status);
  // Never called: a session's result is one message (StartWriteAndFinish).
  void StartWrite(grpc::ByteBuffer* message);

 private:
  SessionAnswers* session_ = nullptr;
  uint64_t id_ = 0;
};

}  // namespace gpucompute
