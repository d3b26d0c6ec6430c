// What every service needs, owned by GpuComputeServer and shared by reference.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/server_context.h"
#include "kernels/backend.h"
#include "server/admission.h"
#include "server/buffer_store.h"
#include "server/config.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/request_parse.h"
#include "server/shared_memory_registry.h"
#include "server/status_convert.h"

namespace gpucompute {

struct ServiceContext {
  const ServerConfig& config;
  Backend& backend;
  BufferStore& store;
  Executor& executor;
  Metrics& metrics;
  Admission& admission;
  DeviceQueues& device_queues;
  SharedMemoryRegistry& shared_memory;
  // Set when the server starts draining: new work gets UNAVAILABLE.
  const std::atomic<bool>& draining;

  // output.chunk_bytes (0 = default) checked against the configured bounds, and
  // capped so that a chunk message fits a default client's 4 MiB receive limit.
  absl::StatusOr<uint32_t> ResolveChunkBytes(uint32_t requested, absl::string_view field) const;
  // RESOURCE_EXHAUSTED naming --max_metadata_bytes when the call's client
  // metadata is larger, counted as a metadata_size rejection.
  absl::Status CheckMetadata(const grpc::CallbackServerContext& context) const;
  // A unary call answered inline: the metadata check, then `body` (returning
  // absl::Status, filling `response`), its outcome recorded once and the call
  // finished with it, `response` serialized into the call's `response_bytes`.
  template <typename Body>
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context, RpcMethod method,
                                        const google::protobuf::MessageLite& response,
                                        grpc::ByteBuffer* response_bytes, Body body) const {
    RpcRecorder rpc(metrics, method, *context);
    absl::Status result = CheckMetadata(*context);
    if (result.ok()) result = body();
    const grpc::Status status = ToGrpcStatus(result);
    rpc.Done(status.error_code());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(AnswerWith(status, response, response_bytes));
    return reactor;
  }
  // A new request: UNAVAILABLE while draining, RESOURCE_EXHAUSTED over the
  // metadata limit or an in-flight limit. The ticket is held until the request
  // is finished.
  absl::StatusOr<Admission::Ticket> Admit(const grpc::CallbackServerContext& context) const;
  // The store's Reserve and the executor's SubmitRequest (the client being the
  // call's connection), each counting its refusals (quota, queue_full) in the
  // rejection metrics, requests dropped from a full queue included.
  absl::StatusOr<BufferStore::Reservation> Reserve(uint64_t bytes, absl::string_view what,
                                                   absl::string_view principal) const;
  absl::Status SubmitRequest(Executor::RequestTask task, const grpc::CallbackServerContext& context,
                             Executor::Lane lane) const;
  // The same for a task of `client` (a connection's peer string).
  absl::Status SubmitRequest(Executor::RequestTask task, absl::string_view client,
                             Executor::Lane lane) const;
  // The lane for `work` units of `op` (prepared_operation.h's PreparedOperation::work):
  // small work may use the reserved lane. Over --max_work_per_request:
  // INVALID_ARGUMENT naming it, counted as a work_limit rejection.
  absl::StatusOr<Executor::Lane> LaneFor(Operation op, int64_t work) const;
};

}  // namespace gpucompute
