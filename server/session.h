// Compute.Session: many small requests on one open call (issue #13), one
// reactor per call.
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
// message that is no SessionRequest, or cancelled the call), no request is in
// flight and no answer waits. Cancelling the call cancels every request in
// flight and drops the answers. No reaction blocks.
#pragma once

#include "grpcpp/grpcpp.h"
#include "server/dynamic_batcher.h"
#include "server/service_context.h"

namespace gpucompute {

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartSession(
    ServiceContext& service, DynamicBatcher& batcher, Timer& idle_timer,
    grpc::CallbackServerContext* context);

}  // namespace gpucompute
