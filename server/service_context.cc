#include "server/service_context.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gpucompute {

namespace {

// A default gRPC client receives messages of at most 4 MiB.
constexpr uint32_t kDefaultClientMaxMessageBytes = 4u << 20;
// ResultChunk and ResultData framing around the data bytes: tags, lengths and
// the offset varint (about 20 bytes), with room to spare.
constexpr uint32_t kMaxChunkFramingBytes = 64;
constexpr uint32_t kMaxChunkPayloadBytes = kDefaultClientMaxMessageBytes - kMaxChunkFramingBytes;

}  // namespace

absl::StatusOr<uint32_t> ServiceContext::ResolveChunkBytes(uint32_t requested,
                                                           absl::string_view field) const {
  if (requested == 0) return std::min(config.default_chunk_bytes, kMaxChunkPayloadBytes);
  if (requested < config.min_chunk_bytes || requested > config.max_chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", requested,
                                                   "; it must lie in [", config.min_chunk_bytes,
                                                   ", ", config.max_chunk_bytes, "] (or 0)"));
  }
  // Every allowed size reaches a default client: the data shrinks to fit the framing.
  return std::min(requested, kMaxChunkPayloadBytes);
}

absl::Status ServiceContext::CheckMetadata(const grpc::CallbackServerContext& context) const {
  uint64_t bytes = 0;
  for (const auto& [key, value] : context.client_metadata()) bytes += key.size() + value.size();
  if (bytes <= config.max_metadata_bytes) return absl::OkStatus();
  metrics.Rejected(Rejection::kMetadataSize);
  return absl::ResourceExhaustedError(absl::StrCat("request metadata is ", bytes,
                                                   " bytes; the limit is ",
                                                   config.max_metadata_bytes,
                                                   " (max_metadata_bytes)"));
}

namespace {

absl::StatusOr<Admission::Ticket> AdmitTo(const ServiceContext& service, Admission& admission,
                                          const grpc::CallbackServerContext& context) {
  if (service.draining.load()) {
    service.metrics.Rejected(Rejection::kUnavailable);
    return absl::UnavailableError("server is draining; retry on another replica");
  }
  GC_RETURN_IF_ERROR(service.CheckMetadata(context));
  absl::StatusOr<Admission::Ticket> ticket = admission.Enter(context.peer());
  if (!ticket.ok()) service.metrics.Rejected(Rejection::kInFlightLimit);
  return ticket;
}

}  // namespace

absl::StatusOr<Admission::Ticket> ServiceContext::Admit(
    const grpc::CallbackServerContext& context) const {
  return AdmitTo(*this, admission, context);
}

absl::StatusOr<Admission::Ticket> ServiceContext::AdmitClientStream(
    const grpc::CallbackServerContext& context) const {
  return AdmitTo(*this, stream_admission, context);
}

absl::StatusOr<BufferStore::Reservation> ServiceContext::Reserve(
    uint64_t bytes, absl::string_view what, absl::string_view principal,
    absl::string_view name) const {
  absl::StatusOr<BufferStore::Reservation> reservation =
      store.Reserve(bytes, what, principal, name);
  if (!reservation.ok()) {
    metrics.Rejected(IsBufferCountRefusal(reservation.status()) ? Rejection::kBufferCount
                                                                 : Rejection::kQuota);
  }
  return reservation;
}

absl::Status ServiceContext::SubmitRequest(Executor::RequestTask task,
                                           const grpc::CallbackServerContext& context,
                                           Executor::Lane lane) const {
  return SubmitRequest(std::move(task), context.peer(), lane);
}

absl::Status ServiceContext::SubmitRequest(Executor::RequestTask task, absl::string_view client,
                                           Executor::Lane lane) const {
  absl::Status submitted = executor.SubmitRequest(
      [this, task = std::move(task)](absl::Status admitted) mutable {
        if (!admitted.ok()) metrics.Rejected(Rejection::kQueueFull);
        std::move(task)(std::move(admitted));
      },
      client, lane);
  if (!submitted.ok()) metrics.Rejected(Rejection::kQueueFull);
  return submitted;
}

absl::StatusOr<Executor::Lane> ServiceContext::LaneFor(Operation op, int64_t work) const {
  if (work > config.max_work_per_request) {
    metrics.Rejected(Rejection::kWorkLimit);
    return absl::InvalidArgumentError(absl::StrCat(
        OperationLabel(op), " needs ", work,
        " work units (batch x samples x frequencies for lombscargle, result elements "
        "otherwise); the limit is ", config.max_work_per_request, " (max_work_per_request)"));
  }
  return work <= config.small_request_work ? Executor::Lane::kSmall : Executor::Lane::kGeneral;
}

}  // namespace gpucompute
