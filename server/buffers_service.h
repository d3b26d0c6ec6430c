// gpucompute.v1.Buffers: Upload (client streaming, one reactor), Download (the
// shared result stream), Delete and List (unary, answered inline: map operations).
#pragma once

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/service_context.h"

namespace gpucompute {

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
  ServiceContext& service_;
};

}  // namespace gpucompute
