// gpucompute.v1.Buffers: Upload (client streaming, one reactor), Download (the
// shared result stream), Delete and List (unary, answered inline: map operations).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/executor.h"
#include "server/request_parse.h"
#include "server/service_context.h"
#include "server/resumable_uploads.h"

namespace gpucompute {

// List's default and largest page: a BufferInfo takes under 500 bytes, so a page
// stays far below gRPC's default 4 MiB message limit.
inline constexpr uint32_t kMaxListPageSize = 1000;

class BuffersService final : public ParsingService<v1::Buffers> {
 public:
  explicit BuffersService(ServiceContext& service);

 private:
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* context,
                                                    v1::BufferInfo* response);
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* bytes);
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* bytes, v1::DeleteResponse* response);
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* bytes, v1::ListResponse* response);
  // Delete's and List's work, from their request bytes.
  absl::Status DeleteBuffer(const grpc::ByteBuffer& bytes, const std::string& principal,
                            v1::DeleteResponse* response) const;
  absl::Status ListPage(const grpc::ByteBuffer& bytes, const std::string& principal,
                        v1::ListResponse* response) const;
  absl::Status SessionStatus(const grpc::ByteBuffer& bytes, const std::string& principal,
                             v1::UploadStatusResponse* response) const;

  ServiceContext& service_;
  // Closes Upload streams whose client stays silent and Download streams whose
  // client takes no message (stream_idle_timeout).
  Timer idle_timer_;
  ResumableUploads uploads_;
};

}  // namespace gpucompute
