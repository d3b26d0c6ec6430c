// What the server calls its work, for metrics labels and messages: every RPC it
// implements (RpcMethod, the grpc_server_* families) and, among them, the
// operations that are admitted and carry tensor data (Operation, the
// `operation` label of the gpucompute_* families).
#pragma once

#include <array>

#include "absl/strings/string_view.h"

namespace gpucompute {

// The four compute RPCs, Upload, Download and StreamingCompute: each holds an
// admission ticket while it runs.
enum class Operation {
  kDiscountProduct, kHaversineGrid, kNormalize, kLombScargle, kUpload, kDownload,
  kStreamingCompute,
};
inline constexpr int kOperationCount = 7;

// The `operation` label ("discount_product", ..., "download").
inline absl::string_view OperationLabel(Operation op) {
  constexpr std::array<absl::string_view, kOperationCount> kLabels = {
      "discount_product", "haversine_grid", "normalize", "lombscargle", "upload", "download",
      "streaming_compute"};
  return kLabels[static_cast<int>(op)];
}

// Every RPC the server implements; the first kOperationCount are the operations,
// in the same order.
enum class RpcMethod {
  kDiscountProduct, kHaversineGrid, kNormalize, kLombScargle,
  kUpload, kDownload, kStreamingCompute, kDelete, kList, kGetInfo, kHealthCheck, kHealthWatch,
  kRegisterSystemSharedMemory, kRegisterCudaSharedMemory, kUnregisterSharedMemory,
  kSharedMemoryStatus, kUploadStatus,
  // Each request of a Compute.Session call (server/session.h) counts as one call.
  kSession,
};
inline constexpr int kRpcMethodCount = 18;

// The RPC that carries `op`.
constexpr RpcMethod RpcMethodOf(Operation op) { return static_cast<RpcMethod>(op); }

}  // namespace gpucompute
