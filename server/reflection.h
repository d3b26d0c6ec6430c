// gRPC server reflection, both protocol versions: grpc.reflection.v1 (what
// current clients ask first) and grpc.reflection.v1alpha (gRPC 1.51's own
// plugin serves only this one). The two are wire-identical, so one template
// answers both from the generated descriptor pool.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpucompute {

// Lists `services`, describes every file, symbol and extension of the pool.
template <typename Service, typename Request, typename Response>
class ReflectionService final : public Service::CallbackService {
 public:
  explicit ReflectionService(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

 private:
  const std::vector<std::string> services_;
};

using ReflectionV1 =
    ReflectionService<grpc::reflection::v1::ServerReflection,
                      grpc::reflection::v1::ServerReflectionRequest,
                      grpc::reflection::v1::ServerReflectionResponse>;
using ReflectionV1Alpha =
    ReflectionService<grpc::reflection::v1alpha::ServerReflection,
                      grpc::reflection::v1alpha::ServerReflectionRequest,
                      grpc::reflection::v1alpha::ServerReflectionResponse>;

// The full names reflection lists: `served` (the services registered on the
// server), the standard health service and both reflection services. Fails
// when one of them has no descriptor in the generated pool, since a client
// could list it but not describe it.
absl::StatusOr<std::vector<std::string>> ReflectedServices(std::vector<std::string> served);

extern template class ReflectionService<grpc::reflection::v1::ServerReflection,
                                        grpc::reflection::v1::ServerReflectionRequest,
                                        grpc::reflection::v1::ServerReflectionResponse>;
extern template class ReflectionService<grpc::reflection::v1alpha::ServerReflection,
                                        grpc::reflection::v1alpha::ServerReflectionRequest,
                                        grpc::reflection::v1alpha::ServerReflectionResponse>;

}  // namespace gpucompute
