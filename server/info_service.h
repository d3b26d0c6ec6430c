// gpucompute.v1.Server: what this server is and what it accepts.
#pragma once

#include <string>

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/service_context.h"

namespace gpucompute {

inline constexpr char kVersion[] = "0.1.0";

// GetInfo raw: its request and response are bytes (request_parse.h).
using RawInfoService = v1::Server::WithRawCallbackMethod_GetInfo<v1::Server::Service>;

class InfoService final : public RawInfoService {
 public:
  InfoService(ServiceContext& service, std::string backend_note);

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

 private:
  // GetInfo's answer, once its request parsed.
  void Describe(v1::ServerInfo* response) const;

  ServiceContext& service_;
  const std::string backend_note_;
};

}  // namespace gpucompute
