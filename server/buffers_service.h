// gpucompute.v1.Buffers: Upload (client streaming, one reactor), Download (the
// shared result stream), Delete and List (unary, answered inline: map operations).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/executor.h"
#include "server/service_context.h"

namespace gpucompute {

// List's default and largest page: a BufferInfo takes under 500 bytes, so a page
// stays far below gRPC's default 4 MiB message limit.
inline constexpr uint32_t kMaxListPageSize = 1000;

class BuffersService final : public v1::Buffers::CallbackService {
 public:
  explicit BuffersService(ServiceContext& service) : service_(service) {}

  grpc::ServerReadReactor<v1::UploadRequest>* Upload(grpc::CallbackServerContext* context,
                                                     v1::BufferInfo* response) override;
  grpc::ServerWriteReactor<v1::ResultChunk>* Download(grpc::CallbackServerContext* context,
                                                      const v1::DownloadRequest* request) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context,
                                   const v1::DeleteRequest* request,
                                   v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const v1::ListRequest* request,
                                 v1::ListResponse* response) override;

 private:
  absl::Status ListPage(const v1::ListRequest& request, const std::string& principal,
                        v1::ListResponse* response) const;

  ServiceContext& service_;
  // Closes Upload streams whose client stays silent (stream_idle_timeout).
  Timer idle_timer_;
};

}  // namespace gpucompute
