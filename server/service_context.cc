#include "server/service_context.h"

#include "absl/status/status.h"
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute {

absl::StatusOr<uint32_t> ServiceContext::ResolveChunkBytes(uint32_t requested,
                                                           absl::string_view field) const {
  if (requested == 0) return config.default_chunk_bytes;
  if (requested < config.min_chunk_bytes || requested > config.max_chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", requested,
                                                   "; it must lie in [", config.min_chunk_bytes,
                                                   ", ", config.max_chunk_bytes, "] (or 0)"));
  }
  return requested;
}

absl::StatusOr<Admission::Ticket> ServiceContext::Admit(
    const grpc::CallbackServerContext& context) const {
  if (draining.load()) {
    metrics.Rejected(Rejection::kUnavailable);
    return absl::UnavailableError("server is draining; retry on another replica");
  }
  absl::StatusOr<Admission::Ticket> ticket = admission.Enter(context.peer());
  if (!ticket.ok()) metrics.Rejected(Rejection::kInFlightLimit);
  return ticket;
}

absl::StatusOr<BufferStore::Reservation> ServiceContext::Reserve(
    uint64_t bytes, absl::string_view what, absl::string_view principal) const {
  absl::StatusOr<BufferStore::Reservation> reservation = store.Reserve(bytes, what, principal);
  if (!reservation.ok()) metrics.Rejected(Rejection::kQuota);
  return reservation;
}

absl::Status ServiceContext::SubmitRequest(Executor::Task task) const {
  absl::Status submitted = executor.SubmitRequest(std::move(task));
  if (!submitted.ok()) metrics.Rejected(Rejection::kQueueFull);
  return submitted;
}

}  // namespace gpucompute
