// gpucompute.v1.SharedMemory: registering, unregistering and listing the
// shared-memory regions of same-host clients (server/shared_memory_registry.h).
// Registration maps and pins memory, which may take long for a large region, so
// it runs on the executor (as does the unmapping); Unregister answers once no
// request uses the region.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/service_context.h"
#include "server/shared_memory_registry.h"

namespace gpucompute {

// Whether a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:/run/s")
// is on this host.
bool IsLocalPeer(absl::string_view peer);

// The registry, when the call may use shared memory: FAILED_PRECONDITION when the
// server runs without --allow_shared_memory, PERMISSION_DENIED on a connection
// that is not local.
absl::StatusOr<const SharedMemoryRegistry*> SharedMemoryFor(
    const ServiceContext& service, const grpc::CallbackServerContext& context);

// /proc/sys/kernel/random/boot_id, "" where the system has none.
std::string HostBootId();

// Every method raw: requests and responses are bytes (request_parse.h).
using RawSharedMemoryService = v1::SharedMemory::WithRawCallbackMethod_RegisterSystemSharedMemory<
    v1::SharedMemory::WithRawCallbackMethod_RegisterCudaSharedMemory<
        v1::SharedMemory::WithRawCallbackMethod_UnregisterSharedMemory<
            v1::SharedMemory::WithRawCallbackMethod_SharedMemoryStatus<
                v1::SharedMemory::Service>>>>;

class SharedMemoryService final : public RawSharedMemoryService {
 public:
  explicit SharedMemoryService(ServiceContext& service);

  grpc::ServerUnaryReactor* RegisterSystemSharedMemory(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RegisterCudaSharedMemory(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) override;
  // Answers once no request uses the region.
  grpc::ServerUnaryReactor* UnregisterSharedMemory(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SharedMemoryStatus(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) override;

 private:
  // Parses and checks a registration on the gRPC thread; `open` then maps the
  // region on the executor and the call finishes from there.
  template <typename Request, typename Open>
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response,
                                     RpcMethod method, Open open);
  absl::Status Status(const grpc::ByteBuffer& bytes, const std::string& principal,
                      v1::SharedMemoryStatusResponse* response) const;

  ServiceContext& service_;
};

}  // namespace gpucompute
