// gpucompute.v1.Compute: each RPC checks its request on the gRPC thread and hands
// the work to a ResultStreamReactor, which runs it on the executor.
#pragma once

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/service_context.h"

namespace gpucompute {

class ComputeService final : public v1::Compute::CallbackService {
 public:
  explicit ComputeService(ServiceContext& service) : service_(service) {}

  grpc::ServerWriteReactor<v1::ResultChunk>* DiscountProduct(
      grpc::CallbackServerContext* context, const v1::DiscountProductRequest* request) override;
  grpc::ServerWriteReactor<v1::ResultChunk>* HaversineGrid(
      grpc::CallbackServerContext* context, const v1::HaversineGridRequest* request) override;
  grpc::ServerWriteReactor<v1::ResultChunk>* Normalize(
      grpc::CallbackServerContext* context, const v1::NormalizeRequest* request) override;
  grpc::ServerWriteReactor<v1::ResultChunk>* LombScargle(
      grpc::CallbackServerContext* context, const v1::LombScargleRequest* request) override;

 private:
  template <typename Request, typename PrepareFn>
  grpc::ServerWriteReactor<v1::ResultChunk>* Run(grpc::CallbackServerContext* context,
                                                 const Request& request, Operation op,
                                                 PrepareFn prepare);

  ServiceContext& service_;
};

}  // namespace gpucompute
