#include "server/compute_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/operations.h"
#include "server/result_stream.h"
#include "server/security.h"

namespace gpucompute {
namespace {

constexpr size_t kMaxBufferNameBytes = 256;

}  // namespace

template <typename Request, typename PrepareFn>
grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::Run(
    grpc::CallbackServerContext* context, const Request& request, Operation op, RpcMethod method,
    PrepareFn prepare) {
  auto* reactor = new ResultStreamReactor(service_, context, op, method);
  const absl::Time start = absl::Now();
  absl::StatusOr<Admission::Ticket> ticket = service_.Admit(*context);
  if (!ticket.ok()) {
    reactor->Reject(ticket.status());
    return reactor;
  }
  const v1::OutputOptions& options = request.output();
  ResultStreamReactor::Output output;
  output.ticket = *std::move(ticket);
  absl::StatusOr<uint32_t> chunk_bytes =
      service_.ResolveChunkBytes(options.chunk_bytes(), "output.chunk_bytes");
  if (!chunk_bytes.ok()) {
    reactor->Reject(chunk_bytes.status());
    return reactor;
  }
  output.chunk_bytes = *chunk_bytes;
  if (options.buffer_name().size() > kMaxBufferNameBytes) {
    reactor->Reject(absl::InvalidArgumentError(
        absl::StrCat("output.buffer_name has ", options.buffer_name().size(),
                     " bytes; the limit is ", kMaxBufferNameBytes)));
    return reactor;
  }
  const RequestScope scope{service_.store, PrincipalOf(*context), service_.config.max_elements};
  absl::StatusOr<PreparedOperation> prepared = prepare(request, scope);
  if (!prepared.ok()) {
    reactor->Reject(prepared.status());
    return reactor;
  }
  if (options.keep_on_device()) {
    // The output shape was checked against max_elements, so this cannot overflow.
    uint64_t bytes = ElementSize(prepared->out_dtype);
    for (int64_t extent : prepared->out_shape) bytes *= static_cast<uint64_t>(extent);
    absl::StatusOr<BufferStore::Reservation> reservation = service_.store.Reserve(
        bytes, absl::StrCat(OperationLabel(op), " result kept on device"), scope.principal);
    if (!reservation.ok()) {
      service_.metrics.Rejected(Rejection::kQuota);
      reactor->Reject(reservation.status());
      return reactor;
    }
    output.keep = *std::move(reservation);
    output.buffer_name = options.buffer_name();
  }
  reactor->Start(std::move(output), absl::Now() - start,
                 [this, prepared = std::make_shared<PreparedOperation>(*std::move(prepared))](
                     OpContext& ctx) -> absl::StatusOr<StreamSource> {
                   StreamSource source;
                   absl::StatusOr<std::shared_ptr<Array>> out =
                       Execute(*prepared, service_.backend, service_.device_queues, service_.metrics, ctx,
                               source.times);
                   if (!out.ok()) return out.status();
                   source.array = *std::move(out);
                   return source;
                 });
  return reactor;
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::DiscountProduct(
    grpc::CallbackServerContext* context, const v1::DiscountProductRequest* request) {
  return Run(context, *request, Operation::kDiscountProduct, RpcMethod::kDiscountProduct,
             PrepareDiscountProduct);
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::HaversineGrid(
    grpc::CallbackServerContext* context, const v1::HaversineGridRequest* request) {
  return Run(context, *request, Operation::kHaversineGrid, RpcMethod::kHaversineGrid,
             PrepareHaversineGrid);
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::Normalize(
    grpc::CallbackServerContext* context, const v1::NormalizeRequest* request) {
  return Run(context, *request, Operation::kNormalize, RpcMethod::kNormalize, PrepareNormalize);
}

grpc::ServerWriteReactor<v1::ResultChunk>* ComputeService::LombScargle(
    grpc::CallbackServerContext* context, const v1::LombScargleRequest* request) {
  return Run(context, *request, Operation::kLombScargle, RpcMethod::kLombScargle,
             PrepareLombScargle);
}

}  // namespace gpucompute
