// gpucompute.v1.Compute: each RPC parses and checks its request on the gRPC
// thread and hands the work to a ResultStreamReactor, which runs it on the executor
// (server/compute_request.h); StreamingCompute and Session have reactors of their
// own (streaming_compute.h, session.h).
#pragma once

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/dynamic_batcher.h"
#include "server/request_parse.h"
#include "server/service_context.h"
#include "server/session.h"

namespace gpucompute {

class ComputeService final : public ParsingService<v1::Compute> {
 public:
  explicit ComputeService(ServiceContext& service);
  // Requests waiting in the dynamic batcher for a thread.
  size_t batching() const { return batcher_.waiting(); }
  // The server drains: open sessions end once their requests are answered.
  void EndSessions() { sessions_.Drain(); }

 private:
  // Registers the compute RPC that takes `Request`.
  template <typename Request>
  void Serve();

  ServiceContext& service_;
  DynamicBatcher batcher_;
  // stream_idle_timeout of StreamingCompute calls and result writes (sessions' too)
  Timer idle_timer_;
  Sessions sessions_;
};

}  // namespace gpucompute
