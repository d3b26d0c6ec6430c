#include "server/shared_memory_service.h"

#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "kernels/array.h"
#include "server/buffer_store.h"
#include "server/proto_convert.h"
#include "server/security.h"

namespace gpucompute {
namespace {

// A unary call finished later, from another thread: its outcome recorded once,
// and its `Response` serialized into the call's response bytes when it is OK.
template <typename Response>
class PendingCall {
 public:
  PendingCall(grpc::CallbackServerContext* context, RpcMethod method, Metrics& metrics,
              grpc::ByteBuffer* response_bytes)
      : reactor_(context->DefaultReactor()), rpc_(metrics, method, *context),
        response_bytes_(response_bytes) {}

  // Finishes the call and deletes this.
  void Finish(const absl::Status& status) {
    const grpc::Status grpc_status = AnswerWith(ToGrpcStatus(status), response_, response_bytes_);
    rpc_.Done(grpc_status.error_code());
    grpc::ServerUnaryReactor* reactor = reactor_;
    delete this;
    reactor->Finish(grpc_status);
  }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  Response& response() { return response_; }

 private:
  grpc::ServerUnaryReactor* const reactor_;
  RpcRecorder rpc_;
  grpc::ByteBuffer* const response_bytes_;
  Response response_;
};

void ToRegionInfo(const RegisteredRegion& entry, v1::SharedMemoryRegionInfo* info) {
  info->set_id(entry.id);
  info->set_name(entry.name);
  info->set_kind(entry.kind == SharedMemoryKind::kSystem ? v1::SHARED_MEMORY_SYSTEM
                                                         : v1::SHARED_MEMORY_CUDA);
  info->set_key(entry.key);
  info->set_byte_size(entry.region->byte_size());
  const int device = entry.region->device();
  info->set_location(device == kHostDevice && entry.region->pinned()
                         ? "host (pinned)"
                         : std::string(DeviceLabel(device)));
  info->set_created_unix_ms(absl::ToUnixMillis(entry.created));
}

}  // namespace

bool IsLocalPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) return true;
  if (absl::ConsumePrefix(&peer, "ipv4:")) return absl::StartsWith(peer, "127.");
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    // "[::1]:port" or, URL-encoded, "%5B::1%5D:port"; also IPv4-mapped loopback.
    for (absl::string_view open : {"[", "%5B", "%5b"}) {
      absl::string_view host = peer;
      if (!absl::ConsumePrefix(&host, open)) continue;
      return absl::StartsWith(host, "::1]") || absl::StartsWith(host, "::1%5") ||
             absl::StartsWithIgnoreCase(host, "::ffff:127.");
    }
  }
  return false;
}

absl::StatusOr<const SharedMemoryRegistry*> SharedMemoryFor(
    const ServiceContext& service, const grpc::CallbackServerContext& context) {
  if (!service.config.allow_shared_memory) return SharedMemoryOff();
  const std::string peer = context.peer();
  if (!IsLocalPeer(peer)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shared memory is for clients on the server's host, and this connection comes from ",
        peer, "; send the data (tensor or buffer_id) instead"));
  }
  return &service.shared_memory;
}

std::string HostBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

SharedMemoryService::SharedMemoryService(ServiceContext& service) : service_(service) {}

grpc::ServerUnaryReactor* SharedMemoryService::RegisterSystemSharedMemory(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Register<v1::RegisterSystemSharedMemoryRequest>(
      context, request, response, RpcMethod::kRegisterSystemSharedMemory,
      [this](const v1::RegisterSystemSharedMemoryRequest& request) {
        return SharedMemoryRegion::MapSystem(service_.backend, request.key(), request.offset(),
                                             request.byte_size());
      });
}

grpc::ServerUnaryReactor* SharedMemoryService::RegisterCudaSharedMemory(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Register<v1::RegisterCudaSharedMemoryRequest>(
      context, request, response, RpcMethod::kRegisterCudaSharedMemory,
      [this](const v1::RegisterCudaSharedMemoryRequest& request) {
        return SharedMemoryRegion::OpenCuda(service_.backend, request.ipc_handle(),
                                            request.pci_bus_id(), request.offset(),
                                            request.byte_size());
      });
}

