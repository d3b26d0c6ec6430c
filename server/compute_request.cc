#include "server/compute_request.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "server/security.h"
#include "server/shared_memory_service.h"

namespace gpucompute {
namespace {

// The output shape was checked against max_elements, so this cannot overflow.
uint64_t ResultBytes(const PreparedOperation& prepared) {
  uint64_t bytes = ElementSize(prepared.out_dtype);
  for (int64_t extent : prepared.out_shape) bytes *= static_cast<uint64_t>(extent);
  return bytes;
}

// FAILED_PRECONDITION for a result of `result_bytes` that must be one message of
// at most `chunk_bytes` but is larger.
absl::Status RefuseLargeResult(const v1::OutputOptions& options, absl::string_view method,
                               uint64_t result_bytes, uint32_t chunk_bytes) {
  const std::string size = absl::StrCat("the result is ", result_bytes,
                                        " bytes, more than one chunk of ", chunk_bytes,
                                        " (output.chunk_bytes, else --default_chunk_bytes)");
  if (options.single_message()) {
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
                          "output.single_message: ", size, "; read it as a stream")),
                      reason::kResultTooLargeForOneMessage,
                      {{"field", "output.single_message"}, {"limit", absl::StrCat(chunk_bytes)},
                       {"result_bytes", absl::StrCat(result_bytes)}});
  }
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        "Session: ", size, "; a session's results are one message: call Compute.",
                        method, " or StreamingCompute for it")),
                    reason::kResultTooLargeForOneMessage,
                    {{"limit", absl::StrCat(chunk_bytes)},
                     {"result_bytes", absl::StrCat(result_bytes)}});
}

}  // namespace

template <typename Request>
absl::StatusOr<AcceptedCompute> AcceptCompute(ServiceContext& service,
                                              const grpc::CallbackServerContext& context,
                                              std::shared_ptr<const Request> request,
                                              ResultFraming framing) {
  const v1::OutputOptions& options = request->output();
  AcceptedCompute accepted;
  GC_ASSIGN_OR_RETURN(accepted.output,
                      AdmitStream(service, context, options.chunk_bytes(), "output.chunk_bytes"));
  GC_RETURN_IF_ERROR(CheckBufferName(options.buffer_name(), "output.buffer_name"));
  accepted.output.accept_complete = options.accept_complete_result();
  const RequestScope scope{service.store, PrincipalOf(context), service.config.max_elements,
                           SharedMemoryFor(service, context)};
  GC_ASSIGN_OR_RETURN(accepted.prepared, ComputeOp<Request>::kPrepare(*request, scope));
  GC_ASSIGN_OR_RETURN(accepted.output.lane,
                      service.LaneFor(ComputeOp<Request>::kOperation, accepted.prepared.work));
  if (options.has_shared_memory()) {
    if (options.keep_on_device()) {
      return absl::InvalidArgumentError(
          "output.shared_memory and output.keep_on_device are both set; choose one");
    }
    GC_RETURN_IF_ERROR(ResolveOutputSlice(options.shared_memory(), scope, accepted.prepared));
    accepted.output.shared_memory_region_id = options.shared_memory().region_id();
  }
  const uint64_t result_bytes = ResultBytes(accepted.prepared);
  if (options.single_message() || framing == ResultFraming::kOneMessage) {
    accepted.output.accept_complete = true;
    // Kept and shared-memory results are one message whatever their size.
    if (!options.keep_on_device() && !options.has_shared_memory() &&
        result_bytes > accepted.output.chunk_bytes) {
      return RefuseLargeResult(options, ComputeOp<Request>::kMethod, result_bytes,
                               accepted.output.chunk_bytes);
    }
  }
  if (options.keep_on_device()) {
    GC_ASSIGN_OR_RETURN(
        accepted.output.keep,
        service.Reserve(result_bytes,
                        absl::StrCat(OperationLabel(ComputeOp<Request>::kOperation),
                                     " result kept on device"),
                        scope.principal, options.buffer_name()));
    accepted.output.buffer_name = options.buffer_name();
  }
  accepted.request = std::move(request);
  return accepted;
}

template <typename Call>
void StartCompute(ServiceContext& service, DynamicBatcher& batcher, Operation op, absl::Time start,
                  absl::StatusOr<AcceptedCompute> accepted, ResultStream<Call>& stream) {
  if (!accepted.ok()) {
    stream.Reject(accepted.status());
    return;
  }
  if (batcher.Accepts(accepted->prepared, accepted->output.keep.has_value())) {
    stream.StartInBatch(std::move(accepted->output), absl::Now() - start, batcher,
                        BatchMember{.op = op,
                                    .prepared = std::move(accepted->prepared),
                                    .request = std::move(accepted->request)});
    return;
  }
  const bool result_to_host = !accepted->output.keep.has_value() &&
                              ResultBytes(accepted->prepared) <= accepted->output.chunk_bytes;
  stream.Start(std::move(accepted->output), absl::Now() - start,
               [&service, request = std::move(accepted->request), result_to_host,
                prepared = std::make_shared<PreparedOperation>(std::move(accepted->prepared))](
                   OpContext& ctx) -> absl::StatusOr<StreamSource> {
                 StreamSource source;
                 GC_ASSIGN_OR_RETURN(source.array,
                                     Execute(*prepared, service.backend, service.device_queues,
                                             service.metrics, ctx, source.times, result_to_host));
                 return source;
               });
}

#define GC_ACCEPT_COMPUTE(Request)                                                          \
  template absl::StatusOr<AcceptedCompute> AcceptCompute<Request>(                           \
      ServiceContext&, const grpc::CallbackServerContext&, std::shared_ptr<const Request>, \
      ResultFraming);
GC_ACCEPT_COMPUTE(v1::DiscountProductRequest)
GC_ACCEPT_COMPUTE(v1::HaversineGridRequest)
GC_ACCEPT_COMPUTE(v1::NormalizeRequest)
GC_ACCEPT_COMPUTE(v1::LombScargleRequest)
#undef GC_ACCEPT_COMPUTE

template void StartCompute(ServiceContext&, DynamicBatcher&, Operation, absl::Time,
                           absl::StatusOr<AcceptedCompute>, ResultStreamReactor&);
template void StartCompute(ServiceContext&, DynamicBatcher&, Operation, absl::Time,
                           absl::StatusOr<AcceptedCompute>, SessionRequestStream&);

}  // namespace gpucompute
