// gpucompute.v1.Server: what this server is and what it accepts.
#pragma once

#include <string>

#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "server/request_parse.h"
#include "server/service_context.h"

namespace gpucompute {

inline constexpr char kVersion[] = "0.1.0";

class InfoService final : public ParsingService<v1::Server> {
 public:
  InfoService(ServiceContext& service, std::string backend_note);

 private:
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* bytes, v1::ServerInfo* response);
  // GetInfo's answer, once its request parsed.
  void Describe(v1::ServerInfo* response) const;

  ServiceContext& service_;
  const std::string backend_note_;
};

}  // namespace gpucompute
