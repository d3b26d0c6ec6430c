// Compute.Session: many small requests on one open call, which spares each its own
// call's set-up and teardown; one reactor per call.
//
// Each SessionRequest is parsed on the gRPC thread as it arrives. A compute
// request takes the path of the compute RPCs (server/compute_request.h), held to
// a result of one message, on a ResultStream of its own (SessionRequestStream):
// it is admitted like a call of its own (over an in-flight limit it is answered
// RESOURCE_EXHAUSTED and the session goes on), batched and run as one, and
// answered with its own result or status. A cancel answers the request in flight
// with that id CANCELLED at once (as a cancelled call's client hears at once) and
// cancels its work, which ends when it can; the others go on. Several requests run at once; answers are written in the
// order they come, one write in flight, the others queued behind it, and a
// request is ended (OnDone) once its answer is written.
//
// Reading stops while max_in_flight_per_connection answers wait to be written,
// so a client that sends without reading holds at most that many, and goes on
// as they are written. An answer that waits longer than stream_idle_timeout
// cancels the call (ResultStream's stall limit).
//
// Finish is called exactly once: once the client has half-closed (or sent a
// message that is no SessionRequest, or cancelled the call, or the server
// drains), no request is in flight and no answer waits. Cancelling the call
// cancels every request in flight and drops the answers. No reaction blocks.
//
// A draining server (Sessions::Drain) reads no more requests and ends every
// session with UNAVAILABLE once its requests in flight are answered, so that an
// idle open session does not hold the drain for its whole grace period; its
// client opens a new session, elsewhere or after the restart.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/dynamic_batcher.h"
#include "server/service_context.h"

namespace gpucompute {

class SessionReactor;

// The server's open sessions.
class Sessions {
 public:
  Sessions(ServiceContext& service, DynamicBatcher& batcher, Timer& idle_timer)
      : service_(service), batcher_(batcher), idle_timer_(idle_timer) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Start(
      grpc::CallbackServerContext* context);
  // Ends every open session and every later one as the header says.
  void Drain();

 private:
  friend class SessionReactor;
  // A session's OnDone: it is no longer open.
  void Remove(SessionReactor* session);

  ServiceContext& service_;
  DynamicBatcher& batcher_;
  Timer& idle_timer_;
  absl::Mutex mu_;
  absl::flat_hash_set<SessionReactor*> open_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpucompute
