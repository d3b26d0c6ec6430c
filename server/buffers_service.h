// gpucompute.v1.Buffers: Upload (client streaming, one reactor), Download (the
// shared result stream), Delete and List (unary, answered inline: map operations).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/executor.h"
#include "server/service_context.h"
#include "server/resumable_uploads.h"

namespace gpucompute {

// List's default and largest page: a BufferInfo takes under 500 bytes, so a page
// stays far below gRPC's default 4 MiB message limit.
inline constexpr uint32_t kMaxListPageSize = 1000;

// Every method raw: requests and responses are bytes (request_parse.h).
using RawBuffersService = v1::Buffers::WithRawCallbackMethod_Upload<
    v1::Buffers::WithRawCallbackMethod_Download<v1::Buffers::WithRawCallbackMethod_Delete<
        v1::Buffers::WithRawCallbackMethod_List<
            v1::Buffers::WithRawCallbackMethod_UploadStatus<v1::Buffers::Service>>>>>;

class BuffersService final : public RawBuffersService {
 public:
  explicit BuffersService(ServiceContext& service);

  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* context,
                                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UploadStatus(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  // Delete's, List's and UploadStatus's work, from their request bytes.
  absl::Status DeleteBuffer(const grpc::ByteBuffer& bytes, const std::string& principal,
                            v1::DeleteResponse* response) const;
  absl::Status ListPage(const grpc::ByteBuffer& bytes, const std::string& principal,
                        v1::ListResponse* response) const;
  absl::Status ResumableUploadStatus(const grpc::ByteBuffer& bytes, const std::string& principal,
                                     v1::UploadStatusResponse* response) const;

  ServiceContext& service_;
  // Closes Upload streams whose client stays silent and Download streams whose
  // client takes no message (stream_idle_timeout).
  Timer idle_timer_;
  ResumableUploads uploads_;
};

}  // namespace gpucompute
