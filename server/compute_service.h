// gpucompute.v1.Compute: each RPC parses and checks its request on the gRPC
// thread and hands the work to a ResultStreamReactor, which runs it on the executor
// (server/compute_request.h); StreamingCompute and Session have reactors of their
// own (streaming_compute.h, session.h).
#pragma once

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/dynamic_batcher.h"
#include "server/service_context.h"
#include "server/session.h"

namespace gpucompute {

// Every method raw: requests and results are bytes (request_parse.h).
using RawComputeService = v1::Compute::WithRawCallbackMethod_DiscountProduct<
    v1::Compute::WithRawCallbackMethod_HaversineGrid<v1::Compute::WithRawCallbackMethod_Normalize<
        v1::Compute::WithRawCallbackMethod_LombScargle<
            v1::Compute::WithRawCallbackMethod_StreamingCompute<
                v1::Compute::WithRawCallbackMethod_Session<v1::Compute::Service>>>>>>;

class ComputeService final : public RawComputeService {
 public:
  explicit ComputeService(ServiceContext& service);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* DiscountProduct(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* HaversineGrid(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Normalize(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* LombScargle(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamingCompute(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Session(
      grpc::CallbackServerContext* context) override;
  // Requests waiting in the dynamic batcher for a thread.
  size_t batching() const { return batcher_.waiting(); }
  // The server drains: open sessions end once their requests are answered.
  void EndSessions() { sessions_.Drain(); }

 private:
  // The compute RPC that takes `Request`.
  template <typename Request>
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeCall(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* bytes);

  ServiceContext& service_;
  DynamicBatcher batcher_;
  // stream_idle_timeout of StreamingCompute calls and result writes (sessions' too)
  Timer idle_timer_;
  Sessions sessions_;
};

}  // namespace gpucompute
