#include "server/compute_service.h"

#include <memory>
#include <utility>

#include "server/compute_request.h"
#include "server/request_parse.h"
#include "server/result_stream.h"
#include "server/session.h"
#include "server/streaming_compute.h"

namespace gpucompute {

ComputeService::ComputeService(ServiceContext& service)
    : service_(service), batcher_(service), sessions_(service, batcher_, idle_timer_) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeService::DiscountProduct(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return ComputeCall<v1::DiscountProductRequest>(context, request);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeService::HaversineGrid(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return ComputeCall<v1::HaversineGridRequest>(context, request);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeService::Normalize(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return ComputeCall<v1::NormalizeRequest>(context, request);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeService::LombScargle(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return ComputeCall<v1::LombScargleRequest>(context, request);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ComputeService::StreamingCompute(
    grpc::CallbackServerContext* context) {
  return StartStreamingCompute(service_, idle_timer_, context);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ComputeService::Session(
    grpc::CallbackServerContext* context) {
  return sessions_.Start(context);
}

template <typename Request>
grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeService::ComputeCall(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  constexpr Operation op = ComputeOp<Request>::kOperation;
  auto* reactor = new ResultStreamReactor(service_, idle_timer_, context, op, RpcMethodOf(op));
  const absl::Time start = absl::Now();
  absl::StatusOr<AcceptedCompute> accepted = [&]() -> absl::StatusOr<AcceptedCompute> {
    absl::StatusOr<Request> request = ParseRequest<Request>(*bytes);
    if (!request.ok()) return request.status();
    return AcceptCompute(service_, *context, std::make_shared<const Request>(*std::move(request)),
                         ResultFraming::kAsAsked);
  }();
  StartCompute(service_, batcher_, op, start, std::move(accepted), *reactor);
  return reactor;
}

}  // namespace gpucompute