grpc::ServerUnaryReactor* SharedMemoryService::SharedMemoryStatus(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  v1::SharedMemoryStatusResponse answer;
  return service_.FinishUnary(context, RpcMethod::kSharedMemoryStatus, answer, response, [&] {
    return Status(*request, PrincipalOf(*context), &answer);
  });
}

template <typename Request, typename Open>
grpc::ServerUnaryReactor* SharedMemoryService::Register(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* bytes,
                                                        grpc::ByteBuffer* response,
                                                        RpcMethod method, Open open) {
  auto* call = new PendingCall<v1::SharedMemoryRegionInfo>(context, method, service_.metrics,
                                                           response);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  auto request = std::make_shared<Request>();
  std::string principal = PrincipalOf(*context);
  absl::Status checked = [&]() -> absl::Status {
    GC_RETURN_IF_ERROR(service_.CheckMetadata(*context));
    GC_ASSIGN_OR_RETURN(*request, ParseRequest<Request>(*bytes));
    GC_RETURN_IF_ERROR(SharedMemoryFor(service_, *context).status());
    return CheckBufferName(request->name(), "name");
  }();
  if (!checked.ok()) {
    call->Finish(checked);
    return reactor;
  }
  absl::Status submitted = service_.SubmitRequest(
      [this, call, request, open,
       principal = std::move(principal)](absl::Status admitted) mutable {
        if (!admitted.ok()) {  // dropped from a full queue
          call->Finish(admitted);
          return;
        }
        absl::Status status = [&]() -> absl::Status {
          RegisteredRegion entry;
          entry.owner = principal;
          entry.name = request->name();
          if constexpr (std::is_same_v<Request, v1::RegisterSystemSharedMemoryRequest>) {
            entry.key = request->key();
          } else {
            entry.kind = SharedMemoryKind::kCuda;
          }
          // Before mapping anything: the limits (orphans dropped first) and the key.
          GC_RETURN_IF_ERROR(
              service_.shared_memory.CheckRoom(principal, request->byte_size(), entry.key));
          GC_ASSIGN_OR_RETURN(entry.region, open(*request));
          GC_ASSIGN_OR_RETURN(const RegisteredRegion added,
                              service_.shared_memory.Add(std::move(entry)));
          ToRegionInfo(added, &call->response());
          return absl::OkStatus();
        }();
        call->Finish(status);
      },
      *context, Executor::Lane::kGeneral);
  if (!submitted.ok()) call->Finish(submitted);
  return reactor;
}

grpc::ServerUnaryReactor* SharedMemoryService::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes,
    grpc::ByteBuffer* response) {
  auto* call = new PendingCall<v1::UnregisterSharedMemoryResponse>(
      context, RpcMethod::kUnregisterSharedMemory, service_.metrics, response);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> region =
      [&]() -> absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> {
    GC_RETURN_IF_ERROR(service_.CheckMetadata(*context));
    GC_ASSIGN_OR_RETURN(const v1::UnregisterSharedMemoryRequest request,
                        ParseRequest<v1::UnregisterSharedMemoryRequest>(*bytes));
    GC_RETURN_IF_ERROR(SharedMemoryFor(service_, *context).status());
    return service_.shared_memory.Remove(request.region_id(), PrincipalOf(*context));
  }();
  if (!region.ok()) {
    call->Finish(region.status());
    return reactor;
  }
  call->response().set_freed_bytes((*region)->byte_size());
  // Answered when the last request using the region lets go of it. Unpinning and
  // unmapping may take a while for a large region: the last reference is dropped
  // on the executor.
  (*region)->WhenReleased([call] { call->Finish(absl::OkStatus()); });
  service_.executor.SubmitContinuation([last = *std::move(region)]() mutable { last.reset(); });
  return reactor;
}

absl::Status SharedMemoryService::Status(const grpc::ByteBuffer& bytes,
                                         const std::string& principal,
                                         v1::SharedMemoryStatusResponse* response) const {
  GC_RETURN_IF_ERROR(ParseRequest<v1::SharedMemoryStatusRequest>(bytes).status());
  for (const RegisteredRegion& entry : service_.shared_memory.List(principal)) {
    ToRegionInfo(entry, response->add_regions());
  }
  response->set_used_bytes(service_.shared_memory.used_bytes(principal));
  response->set_quota_bytes(service_.shared_memory.principal_limit_bytes());
  return absl::OkStatus();
}

}  // namespace gpucompute
