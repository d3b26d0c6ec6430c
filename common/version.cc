#include "common/version.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace gpucompute {

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", GPUCOMPUTE_VERSION, "\n",
                      "git commit: ", GPUCOMPUTE_GIT_COMMIT, "\n",
                      "CUDA: ", GPUCOMPUTE_CUDA_VERSION, ", architectures ",
                      GPUCOMPUTE_CUDA_ARCHITECTURES, "\n",
                      "gRPC: ", grpc::Version(), "\n");
}

}  // namespace gpucompute
