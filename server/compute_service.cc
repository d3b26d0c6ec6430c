#include "server/compute_service.h"

#include <memory>
#include <utility>

#include "server/compute_request.h"
#include "server/result_stream.h"
#include "server/session.h"
#include "server/streaming_compute.h"

namespace gpucompute {

ComputeService::ComputeService(ServiceContext& service)
    : service_(service), batcher_(service), sessions_(service, batcher_, idle_timer_) {
  Serve<v1::DiscountProductRequest>();
  Serve<v1::HaversineGridRequest>();
  Serve<v1::NormalizeRequest>();
  Serve<v1::LombScargleRequest>();
  BidiStreaming("StreamingCompute", [this](grpc::CallbackServerContext* context) {
    return StartStreamingCompute(service_, idle_timer_, context);
  });
  BidiStreaming("Session", [this](grpc::CallbackServerContext* context) {
    return sessions_.Start(context);
  });
}

template <typename Request>
void ComputeService::Serve() {
  constexpr Operation op = ComputeOp<Request>::kOperation;
  ServerStreaming<grpc::ByteBuffer>(ComputeOp<Request>::kMethod, [this](
                                        grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* bytes) {
    auto* reactor = new ResultStreamReactor(service_, idle_timer_, context, op, RpcMethodOf(op));
    const absl::Time start = absl::Now();
    absl::StatusOr<AcceptedCompute> accepted = [&]() -> absl::StatusOr<AcceptedCompute> {
      absl::StatusOr<Request> request = ParseRequest<Request>(*bytes);
      if (!request.ok()) return request.status();
      return AcceptCompute(service_, *context,
                           std::make_shared<const Request>(*std::move(request)),
                           ResultFraming::kAsAsked);
    }();
    StartCompute(service_, batcher_, op, start, std::move(accepted), *reactor);
    return reactor;
  });
}

}  // namespace gpucompute
