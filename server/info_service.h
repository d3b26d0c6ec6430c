// gpucompute.v1.Server: what this server is and what it accepts.
#pragma once

#include <string>

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/service_context.h"

namespace gpucompute {

inline constexpr char kVersion[] = "0.1.0";

class InfoService final : public v1::Server::CallbackService {
 public:
  InfoService(ServiceContext& service, std::string backend_note)
      : service_(service), backend_note_(std::move(backend_note)) {}

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const v1::GetInfoRequest* request,
                                    v1::ServerInfo* response) override;

 private:
  ServiceContext& service_;
  const std::string backend_note_;
};

}  // namespace gpucompute
