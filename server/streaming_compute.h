// Compute.StreamingCompute: one bidirectional stream per call, one reactor each.
//
// The header is checked on the gRPC thread; the call is then admitted (one
// ticket for the whole stream) and the fixed operand (discount factors) placed on
// the device by a request task on the executor, after which the data chunks are
// read. Each received chunk is handed to the executor as a continuation (copy in,
// kernel, copy out: streaming_plan.h), so several chunks run at once and a
// GPU's copies and kernels of consecutive chunks overlap; results are written in
// chunk order, one write in flight.
//
// Flow control: at most --streaming_chunks_in_flight chunks are held per call
// (received and not yet written back); while that many are, no read is started,
// so gRPC's flow control stops the client. A call's server memory is thus at most
// that many input messages (each <= --max_message_bytes, charged to the host
// budget while held) plus their device arrays (charged by the backend) and result
// copies (charged to the host budget until gRPC lets go of them), whatever the
// stream's total size.
//
// Finish is called exactly once, when no executor task and no write is pending
// (a read may be: gRPC ends it). A cancelled or failed call drops its chunks and
// results at once; a reaction never blocks. A call whose client neither sends nor
// takes a message for --stream_idle_timeout while the server waits on it is
// cancelled (DEADLINE_EXCEEDED), so a silent or stalled client holds nothing.
#pragma once

#include "grpcpp/grpcpp.h"
#include "server/service_context.h"

namespace gpucompute {

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartStreamingCompute(
    ServiceContext& service, Timer& idle_timer, grpc::CallbackServerContext* context);

}  // namespace gpucompute
