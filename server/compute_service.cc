#include "server/compute_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/operations.h"
#include "server/result_stream.h"
#include "server/security.h"
#include "server/shared_memory_service.h"
#include "server/streaming_compute.h"

namespace gpucompute {
namespace {

// The output shape was checked against max_elements, so this cannot overflow.
uint64_t ResultBytes(const PreparedOperation& prepared) {
  uint64_t bytes = ElementSize(prepared.out_dtype);
  for (int64_t extent : prepared.out_shape) bytes *= static_cast<uint64_t>(extent);
  return bytes;
}

// A compute request that parsed and passed admission and every check, ready
// to run. Its inline operands point into the request, which the work keeps.
template <typename Request>
struct Accepted {
  ResultStreamReactor::Output output;
  std::shared_ptr<const Request> request;
  PreparedOperation prepared;
};

template <typename Request, typename PrepareFn>
absl::StatusOr<Accepted<Request>> Accept(ServiceContext& service,
                                         const grpc::CallbackServerContext& context,
                                         const grpc::ByteBuffer& bytes, Operation op,
                                         PrepareFn prepare) {
  GC_ASSIGN_OR_RETURN(Request parsed, ParseRequest<Request>(bytes));
  Accepted<Request> accepted;
  accepted.request = std::make_shared<const Request>(std::move(parsed));
  const Request& request = *accepted.request;
  const v1::OutputOptions& options = request.output();
  GC_ASSIGN_OR_RETURN(accepted.output,
                      AdmitStream(service, context, options.chunk_bytes(), "output.chunk_bytes"));
  GC_RETURN_IF_ERROR(CheckBufferName(options.buffer_name(), "output.buffer_name"));
  accepted.output.accept_complete = options.accept_complete_result();
  RequestScope scope{service.store, PrincipalOf(context), service.config.max_elements};
  if (absl::StatusOr<const SharedMemoryRegistry*> regions = SharedMemoryFor(service, context);
      regions.ok()) {
    scope.regions = *regions;
  } else {
    scope.regions_refusal = regions.status();
  }
  GC_ASSIGN_OR_RETURN(accepted.prepared, prepare(request, scope));
  GC_ASSIGN_OR_RETURN(accepted.output.lane, service.LaneFor(op, accepted.prepared.work));
  if (options.has_shared_memory()) {
    if (options.keep_on_device()) {
      return absl::InvalidArgumentError(
          "output.shared_memory and output.keep_on_device are both set; choose one");
    }
    GC_RETURN_IF_ERROR(ResolveOutputSlice(options.shared_memory(), scope, accepted.prepared));
    accepted.output.shared_memory_region_id = options.shared_memory().region_id();
  }
  const uint64_t result_bytes = ResultBytes(accepted.prepared);
  if (options.single_message()) {
    accepted.output.accept_complete = true;
    // Kept and shared-memory results are one message whatever their size.
    if (!options.keep_on_device() && !options.has_shared_memory() &&
        result_bytes > accepted.output.chunk_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "output.single_message: the result is ", result_bytes, " bytes, more than one chunk of ",
          accepted.output.chunk_bytes, " (output.chunk_bytes, else --default_chunk_bytes); "
          "read it as a stream"));
    }
  }
  if (options.keep_on_device()) {
    GC_ASSIGN_OR_RETURN(
        accepted.output.keep,
        service.Reserve(result_bytes, absl::StrCat(OperationLabel(op), " result kept on device"),
                        scope.principal));
    accepted.output.buffer_name = options.buffer_name();
  }
  return accepted;
}

}  // namespace

ComputeService::ComputeService(ServiceContext& service) : service_(service), batcher_(service) {
  Serve<v1::DiscountProductRequest>("DiscountProduct", Operation::kDiscountProduct,
                                    PrepareDiscountProduct);
  Serve<v1::HaversineGridRequest>("HaversineGrid", Operation::kHaversineGrid,
                                  PrepareHaversineGrid);
  Serve<v1::NormalizeRequest>("Normalize", Operation::kNormalize, PrepareNormalize);
  Serve<v1::LombScargleRequest>("LombScargle", Operation::kLombScargle, PrepareLombScargle);
  BidiStreaming("StreamingCompute", [this](grpc::CallbackServerContext* context) {
    return StartStreamingCompute(service_, idle_timer_, context);
  });
}

template <typename Request, typename PrepareFn>
void ComputeService::Serve(absl::string_view method, Operation op, PrepareFn prepare) {
  ServerStreaming<grpc::ByteBuffer>(method, [this, op, prepare](grpc::CallbackServerContext* context,
                                                               const grpc::ByteBuffer* bytes) {
    auto* reactor = new ResultStreamReactor(service_, idle_timer_, context, op);
    const absl::Time start = absl::Now();
    absl::StatusOr<Accepted<Request>> accepted =
        Accept<Request>(service_, *context, *bytes, op, prepare);
    if (!accepted.ok()) {
      reactor->Reject(accepted.status());
      return reactor;
    }
    if (batcher_.Accepts(accepted->prepared, accepted->output.keep.has_value())) {
      reactor->StartInBatch(std::move(accepted->output), absl::Now() - start, batcher_,
                            BatchMember{.op = op,
                                        .prepared = std::move(accepted->prepared),
                                        .request = std::move(accepted->request)});
      return reactor;
    }
    const bool result_to_host = !accepted->output.keep.has_value() &&
                                ResultBytes(accepted->prepared) <= accepted->output.chunk_bytes;
    reactor->Start(std::move(accepted->output), absl::Now() - start,
                   [this, request = std::move(accepted->request), result_to_host,
                    prepared = std::make_shared<PreparedOperation>(std::move(accepted->prepared))](
                       OpContext& ctx) -> absl::StatusOr<StreamSource> {
                     StreamSource source;
                     GC_ASSIGN_OR_RETURN(source.array,
                                         Execute(*prepared, service_.backend,
                                                 service_.device_queues, service_.metrics, ctx,
                                                 source.times, result_to_host));
                     return source;
                   });
    return reactor;
  });
}

}  // namespace gpucompute
