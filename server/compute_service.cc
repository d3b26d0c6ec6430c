#include "server/compute_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/operations.h"
#include "server/result_stream.h"
#include "server/security.h"

namespace gpucompute {
namespace {

// A compute request that passed admission and every check, ready to run.
struct Accepted {
  ResultStreamReactor::Output output;
  PreparedOperation prepared;
};

template <typename Request, typename PrepareFn>
absl::StatusOr<Accepted> Accept(ServiceContext& service, const grpc::CallbackServerContext& context,
                                const Request& request, Operation op, PrepareFn prepare) {
  const v1::OutputOptions& options = request.output();
  Accepted accepted;
  GC_ASSIGN_OR_RETURN(accepted.output,
                      AdmitStream(service, context, options.chunk_bytes(), "output.chunk_bytes"));
  GC_RETURN_IF_ERROR(CheckBufferName(options.buffer_name(), "output.buffer_name"));
  const RequestScope scope{service.store, PrincipalOf(context), service.config.max_elements};
  GC_ASSIGN_OR_RETURN(accepted.prepared, prepare(request, scope));
  if (options.keep_on_device()) {
    // The output shape was checked against max_elements, so this cannot overflow.
    uint64_t bytes = ElementSize(accepted.prepared.out_dtype);
    for (int64_t extent : accepted.prepared.out_shape) bytes *= static_cast<uint64_t>(extent);
    GC_ASSIGN_OR_RETURN(
        accepted.output.keep,
        service.Reserve(bytes, absl::StrCat(OperationLabel(op), " result kept on device"),
                        scope.principal));
    accepted.output.buffer_name = options.buffer_name();
  }
  return accepted;
}

}  // namespace

template <typename Request, typename PrepareFn>
grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::Run(
    grpc::CallbackServerContext* context, const Request& request, Operation op,
    PrepareFn prepare) {
  auto* reactor = new ResultStreamReactor(service_, context, op);
  const absl::Time start = absl::Now();
  absl::StatusOr<Accepted> accepted = Accept(service_, *context, request, op, prepare);
  if (!accepted.ok()) {
    reactor->Reject(accepted.status());
    return reactor;
  }
  reactor->Start(std::move(accepted->output), absl::Now() - start,
                 [this, prepared = std::make_shared<PreparedOperation>(
                            std::move(accepted->prepared))](
                     OpContext& ctx) -> absl::StatusOr<StreamSource> {
                   StreamSource source;
                   GC_ASSIGN_OR_RETURN(source.array,
                                       Execute(*prepared, service_.backend, service_.device_queues,
                                               service_.metrics, ctx, source.times));
                   return source;
                 });
  return reactor;
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::DiscountProduct(
    grpc::CallbackServerContext* context, const v1::DiscountProductRequest* request) {
  return Run(context, *request, Operation::kDiscountProduct, PrepareDiscountProduct);
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::HaversineGrid(
    grpc::CallbackServerContext* context, const v1::HaversineGridRequest* request) {
  return Run(context, *request, Operation::kHaversineGrid, PrepareHaversineGrid);
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::Normalize(
    grpc::CallbackServerContext* context, const v1::NormalizeRequest* request) {
  return Run(context, *request, Operation::kNormalize, PrepareNormalize);
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::LombScargle(
    grpc::CallbackServerContext* context, const v1::LombScargleRequest* request) {
  return Run(context, *request, Operation::kLombScargle, PrepareLombScargle);
}

}  // namespace gpucompute
